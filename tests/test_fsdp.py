"""The 8-GPU path in miniature: FSDP2 on 2 CPU processes over gloo, through the trainer's own
`train()`, launched the way a user launches it:

    accelerate launch --config_file configs/fsdp_cpu.yaml train_brorl.py --preset smoke

The GPU configs ask for the same settings (fsdp_version 2, bf16, cpu_ram_efficient_loading, KL on
so a reference model exists); the project shards with torch's fully_shard itself on CPU and GPU
alike (run.fsdp2_models), so these runs take the GPU run's code path.
"""

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from safetensors.torch import load_file
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader

import rollout
import update
from checkpoints import latest_checkpoint
from conftest import ROOT, accelerate_launch, free_port, run_script, signal_tree
from tasks import load_tasks
from tiny_model import DEFAULT_TRAIN_DATA, TinySpec, ensure_tiny_model, warm_up

FSDP_CPU = "configs/fsdp_cpu.yaml"
# KL on (a sharded reference), reference resets at steps 2 and 4, 2 mini-batches, evals at steps 0
# and 4
RUN = ["train_brorl.py", "--preset", "smoke", "--kl-coef", "0.01", "--ref-reset-every", "2",
       "--total-steps", "4", "--eval-every", "100", "--process-group-timeout-min", "5"]
LOGGED = ("loss", "kl", "reward_mean", "grad_norm", "clip_frac", "entropy", "eval_pass1")
# In fp32 sharding changes only the order of sums. A logged number sums terms of order 1 over a
# step's 512 tokens (4 prompts x 16 rollouts x 8): another order moves it by <= 512 * 2^-24 of that.
FP32_SUMS = 512 * 2**-24
# A sharding bug moves weights by whole AdamW steps (lr 1e-4 each); rounding, by a fraction of one
# where Adam divides a gradient that is pure rounding (the key biases': softmax ignores a shift
# shared by all keys) by its eps 1e-8. A tenth of a step tells the two apart.
WEIGHTS_ATOL = 1e-4 / 10
# bf16 keeps 8 significant bits: u = 2^-8 relative per rounding. A log-prob and its gradient pass
# ~32 bf16 roundings (4 layers x 8 matmul and norm outputs): to first order, within 32u = 1/8.
BF16_REL = 32 * 2**-8


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """RUN under DDP in fp32 for a model (None: the tiny default), the run the FSDP2 runs are held
    to: launched once per model for the tests of this file."""
    runs = {}

    def launched(model: Path | None = None) -> Path:
        if model not in runs:
            runs[model] = tmp_path_factory.mktemp("ddp") / "run"
            accelerate_launch(*RUN, *(["--model", str(model)] if model else []),
                              "--output-dir", str(runs[model]))
        return runs[model]
    return launched


@pytest.fixture(scope="module")
def fsdp2_bf16_run(tmp_path_factory) -> Path:
    """RUN under configs/fsdp_cpu.yaml as it is (FSDP2, bf16), launched once for the tests of this
    file, which only read it."""
    out = tmp_path_factory.mktemp("fsdp2_bf16") / "run"
    accelerate_launch(*RUN, "--output-dir", str(out), config=FSDP_CPU)
    return out


@pytest.fixture(scope="module")
def tied_model_dir(tmp_path_factory):
    """The tiny default model with its output layer tied to the input embedding (as in the small
    Qwen2.5/Qwen3 instruct models), warmed up again so that some answers are right (3 s)."""
    model, tokenizer = rollout.load_policy(str(ensure_tiny_model()))
    model.config.tie_word_embeddings = True
    model.lm_head.weight = model.model.embed_tokens.weight
    warm_up(model, tokenizer, load_tasks(DEFAULT_TRAIN_DATA),
            TinySpec(warmup_steps=40, warmup_batch=64, warmup_lr_ramp=5))
    out = tmp_path_factory.mktemp("tied")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def rows(out_dir) -> list[dict]:
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]


def final_weights(out_dir) -> dict:
    return load_file(str(latest_checkpoint(out_dir) / "model" / "model.safetensors"))


def assert_same_training(ddp_dir: Path, fsdp_dir: Path) -> dict:
    """The two runs logged the same numbers (FP32_SUMS) and ended with the same weights
    (WEIGHTS_ATOL); returns the FSDP2 run's."""
    for ddp, fsdp in zip(rows(ddp_dir), rows(fsdp_dir), strict=True):
        for key in LOGGED:
            if key in ddp:
                assert fsdp[key] == pytest.approx(ddp[key], rel=FP32_SUMS, abs=FP32_SUMS), (
                    ddp["step"], key)
    ddp, fsdp = final_weights(ddp_dir), final_weights(fsdp_dir)
    assert ddp.keys() == fsdp.keys()
    for name in ddp:
        assert torch.allclose(ddp[name], fsdp[name], atol=WEIGHTS_ATOL), name
    return fsdp


@pytest.mark.parametrize("tied", [pytest.param(False, marks=pytest.mark.slow), True],
                         ids=["untied", "tied"])  # the tied output layer is the harder case
def test_fsdp2_on_two_cpu_processes_trains_exactly_what_ddp_trains(tied, tied_model_dir, ddp_run,
                                                                   tmp_path):
    """In fp32 (`--mixed_precision no`) sharding changes only the order of float sums: the same
    rollouts, the same logged numbers (FP32_SUMS) and, after 4 steps, the same weights
    (WEIGHTS_ATOL)."""
    model = ["--model", str(tied_model_dir)] if tied else []
    accelerate_launch("--mixed_precision", "no", *RUN, *model,
                      "--output-dir", str(tmp_path / "fsdp"), config=FSDP_CPU)
    fsdp = assert_same_training(ddp_run(tied_model_dir if tied else None), tmp_path / "fsdp")
    start = rollout.load_policy(str(tied_model_dir) if tied else str(ensure_tiny_model()))[0]
    output_layer = start.lm_head.weight
    # the output layer trained (under FSDP2 as under DDP), and stayed the embedding when tied
    assert not torch.allclose(fsdp.get("lm_head.weight", fsdp["model.embed_tokens.weight"]),
                              output_layer)
    trained = rollout.load_policy(str(latest_checkpoint(tmp_path / "fsdp") / "model"))[0]
    assert (trained.lm_head.weight is trained.model.embed_tokens.weight) == tied


@pytest.mark.slow  # compiling every layer in both processes: ~2 min on 2 cores
def test_fsdp2_with_compiled_layers_trains_what_eager_ddp_trains(ddp_run, tmp_path):
    """`--compile-layers` under FSDP2 (each layer compiled, then sharded: run.fsdp2_models), in
    fp32: compiled kernels and sharding change only the order of float sums."""
    accelerate_launch("--mixed_precision", "no", *RUN, "--compile-layers",
                      "--output-dir", str(tmp_path / "fsdp"), config=FSDP_CPU)
    assert_same_training(ddp_run(), tmp_path / "fsdp")


def test_fsdp2_in_bf16_gives_every_process_fp32_log_probs_and_a_whole_reference(tmp_path):
    """run.setup under configs/fsdp_cpu.yaml as it is (bf16, cpu_ram_efficient_loading): on both
    processes the log-probs are fp32 (not rounded to bf16 by an output cast) within bf16 compute
    error of the unsharded fp32 model's, the reference equals the policy (not the zeros that
    transformers loads off rank 0), and the reference reset works on shards."""
    accelerate_launch("tests/fsdp2_setup.py", str(ensure_tiny_model()), str(tmp_path),
                      config=FSDP_CPU)
    ranks = [json.loads((tmp_path / f"rank_{r}.json").read_text()) for r in (0, 1)]
    for rank in ranks:
        assert rank["dtype"] == "torch.float32" and not rank["all_bf16_representable"]
        assert rank["max_error_vs_fp32"] < BF16_REL * rank["max_abs_fp32_logprob"]
        assert rank["reference_abs_sum"] == rank["policy_abs_sum"] > 0
        # the same bf16 arithmetic on both: 0 exactly, until the update moves the policy's
        # log-probs by more than a bf16 rounding of ones of order 1
        assert rank["kl_before_update"] == 0.0 and rank["kl_after_update"] > 2**-8
        assert rank["kl_after_reset"] == 0.0
    # each process holds its own half of the weights
    assert ranks[0]["policy_abs_sum"] != ranks[1]["policy_abs_sum"]


def test_fsdp2_in_bf16_follows_the_fp32_run_within_bf16_error(ddp_run, fsdp2_bf16_run):
    ddp, bf16 = rows(ddp_run()), rows(fsdp2_bf16_run)
    # step 1 samples from the same weights: the same rollouts, the update differs by bf16 compute
    first_ddp, first_bf16 = ddp[1], bf16[1]
    assert first_bf16["reward_mean"] == first_ddp["reward_mean"]
    for key in ("loss", "kl", "grad_norm"):
        assert first_bf16[key] == pytest.approx(first_ddp[key], rel=BF16_REL), key
    # the bf16 trainer's log-probs against the fp32 sampler's: apart by about u for log-probs of
    # order 1, where fp32 arithmetic would leave ~2^-24
    assert 2**-8 / 4 < first_bf16["mismatch_abs_mean"] < 2**-8 * 4
    start = rollout.load_policy(str(ensure_tiny_model()))[0].state_dict()
    fp32, mixed = final_weights(ddp_run()), final_weights(fsdp2_bf16_run)
    moved = sum(float((fp32[k] - start[k]).norm() ** 2) for k in fp32) ** 0.5
    apart = sum(float((fp32[k] - mixed[k]).norm() ** 2) for k in fp32) ** 0.5
    # AdamW's step m / sqrt(v) carries the gradient's error twice (2 * BF16_REL = 1/4), doubled for
    # 8 optimizer steps compounding it; a lost update (bf16 master weights) is apart ~ moved
    assert apart < 4 * BF16_REL * moved, (apart, moved)


def test_an_fsdp2_run_resumed_without_fsdp_is_refused_in_one_line(fsdp2_bf16_run, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(fsdp2_bf16_run, copy)
    refused = run_script("train_brorl.py", "--output-dir", str(copy), "--resume", check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1] == (
        f"error: {latest_checkpoint(copy)} was saved by an FSDP2 run and this one is launched "
        "without FSDP: resume it with the accelerate config it was started with")


def four_process_config(tmp_path, hybrid: bool) -> str:
    """configs/fsdp_cpu.yaml on 4 processes; `hybrid`: 2 replicas x 2 shards, as
    configs/fsdp_multinode.yaml asks of 2 nodes x 8 GPUs."""
    text = (ROOT / FSDP_CPU).read_text().replace("num_processes: 2", "num_processes: 4")
    if hybrid:
        text += ("parallelism_config:\n  parallelism_config_dp_replicate_size: 2\n"
                 "  parallelism_config_dp_shard_size: 2\n")
    path = tmp_path / f"{'hsdp' if hybrid else 'fsdp'}_4.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.slow  # 4 processes on 2 cores, twice: ~30-40 s
def test_hybrid_sharding_trains_what_full_sharding_trains_with_each_weight_in_half_as_many_shards(
        tmp_path):
    """HSDP (each weight sharded within a node and replicated across nodes: the multi-node
    config) on 4 CPU processes as 2 "nodes" x 2: the same logged numbers and weights as FSDP2 over
    all 4 in fp32, with every weight saved in 2 shards, not 4."""
    args = [*RUN, "--total-steps", "3", "--prompts-per-step", "4", "--threads", "1",
            "--mixed-precision", "no"]  # 3 steps: 4 processes on 2 cores are slow
    for hybrid in (False, True):
        accelerate_launch(*args, "--output-dir", str(tmp_path / f"hybrid_{hybrid}"),
                          config=four_process_config(tmp_path, hybrid))
    full, hybrid = tmp_path / "hybrid_False", tmp_path / "hybrid_True"
    for a, b in zip(rows(full), rows(hybrid), strict=True):
        for key in LOGGED:
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=FP32_SUMS, abs=FP32_SUMS), (a["step"],
                                                                                      key)
    full_weights, hybrid_weights = final_weights(full), final_weights(hybrid)
    for name in full_weights:
        assert torch.allclose(full_weights[name], hybrid_weights[name], atol=WEIGHTS_ATOL), name

    def shards(run_dir) -> int:
        sharded = latest_checkpoint(run_dir) / "state" / "sharded"
        metadata = FileSystemReader(str(sharded)).read_metadata().state_dict_metadata
        return len(metadata["policy.model.model.embed_tokens.weight"].chunks)
    assert (shards(full), shards(hybrid)) == (4, 2)


def test_an_fsdp2_run_starts_from_another_fsdp2_runs_checkpoint_and_not_from_an_unsharded_one(
        fsdp2_bf16_run, smoke_run, tmp_path):
    source, branch = fsdp2_bf16_run, tmp_path / "branch"
    kl = ["--kl-coef", "0.01", "--ref-reset-every", "2"]
    checkpoint = source / "checkpoints" / "step_000004"
    ran = accelerate_launch("train_brorl.py", "--preset", "smoke", *kl, "--total-steps", "1",
                            "--init-from", str(checkpoint), "--lr", "3e-4",
                            "--output-dir", str(branch), config=FSDP_CPU)
    assert f"initialised from {checkpoint}" in ran.stdout
    # the source's reference, reset at its step 4, is the branch's at its start
    source_reference = whole_reference(source / "reference" / "step_000004")
    branch_reference = whole_reference(branch / "reference" / "step_000000")
    assert all(torch.equal(source_reference[k], branch_reference[k]) for k in source_reference)
    unsharded = smoke_run  # one process, the same KL settings (conftest.SMOKE_RUN)
    refused = accelerate_launch("train_brorl.py", "--preset", "smoke", *kl, "--init-from",
                                str(unsharded / "checkpoints" / "step_000002"),
                                "--output-dir", str(tmp_path / "refused"), config=FSDP_CPU,
                                check=False)
    assert refused.returncode != 0 and (
        "error: --init-from " in refused.stderr
        and "was saved by a plain run and this one is launched with FSDP2" in refused.stderr)


def whole_reference(folder) -> dict:
    """A reference/step_N folder's shards, read whole into the tiny model's policy."""
    state = update.Policy(rollout.load_policy(str(ensure_tiny_model()))[0]).state_dict()
    dcp.load(state, checkpoint_id=folder)
    return state


def test_fsdp2_killed_with_sigkill_resumes_bit_identically(fsdp2_bf16_run, tmp_path):
    straight, crashed = fsdp2_bf16_run, tmp_path / "crashed"
    proc = subprocess.Popen([sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                             FSDP_CPU, "--main_process_port", str(free_port()), *RUN,
                             "--output-dir", str(crashed)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while (not (crashed / "checkpoints" / "step_000002").exists() and time.time() < deadline
           and proc.poll() is None):
        time.sleep(0.05)
    psutil.wait_procs(signal_tree(proc.pid, signal.SIGKILL), timeout=30)  # launcher, workers
    last = latest_checkpoint(crashed)
    assert last is not None and last.name < "step_000004", "the kill came too late to test anything"
    accelerate_launch(*RUN, "--output-dir", str(crashed), "--resume", config=FSDP_CPU)
    # the reference is kept once per reset (steps 2 and 4, what checkpoints 3 and 4 use), each
    # process its shards, not in the checkpoints
    sharded = latest_checkpoint(crashed) / "state" / "sharded"
    assert not [key for key in FileSystemReader(str(sharded)).read_metadata().state_dict_metadata
                if "reference" in key]
    assert sorted(p.name for p in (crashed / "reference").iterdir()) == ["step_000002",
                                                                         "step_000004"]

    whole, resumed = final_weights(straight), final_weights(crashed)
    assert whole.keys() == resumed.keys()
    assert all(torch.equal(whole[k], resumed[k]) for k in whole)
    logged = [untimed(row) for row in rows(straight)]
    assert [untimed(row) for row in rows(crashed)] == logged


def untimed(row: dict) -> dict:
    return {k: v for k, v in row.items() if not any(t in k for t in ("time", "per_s", "seconds"))}
