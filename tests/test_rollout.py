"""rollout.py: N samples per prompt, masks, sampling log-probs, truncation, batching."""

import copy
import re
import sys

import pytest
import torch

import rollout
from conftest import trainer_logprobs


def test_generate_returns_n_grouped_samples_with_consistent_masks(untrained_policy):
    model, tokenizer = untrained_policy
    prompts = rollout.encode_prompts(tokenizer, ["1+2=", "33+44="], chat_template=True)
    params = rollout.SamplingParams(n=5, max_new_tokens=6, max_batch_seqs=4)  # forces split batches
    out = rollout.generate(model, tokenizer, prompts, params, torch.Generator().manual_seed(0))
    assert out.group.tolist() == [0] * 5 + [1] * 5
    assert out.response_ids.shape == out.response_mask.shape == out.logprobs.shape
    assert out.response_ids.shape[1] <= 6 and len(out.texts) == 10
    lengths = out.response_mask.sum(-1)
    for row in range(10):
        length = int(lengths[row])
        assert out.response_mask[row, :length].all() and not out.response_mask[row, length:].any()
        assert (out.logprobs[row, :length] <= 0).all() and (out.logprobs[row, length:] == 0).all()
        ends_with_eos = int(out.response_ids[row, length - 1]) == tokenizer.eos_token_id
        assert bool(out.truncated[row]) == (not ends_with_eos)
        assert bool(out.truncated[row]) == (length == 6) or ends_with_eos
    assert (out.prompt_mask.sum(-1) == torch.tensor([4] * 5 + [6] * 5)).all()


def test_sampling_logprobs_equal_the_trainers_teacher_forced_logprobs(untrained_policy):
    model, tokenizer = untrained_policy
    prompts = rollout.encode_prompts(tokenizer, ["7+8=", "123+4=", "5="], chat_template=False)
    params = rollout.SamplingParams(n=8, temperature=0.8, max_new_tokens=8)
    out = rollout.generate(model, tokenizer, prompts, params, torch.Generator().manual_seed(1))
    recomputed = trainer_logprobs(model, out, temperature=0.8, micro_batch_tokens=40)
    assert torch.allclose(recomputed, out.logprobs, atol=1e-4)


def test_samples_that_drew_the_same_tokens_share_one_forward_row(untrained_policy):
    model, tokenizer = untrained_policy
    prompts = rollout.encode_prompts(tokenizer, ["7+8=", "123+4="], chat_template=False)
    rows_per_forward = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: rows_per_forward.append(len(kwargs["input_ids"])),
        with_kwargs=True)
    params = rollout.SamplingParams(n=48, temperature=0.05, max_new_tokens=6)  # peaked
    try:
        out = rollout.generate(model, tokenizer, prompts, params, torch.Generator().manual_seed(0))
    finally:
        hook.remove()
    assert rows_per_forward[0] == 2  # each prompt prefilled once
    # the forward before token t+1 has one row per distinct (prompt, first t tokens) still going
    lengths, live_samples = out.response_mask.sum(-1), 0
    for t, rows in enumerate(rows_per_forward[1:], start=1):
        live = (lengths > t).nonzero().squeeze(-1).tolist()
        prefixes = {(int(out.group[i]), tuple(out.response_ids[i, :t].tolist())) for i in live}
        assert rows == len(prefixes)
        live_samples += len(live)
    assert sum(rows_per_forward[1:]) < live_samples
    # every sample still draws its own token: the prefixes branch
    assert len(set(out.texts)) > 2
    recomputed = trainer_logprobs(model, out, temperature=0.05, micro_batch_tokens=64)
    # logits from another batch shape differ by fp32 sums' rounding, <= 1e-5 (test_update's
    # FP32_SHAPE_ATOL); divided by T = 0.05 that is 2e-4 in the log-probs
    assert torch.allclose(recomputed, out.logprobs, atol=1e-5 / 0.05)


def test_every_prompt_gets_its_samples_whatever_the_batch_plan():
    assert rollout.plan_batches([4, 4, 4], max_batch_seqs=5) == [[(0, 4), (1, 1)],
                                                                 [(1, 3), (2, 2)], [(2, 2)]]
    assert rollout.plan_batches([512], max_batch_seqs=256) == [[(0, 256)], [(0, 256)]]
    # a per-prompt allocation: a prompt given nothing is skipped
    assert rollout.plan_batches([3, 0, 6], max_batch_seqs=5) == [[(0, 3), (2, 2)], [(2, 4)]]


def test_samples_per_prompt_follow_counts_and_rounds_concatenate_onto_the_same_prompts(
        untrained_policy):
    model, tokenizer = untrained_policy
    prompts = rollout.encode_prompts(tokenizer, ["7+8=", "123+4=", "5="], chat_template=False)
    params = rollout.SamplingParams(n=2, max_new_tokens=4, max_batch_seqs=4)
    screen = rollout.generate(model, tokenizer, prompts, params, torch.Generator().manual_seed(1))
    extra = rollout.generate(model, tokenizer, prompts, params, torch.Generator().manual_seed(2),
                             counts=[5, 0, 1])
    assert extra.group.tolist() == [0, 0, 0, 0, 0, 2]
    assert (extra.prompt_ids[-1] == screen.prompt_ids[-1]).all()
    both = rollout.concat_rollouts([screen, extra], tokenizer.pad_token_id, group_offsets=[0, 0])
    assert torch.bincount(both.group).tolist() == [7, 2, 3]
    assert both.texts == screen.texts + extra.texts
    # rounds of different prompts: the second round's prompts follow the first's three, also when
    # the first round's last prompts got no sample
    first = rollout.generate(model, tokenizer, prompts, params, torch.Generator().manual_seed(3),
                             counts=[2, 0, 0])
    rounds = rollout.concat_rollouts([first, screen], tokenizer.pad_token_id, group_offsets=[0, 3])
    assert rounds.group.tolist() == [0, 0, 3, 3, 4, 4, 5, 5]


def test_top_p_samples_only_from_the_nucleus():
    logprobs = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]])).expand(2000, 4)
    tokens = rollout.sample_tokens(logprobs, top_p=0.7, generator=torch.Generator().manual_seed(0))
    assert set(tokens.tolist()) == {0, 1}  # 0.5 + 0.3 reaches 0.7
    tokens = rollout.sample_tokens(logprobs, top_p=1.0, generator=torch.Generator().manual_seed(0))
    assert set(tokens.tolist()) == {0, 1, 2, 3}


def test_same_seed_same_samples(untrained_policy):
    model, tokenizer = untrained_policy
    prompts = rollout.encode_prompts(tokenizer, ["9+9="], chat_template=False)
    params = rollout.SamplingParams(n=6, max_new_tokens=5)
    a = rollout.generate(model, tokenizer, prompts, params, torch.Generator().manual_seed(3))
    b = rollout.generate(model, tokenizer, prompts, params, torch.Generator().manual_seed(3))
    assert a.texts == b.texts and torch.equal(a.logprobs, b.logprobs)


def test_the_vllm_engine_without_vllm_installed_says_what_to_install(monkeypatch,
                                                                     untrained_model_dir):
    monkeypatch.setattr(rollout.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(rollout.EngineError, match="pip install -r requirements-vllm"):
        rollout.VLLMEngine(str(untrained_model_dir))
    assert rollout.default_engine() == "hf"


class RecordingLLM:
    """Stands in for vllm.LLM on a GPU, recording the calls VLLMEngine makes (vLLM's sleep is a
    no-op on CPU)."""

    def __init__(self):
        self.calls = []

    def sleep(self, level):
        self.calls.append(("sleep", level))

    def wake_up(self, tags=None):
        self.calls.append(("wake_up", tags))

    def collective_rpc(self, method, kwargs):
        self.calls.append((method, [name for name, _ in kwargs["weights_iterator"]]))

    def reset_prefix_cache(self):
        self.calls.append(("reset_prefix_cache",))


def test_vllm_wakes_its_weights_then_loads_the_new_ones_then_wakes_its_kv_cache(untrained_policy):
    model, _ = untrained_policy
    # no vLLM needed: only the order of calls is checked
    engine = object.__new__(rollout.VLLMEngine)
    engine.llm, engine.on_gpu, engine.sleeping = RecordingLLM(), True, False
    engine.sleep()
    engine.wake_up(model)
    assert [call[0] for call in engine.llm.calls] == ["sleep", "wake_up", "reload_weights",
                                                      "reset_prefix_cache", "wake_up"]
    assert (engine.llm.calls[1] == ("wake_up", ["weights"])
            and engine.llm.calls[-1] == ("wake_up", ["kv_cache"]))
    # every tensor, streamed while the KV cache sleeps
    assert engine.llm.calls[2][1] == list(model.state_dict())
    assert not engine.sleeping


def test_non_finite_sampler_logprobs_stop_the_step_naming_the_rows(untrained_policy):
    _, tokenizer = untrained_policy
    logprobs = [[-0.5, -1.0], [-0.25, float("nan")], [-0.125], [float("-inf")]]
    with pytest.raises(rollout.EngineError, match=r"2 rollouts \(rows \[1, 3\], prompts \[0, 1\]"):
        rollout.pack_rollouts(tokenizer, [[5, 6], [7]], [0, 0, 1, 1], [[8, 9], [8, 9], [8], [9]],
                              logprobs, [False] * 4)
    finite = rollout.pack_rollouts(tokenizer, [[5, 6], [7]], [0, 1], [[8, 9], [8]],
                                   logprobs[:1] + logprobs[2:3], [False] * 2)
    assert finite.logprobs.tolist() == [[-0.5, -1.0], [-0.125, 0.0]]


def test_the_command_refuses_sampling_settings_it_cannot_sample_with_in_one_line(monkeypatch):
    for argv, message in [(["-n", "0"], "-n and --max-new-tokens must be >= 1"),
                          (["--max-new-tokens", "-1"], "-n and --max-new-tokens must be >= 1"),
                          (["--temperature", "nan"], "--temperature must be >= 0.01 and finite"),
                          (["--temperature", "0.001"], "--temperature must be >= 0.01 and"),
                          (["--top-p", "0"], "--top-p must be in (0, 1]"),
                          (["--prompt", ""], "--prompt must not be empty")]:
        monkeypatch.setattr(sys, "argv", ["rollout.py", "--model", "m", "--prompt", "1+1=", *argv])
        with pytest.raises(SystemExit, match=re.escape(f"error: {message}")):
            rollout.main()


def test_a_diverged_policy_stops_sampling_with_one_line(untrained_policy):
    model, tokenizer = untrained_policy
    diverged = copy.deepcopy(model)
    with torch.no_grad():
        diverged.get_output_embeddings().weight[7, 0] = float("inf")
    prompts = rollout.encode_prompts(tokenizer, ["1+2="], chat_template=False)
    params = rollout.SamplingParams(n=3, max_new_tokens=4)
    with pytest.raises(rollout.EngineError, match="not finite at token 1: its weights have"):
        rollout.generate(diverged, tokenizer, prompts, params, torch.Generator().manual_seed(0))
