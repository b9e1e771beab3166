"""train_brorl.py end to end: config validation, a smoke run, resume after a crash."""

import dataclasses
import errno
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from accelerate.utils import DistributedType
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import monitor
import reward
import update
import rollout
import run
import tasks
import train_brorl
from checkpoints import checkpoint_problem, file_digest, latest_checkpoint
from conftest import (NO_BWRAP, ROOT, a_trainer_state, accelerate_launch, free_port,
                      run_script)
from tiny_model import ensure_tiny_model

SMOKE_KEYS = {"step", "reward_mean", "pass_rate", "samples_per_s", "shrink_frac", "shrink_worst",
              "verify/seconds", "verify/timeouts", "verify/cache_hit_rate"}


@pytest.mark.parametrize("args, message", [
    (["--n-rollouts", "1"], "n_rollouts must be >= 2"),
    (["--eps-low", "-0.1"], "eps_low must be in [0, 1)"),
    (["--prompts-per-step", "3", "--n-rollouts", "2", "--minibatches", "7"],
     "minibatches must be in [1, the 6 rollouts of a step], got 7"),
    (["--preset", "huge"], "unknown preset 'huge'"),
    (["--model", "/no/such/model"], "model path does not exist: /no/such/model"),
    (["--train-data", "/no/such.jsonl"], "data file not found: /no/such.jsonl"),
    (["--resume"], "--resume needs --output-dir"),
    (["--tis-cap", "0.5"], "tis_cap must be 0 (off) or >= 1"),
    (["--gpu-memory-utilization", "1.5"], "gpu_memory_utilization must be in (0, 1]"),
    (["--allocation", "knapsack", "--screen-rollouts", "1"], "screen_rollouts must be in [2, "),
    # nothing left to allocate
    (["--allocation", "knapsack", "--screen-rollouts", "256"], "screen_rollouts must be in [2, "),
    (["--allocation", "knapsack", "--allocation-cap", "100"], "allocation_cap must be in [n_rol"),
    (["--allocation", "knapsack", "--allocation-cap", "2000000000"], "2^24] (else the budget"),
    (["--allocation-history"], "allocation_history: only --allocation knapsack reads it"),
    (["--screen-rollouts", "8", "--allocation-cap", "64"],
     "screen_rollouts, allocation_cap: only --allocation knapsack reads it, and this run's"),
    (["--lr", "inf", "--temperature", "nan"],
     "settings must be finite float32 numbers, got temperature nan, lr inf"),
    (["--eval-temperature", "1e-40"],
     "temperatures must be >= 0.01 (vLLM samples any lower one at 0.01)"),
    (["--eps-high", "1e39"], "settings must be finite float32 numbers, got eps_high 1e+39"),
    (["--minibatches", "0"], "minibatches must be in [1, the 8192 rollouts of a step], got 0"),
    (["--seed", "-1"], "seed must be in [0, 2^32), got -1"),
    (["--threads", "-1"], "threads must be in [0, 2^16] (0: torch's default), got -1"),
    (["--max-grad-norm", "0"], "max_grad_norm must be > 0, got 0.0"),
    (["--verify-workers", "100000"], "verify_workers must be in [1, 255), got 100000"),
    (["--threads", "100000000000000000000"], "whole-number settings must be below 2^63, got "
                                             "threads 100000000000000000000"),
    (["--verify-step-timeout", "1e-9"], "verify_step_timeout >= 1 (seconds; checks past it"),
    (["--process-group-timeout-min", "1e9"], "process_group_timeout_min must be in (0, a week]"),
    (["--weight-decay", "-0.1"], "weight_decay must be >= 0, got -0.1"),
    (["--eval-max-problems", "-1"], "and eval_max_problems must be >= 0"),
    (["--output-dir", ""], "--output-dir must not be empty"),
    (["--n-rollouts", "9999999999"], "samples is over 2^24"),
    (["--model", __file__], f"model path is a file, not a model folder: {__file__}"),
    (["--eval-data-dir", "/no/such/folder"], "--eval-data-dir is not a folder: /no/such/folder"),
])
def test_bad_config_values_are_rejected_with_one_clear_line(args, message):
    with pytest.raises(tasks.InputError, match=re.escape(message)):
        train_brorl.parse_config(args)


def test_bad_config_on_the_command_line_prints_one_line_and_no_traceback():
    result = run_script("train_brorl.py", "--n-rollouts", "1", check=False)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        "error: n_rollouts must be >= 2 (a group baseline needs two rollouts), got 1"]


def test_presets_are_plain_overrides_and_flags_win():
    cfg = train_brorl.parse_config(["--preset", "smoke", "--total-steps", "5"])
    assert cfg.preset == "smoke" and cfg.n_rollouts == 16 and cfg.total_steps == 5
    # mini-batches of about equal weight: the batch need not divide evenly
    assert train_brorl.parse_config(["--preset", "smoke", "--minibatches", "3"]).minibatches == 3


# The paper's recipe (arXiv 2510.01180, Sec. 3-4.2); a silent change to a preset fails here.
PAPER_PRESET_TABLE = {
    #  option               brorl-paper               prorl-paper
    "model": ("nvidia/Nemotron-Research-Reasoning-Qwen-1.5B",) * 2,
    "n_rollouts": (512, 16),
    "prompts_per_step": (128, 512),
    "minibatches": (8, 8),  # the same number of PPO mini-batches per step
    "lr": (2e-6 * 8 ** 0.5, 2e-6),  # η = η_0·sqrt(B_new/B_0), B = 65,536 vs 8,192 samples
    "advantage": ("reinforce_pp_baseline",) * 2,
    "eps_low": (0.2, 0.2),
    "eps_high": (0.27, 0.27),
    "kl_estimator": ("k2", "k2"),
    "ref_reset_every": (200, 200),
    "dynamic_sampling": (True, True),
    "refill_rounds": (4, 4),
    "tis_cap": (2.0, 2.0),
    "max_new_tokens": (16384, 16384),
    "zero_truncated_reward": (True, True),
    "temperature": (1.2, 1.2),
    "engine": ("vllm", "vllm"),
    "total_steps": (191, 535),
    # the in-training eval is a cheap proxy; Table 1's protocol is eval.py's defaults
    "eval_samples": (4, 4),
    "eval_max_problems": (64, 64),
    "eval_temperature": (0.6, 0.6),
    "eval_top_p": (0.95, 0.95),
}


@pytest.mark.parametrize("column, preset", [(0, "brorl-paper"), (1, "prorl-paper")])
def test_paper_presets_hold_the_papers_recipe(column, preset):
    values = {**dataclasses.asdict(train_brorl.Config()), **train_brorl.PRESETS[preset]}
    for option, expected in PAPER_PRESET_TABLE.items():
        assert values[option] == pytest.approx(expected[column]), option


def test_paper_preset_demands_a_pinned_revision():
    with pytest.raises(tasks.InputError, match="--model-revision is required"):
        train_brorl.parse_config(["--preset", "brorl-paper"])


def test_the_one_gpu_preset_is_the_recipe_in_bf16_and_runs_at_tiny_size(tmp_path):
    preset = {**dataclasses.asdict(train_brorl.Config()), **train_brorl.PRESETS["brorl-1gpu"]}
    recipe = {key: value for key, value in train_brorl.PAPER_RECIPE.items()
              if key not in ("gpu_memory_utilization", "verify_workers", "micro_batch_tokens")}
    assert recipe.items() <= preset.items()
    assert (preset["n_rollouts"], preset["prompts_per_step"], preset["lr"]) == (512, 16, 2e-6)
    assert (preset["mixed_precision"], preset["vllm_dtype"], preset["gradient_checkpointing"],
            preset["checkpoint_every"], preset["compile_layers"]
            ) == ("bf16", "bfloat16", True, 2, True)
    # everything else of the preset as it is: bf16 autocast, selective checkpointing, KL, TIS,
    # refills; compiling (test_update's compiled = eager test) would take this run 1-2 minutes
    tiny = ["--no-compile-layers", "--model", "tiny",
            "--train-data", str(ROOT / "data/arith_train.jsonl"),
            "--test-data", str(ROOT / "data/arith_test.jsonl"), "--engine", "hf",
            "--n-rollouts", "8", "--prompts-per-step", "2", "--max-new-tokens", "8",
            "--total-steps", "2", "--eval-max-problems", "8", "--eval-benchmarks",
            "--verify-workers", "1"]
    out = tmp_path / "one-gpu"
    run_script("train_brorl.py", "--preset", "brorl-1gpu", *tiny, "--output-dir", str(out))
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_rows = [row for row in rows if "reward_mean" in row]
    assert [row["step"] for row in train_rows] == [1, 2]
    # the hf engine samples in fp32; the trainer's bf16 log-probs are apart from them by about
    # u = 2^-8 for log-probs of order 1 (fp32 arithmetic would leave ~2^-24): more than u / 4
    assert all(row["mismatch_abs_mean"] > 2**-8 / 4 for row in train_rows)


def test_a_half_precision_master_dtype_is_refused_in_one_line():
    with pytest.raises(tasks.InputError, match="the trainer keeps fp32 master weights"):
        train_brorl.parse_config(["--dtype", "bfloat16"])


def test_a_model_whose_logits_the_packed_log_probs_would_misread_is_refused_in_one_line(
        untrained_model_dir, tmp_path):
    softcapped = tmp_path / "softcapped"  # as Gemma 2's final logits are
    shutil.copytree(untrained_model_dir, softcapped)
    config = json.loads((softcapped / "config.json").read_text())
    (softcapped / "config.json").write_text(json.dumps({**config, "final_logit_softcapping": 30.0}))
    result = run_script("train_brorl.py", "--preset", "smoke", "--model", str(softcapped),
                        "--output-dir", str(tmp_path / "run"), check=False)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: {softcapped}: the output layer has a bias, a logit scale or soft-capping, which "
        "the chunked log-probs do not apply")
    assert "Traceback" not in result.stderr


def test_zero_truncated_reward_scores_a_cut_response_0_even_with_a_correct_answer(tmp_path):
    # 4 tokens hold the tiny model's "\boxed{85}" but not its EOS: with sums of two or more digits,
    # every correct response is cut (one that ends in 4 tokens holds a single digit)
    wide_sums = [task for task in tasks.load_tasks(ROOT / "data" / "arith_train.jsonl")
                 if len(task["answer"]) >= 2]
    data = tmp_path / "wide_sums.jsonl"
    data.write_text("".join(json.dumps(task) + "\n" for task in wide_sums))
    args = ["--preset", "smoke", "--max-new-tokens", "4", "--total-steps", "1", "--eval-every", "9",
            "--train-data", str(data)]
    rows = {}
    for flag in ("--no-zero-truncated-reward", "--zero-truncated-reward"):
        run_script("train_brorl.py", *args, flag, "--output-dir", str(tmp_path / flag))
        rows[flag] = [json.loads(line)
                      for line in (tmp_path / flag / "metrics.jsonl").read_text().splitlines()
                      if "reward_mean" in line][0]
    assert rows["--no-zero-truncated-reward"]["truncated_frac"] > 0.5
    # boxed answers inside cut responses
    assert rows["--no-zero-truncated-reward"]["reward_mean"] > 0
    assert rows["--zero-truncated-reward"]["reward_mean"] == 0.0


def test_each_task_of_a_step_is_verified_as_its_own_prompt(monkeypatch):
    """Two tasks whose answer is x^2+5x are two prompts to the verifier, each with its own share of
    the step's time (reward.score_batch's prompts), not one gold's."""
    same_answer = [{"task": "math", "prompt": "", "answer": "x^2+5x"}] * 2
    texts = ["\\boxed{x(x+5)}", "\\boxed{5x+x^2}", "\\boxed{x^2+5x}"]
    empty = torch.zeros(3, 1, dtype=torch.long)
    rollouts = rollout.Rollouts(empty, empty, empty, empty, empty.float(),
                                torch.zeros(3, dtype=torch.bool), torch.tensor([0, 1, 1]), texts)
    named = []
    score_batch = reward.score_batch
    monkeypatch.setattr(reward, "score_batch",
                        lambda *args: named.append(args[4]) or score_batch(*args))
    rewards = train_brorl.score_rollouts(same_answer, rollouts, train_brorl.Config(),
                                         reward.VerifyConfig())
    assert rewards.tolist() == [1.0, 1.0, 1.0] and named == [[0, 1, 1]]


def test_resume_restores_the_runs_config_and_refuses_flags_that_would_change_the_run(tmp_path):
    smoke = train_brorl.parse_config(["--preset", "smoke", "--output-dir", str(tmp_path),
                                      "--eval-temperature", "0.6"])
    (tmp_path / "config.json").write_text(json.dumps(dataclasses.asdict(smoke)))
    # no flags retyped
    resumed = train_brorl.parse_config(["--output-dir", str(tmp_path), "--resume"])
    assert dataclasses.replace(resumed, resume=False) == smoke
    longer = train_brorl.parse_config(["--output-dir", str(tmp_path), "--resume",
                                       "--total-steps", "9", "--preset", "smoke"])
    assert longer.total_steps == 9 and run.config_changes(smoke, longer) == ["total_steps 2 -> 9"]
    # before a first checkpoint there is nothing to continue: flags change config.json's settings
    fresh = train_brorl.parse_config(["--output-dir", str(tmp_path), "--resume", "--lr", "1e-5"])
    assert run.config_changes(smoke, fresh) == ["lr 0.0001 -> 1e-05"]
    (tmp_path / "checkpoints" / "step_000001").mkdir(parents=True)
    with pytest.raises(tasks.InputError, match=r"change what it is: preset 'smoke' -> 'cpu-demo'; "
                                               r"n_rollouts 16 -> 32 "):
        train_brorl.parse_config(["--output-dir", str(tmp_path), "--resume", "--n-rollouts", "32",
                                  "--preset", "cpu-demo"])


def test_a_config_json_edited_or_lost_since_the_checkpoint_is_refused_on_resume(smoke_run):
    """The checkpoint keeps the settings it was trained with: a resume must not go on as another
    run because config.json changed under it."""
    saved = json.loads((smoke_run / "config.json").read_text())
    (smoke_run / "config.json").write_text(json.dumps({**saved, "lr": 0.5, "n_rollouts": 32,
                                                       "threads": 1}))
    resume = ["--output-dir", str(smoke_run), "--resume", "--total-steps", "3"]
    with pytest.raises(tasks.InputError, match=re.escape(
            f"{latest_checkpoint(smoke_run)} was trained with other settings than these: "
            "n_rollouts 16 -> 32; lr 0.0001 -> 0.5 (config.json edited or lost? restore it")):
        train_brorl.train(train_brorl.parse_config(resume))  # threads: a resume may change them
    (smoke_run / "config.json").unlink()  # the default preset's settings instead
    with pytest.raises(tasks.InputError, match="was trained with other settings than these: "
                                               "preset 'smoke' -> 'cpu-demo'; "):
        train_brorl.train(train_brorl.parse_config(resume))
    assert not (smoke_run / "config.json").exists()


def test_a_config_json_with_unknown_keys_wrong_types_or_not_json_is_refused_in_one_line(
        tmp_path):
    saved = {**dataclasses.asdict(train_brorl.Config()), "dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(tasks.InputError, match=r"not a train_brorl.py config \(unknown keys: "
                                               r"\['dtype'\]\)"):
        run.saved_config(tmp_path, train_brorl.Config)
    for text in ("{", "[" * 100_000 + "]" * 100_000):  # the second past the parser's depth
        (tmp_path / "config.json").write_text(text)
        with pytest.raises(tasks.InputError, match="config.json is not valid JSON"):
            run.saved_config(tmp_path, train_brorl.Config)
    saved.pop("dtype")
    for key, value, expected in [("n_rollouts", "many", "int"), ("lr", None, "a finite float"),
                                 ("lr", math.nan, "a finite float"),
                                 ("eval_benchmarks", "aime2024", "tuple[str, ...]"),
                                 ("advantage", "ppo", "Literal["), ("dynamic_sampling", 1, "bool")]:
        (tmp_path / "config.json").write_text(json.dumps({**saved, key: value}))
        with pytest.raises(tasks.InputError,
                           match=re.escape(f"config.json: {key} is {value!r}, not {expected}")):
            run.saved_config(tmp_path, train_brorl.Config)
    for lacking, named in [({"n_rollouts"}, "lacks n_rollouts: restore it (a setting added since"),
                           (set(saved), f"lacks {min(saved)}, ")]:
        (tmp_path / "config.json").write_text(
            json.dumps({k: v for k, v in saved.items() if k not in lacking}))
        with pytest.raises(tasks.InputError, match=re.escape(named)):
            run.saved_config(tmp_path, train_brorl.Config)
    (tmp_path / "config.json").write_text(json.dumps(saved))
    assert run.saved_config(tmp_path, train_brorl.Config) == train_brorl.Config()


def test_a_run_folder_whose_checkpoints_are_a_file_or_whose_logs_are_folders_is_one_line(
        tmp_path):
    for name, make in [("checkpoints", Path.touch), ("metrics.jsonl", Path.mkdir),
                       ("config.json", Path.mkdir)]:
        run_dir = tmp_path / name
        run_dir.mkdir()
        make(run_dir / name)
        with pytest.raises(tasks.InputError, match=re.escape(f"{run_dir / name} is a ")):
            run.check_output_dir(run_dir)


def test_a_damaged_reference_probe_set_or_cache_folder_is_one_line(tmp_path, untrained_policy):
    model, _ = untrained_policy
    reference = tmp_path / run.REFERENCE / "step_000000"
    reference.mkdir(parents=True)
    (reference / ".metadata").write_bytes(b"junk")
    with pytest.raises(tasks.InputError, match="at step 0 does not load \\("):
        run.load_reference(tmp_path, 0, update.Policy(model))
    for probes, make in [(tmp_path / "a_folder.pt", Path.mkdir),
                         (tmp_path / "a_list.pt", lambda path: torch.save([1, 2], path)),
                         (tmp_path / "a_dict.pt", lambda path: torch.save({"prompts": []}, path))]:
        make(probes)
        with pytest.raises(tasks.InputError, match=f"{probes} is not a (file|probe set)"):
            monitor.load_or_draw_probes(probes, None, dict, None, None, True, lambda: None)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    with pytest.raises(tasks.InputError, match=f"cache folder {a_file} .* cannot be made"):
        ensure_tiny_model(a_file)  # at once, not after the warm-up


def test_malformed_data_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "1+1=", "answer": "2", "task": "arith"}\n'
                    '{"prompt": "2+2=", "answer": 4, "task": "arith"}\n')
    with pytest.raises(tasks.InputError, match=f"{path}:2: field 'answer' must be a string"):
        tasks.load_tasks(path)
    path.write_text("not json\n")
    with pytest.raises(tasks.InputError, match=f"{path}:1: not valid JSON"):
        tasks.load_tasks(path)
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(tasks.InputError, match=re.escape(f"{path}:1: not valid JSON here (nested")):
        tasks.load_tasks(path)
    path.write_text('{"prompt": "", "answer": "2", "task": "arith"}\n')
    with pytest.raises(tasks.InputError, match=f"{path}:1: field 'prompt' must be a non-empty"):
        tasks.load_tasks(path)
    path.write_bytes(b'{"prompt": "1+1=", "answer": "2", "task": "arith"}\n'
                     b'{"prompt": "\xe9t\xe9", "answer": "2", "task": "arith"}\n')
    with pytest.raises(tasks.InputError, match=f"{path}:2: not UTF-8 text"):  # latin-1, say
        tasks.load_tasks(path)
    path.write_text('{"prompt": "1+1=", "answer": "2", "task": "arith"}\n' + "x" * 200 + "\n")
    with pytest.raises(tasks.InputError, match=f"{path}:2: line longer than"):
        tasks.read_jsonl(path, max_line_bytes=100)


def test_prompts_longer_than_the_models_context_stop_the_run_at_load_time_naming_file_and_line(
        tmp_path):
    data = tmp_path / "long.jsonl"
    data.write_text(json.dumps({"task": "arith", "prompt": "1+1=", "answer": "2"}) + "\n"
                    + json.dumps({"task": "arith", "prompt": "9" * 300 + "+1=",
                                  "answer": "1"}) + "\n")
    result = run_script("train_brorl.py", "--preset", "smoke", "--train-data", str(data),
                        "--output-dir", str(tmp_path / "run"), check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    # the tiny model's context is 256 positions, 8 of them for the response; "<|user|>"-style
    # wrapping adds a few
    assert re.fullmatch(rf"error: {data}:2: prompt is 3\d\d tokens, over the limit of 248 \(.*\)",
                        result.stderr.strip())


def test_smoke_run_logs_metrics_tensorboard_and_a_resumable_checkpoint(smoke_run):
    out = smoke_run  # trained without bubblewrap: arith needs no sandbox
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "reward_mean" in r]
    eval_rows = [r for r in rows if "eval_pass1" in r]
    assert ([r["step"] for r in train_rows] == [1, 2]
            and all(SMOKE_KEYS <= set(r) for r in train_rows))
    assert [r["step"] for r in eval_rows] == [0, 2]
    protocol = {"eval_samples": 2, "eval_temperature": 1.0, "eval_top_p": 1.0,
                "eval_max_new_tokens": 8}
    # every score says how it was sampled
    assert all(protocol.items() <= r.items() for r in eval_rows)
    assert list(out.glob("events.out.tfevents.*"))
    checkpoint = out / "checkpoints" / "step_000002"
    assert ((checkpoint / "model" / "config.json").is_file()
            and (checkpoint / "trainer_state.pt").is_file())
    # what eval.py and from_pretrained load
    model, _ = rollout.load_policy(str(checkpoint / "model"))
    assert model.config.tie_word_embeddings is False
    again = run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(out), check=False)
    assert again.returncode != 0 and "pass --resume" in again.stderr
    # smoke, restored
    resumed = run_script("train_brorl.py", "--output-dir", str(out), "--resume",
                         "--total-steps", "3")
    assert "config.json: total_steps 2 -> 3" in resumed.stdout.splitlines()
    saved = (out / "config.json").read_bytes()
    behind = run_script("train_brorl.py", "--output-dir", str(out), "--resume", "--total-steps",
                        "1", check=False)
    assert behind.returncode != 0 and behind.stderr.strip().splitlines()[-1] == (
        f"error: --total-steps 1 is below the step of {out / 'checkpoints' / 'step_000003'}: "
        "nothing to run (a larger one continues the run)")
    assert (out / "config.json").read_bytes() == saved
    assert (json.loads((out / "config.json").read_text())["n_rollouts"]
            == train_brorl.PRESETS["smoke"]["n_rollouts"])
    # one train row and one eval row per step (step 2's eval: the final eval of the 2-step run),
    # none twice
    assert logged_steps(out) == [(0, "eval"), (1, "train"), (2, "train"), (2, "eval"), (3, "train"),
                                 (3, "eval")]


def logged_steps(out_dir) -> list[tuple[int, str]]:
    """(step, "train" or "eval") of each row, the probe monitor's rows left out."""
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], "eval" if "eval_pass1" in r else "train") for r in rows
            if "probe_count" not in r]


def test_a_rerun_after_a_death_before_the_first_checkpoint_logs_every_step_once(tmp_path):
    out = tmp_path / "run"
    # the step-0 eval only
    run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(out),
               "--total-steps", "0")
    assert latest_checkpoint(out) is None and logged_steps(out) == [(0, "eval")]
    rerun = run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(out))
    assert "metrics.jsonl: dropped 1 rows an earlier attempt logged after step -1" in rerun.stdout
    assert logged_steps(out) == [(0, "eval"), (1, "train"), (2, "train"), (2, "eval")]
    events = EventAccumulator(str(out))
    events.Reload()
    # the first attempt's step 0 purged
    assert [e.step for e in events.Scalars("eval/eval_pass1")] == [0, 2]


def test_one_run_trains_on_math_code_and_reasoning_gym_tasks_together(tmp_path):
    mixed = [{"task": "math", "prompt": "1+1=", "answer": "2"},
             {"task": "code", "prompt": "add=", "answer": {"inputs": ["1 2\n"], "outputs": ["3"]}},
             *tasks.load_tasks(ROOT / "data" / "rg_test.jsonl")[:2]]
    data = tmp_path / "mixed.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in mixed))
    run_script("train_brorl.py", "--preset", "smoke", "--train-data", str(data),
               "--test-data", str(data), "--output-dir", str(tmp_path / "run"),
               "--eval-benchmarks", "rg/gcd", "humaneval", "--eval-max-problems", "3")
    rows = [json.loads(line)
            for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "verify/seconds" in r] == [1, 2]
    assert [r["step"] for r in rows if "rg/gcd/pass1" in r and "humaneval/pass1" in r] == [0, 2]
    final = json.loads((tmp_path / "run" / "eval.json").read_text())  # what eval.py --out writes
    assert (set(final["benchmarks"]) == {"test_data", "rg/gcd", "humaneval"}
            and "code" in final["suites"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task": "code", "prompt": "x", "answer": {"inputs": [1]}}) + "\n")
    result = run_script("train_brorl.py", "--preset", "smoke", "--train-data", str(bad),
                        "--output-dir", str(tmp_path / "refused"), check=False)
    assert (result.returncode != 0
            and "bad.jsonl: task record 1: code answer must be" in result.stderr)
    assert "Traceback" not in result.stderr


def test_without_bubblewrap_code_data_is_refused_in_one_line(tmp_path):
    code = tmp_path / "code.jsonl"
    code.write_text(json.dumps({"task": "code", "prompt": "add=",
                                "answer": {"inputs": ["1 2"], "outputs": ["3"]}}) + "\n")
    result = run_script("train_brorl.py", "--preset", "smoke", "--train-data", str(code),
                        "--output-dir", str(tmp_path / "run"), check=False, env=NO_BWRAP)
    assert result.returncode != 0 and result.stderr.strip().splitlines() == [
        "error: code tasks run untrusted programs, and bubblewrap is not installed: "
        "install bubblewrap (apt-get install bubblewrap), or pass --unsafe-no-sandbox to run them "
        "without isolation"]


def final_weights(out_dir):
    return load_file(str(latest_checkpoint(out_dir) / "model" / "model.safetensors"))


def test_kill_9_mid_run_then_resume_gives_the_parameters_of_an_uninterrupted_run(tmp_path):
    args = ["--preset", "smoke", "--total-steps", "4", "--eval-every", "100", "--kl-coef", "0.01",
            "--ref-reset-every", "2", "--minibatches", "2"]
    run_script("train_brorl.py", *args, "--output-dir", str(tmp_path / "straight"))

    crashed = tmp_path / "crashed"
    proc = subprocess.Popen([sys.executable, "train_brorl.py", *args, "--output-dir", str(crashed)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while (not (crashed / "checkpoints" / "step_000002").exists() and time.time() < deadline
           and proc.poll() is None):
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    last = latest_checkpoint(crashed)
    assert last is not None and last.name < "step_000004", "the kill came too late to test anything"
    run_script("train_brorl.py", *args, "--output-dir", str(crashed), "--resume")
    # the reference is not in the checkpoints: once per reset (steps 2 and 4), for the checkpoints
    # that use it (3 and 4)
    assert [p.name for p in (crashed / "checkpoints" / "step_000004" / "state").iterdir()
            if p.name.startswith("model")] == ["model.safetensors"]
    assert sorted(p.name for p in (crashed / "reference").iterdir()) == ["step_000002",
                                                                         "step_000004"]

    straight, resumed = final_weights(tmp_path / "straight"), final_weights(crashed)
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    steps = [json.loads(line)["step"]
             for line in (crashed / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3, 4, 4]  # no step logged twice, none missing


@pytest.mark.slow
def test_default_run_raises_held_out_pass1_by_20_points(tmp_path):
    """The README's claim: `python train_brorl.py` (no flags) learns, within 10 minutes on 2
    cores."""
    start = time.time()
    run_script("train_brorl.py", "--output-dir", str(tmp_path / "demo"))
    evals = [json.loads(line)
             for line in (tmp_path / "demo" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in evals if "eval_pass1" in r]
    assert evals[0]["step"] == 0 and evals[-1]["step"] == train_brorl.Config.total_steps
    assert evals[-1]["eval_pass1"] - evals[0]["eval_pass1"] >= 0.20
    assert time.time() - start < 600


def test_a_torn_metrics_line_half_written_and_damaged_checkpoints_and_leftovers_do_not_break_resume(
        tmp_path):
    out = tmp_path / "run"
    run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(out),
               "--eval-every", "100", "--shrink-monitor-samples", "0")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_rows = [row for row in rows if "reward_mean" in row]
    assert train_rows and not any("shrink_frac" in row for row in train_rows)  # off, not zero
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward_me')  # killed mid-write
    checkpoints = out / "checkpoints"
    (checkpoints / "step_000003" / "model").mkdir(parents=True)  # killed before trainer_state.pt
    (checkpoints / ".step_000003.tmp" / "model").mkdir(parents=True)  # killed during a save
    (checkpoints / ".step_000000.deleting").mkdir()  # killed while pruning
    weights = checkpoints / "step_000002" / "model" / "model.safetensors"
    half_written = weights.read_bytes()[: weights.stat().st_size // 2]
    weights.write_bytes(half_written)  # a damaged disk
    resumed = run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(out),
                         "--resume", "--total-steps", "3")
    assert (f"skipping the damaged checkpoint {checkpoints / 'step_000002'} "
            "(model/model.safetensors is" in resumed.stdout)
    assert "resumed from" in resumed.stdout and "step_000001 at step 1" in resumed.stdout
    assert not list(checkpoints.glob(".step_*"))  # the leftovers are gone
    # the damaged ones the run saved over are kept aside, as they were
    assert "keeping the damaged" in resumed.stdout and "as step_000002.damaged" in resumed.stdout
    kept = checkpoints / "step_000002.damaged" / "model" / "model.safetensors"
    assert kept.read_bytes() == half_written
    assert (checkpoints / "step_000003.damaged" / "model").is_dir()
    assert logged_steps(out) == [(0, "eval"), (1, "train"), (2, "train"), (3, "train"), (3, "eval")]
    optimizer = checkpoints / "step_000003" / "state" / "optimizer.bin"
    optimizer.write_bytes(bytes(optimizer.stat().st_size))  # damaged at its saved size
    refused = run_script("train_brorl.py", "--output-dir", str(out), "--resume",
                         "--total-steps", "4", check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert (f"error: {checkpoints / 'step_000003'}/state does not load (" in refused.stderr
            and "move the checkpoint away" in refused.stderr.strip().splitlines()[-1])
    for state in checkpoints.glob("step_*/trainer_state.pt"):  # every checkpoint damaged
        state.write_bytes(b"not a pickle")
    before = sorted(p for p in checkpoints.rglob("*"))
    refused = run_script("train_brorl.py", "--output-dir", str(out), "--resume",
                         "--total-steps", "4", check=False)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert (f"error: {out} holds checkpoints and none is complete (the newest, step_000003: "
            in refused.stderr.strip().splitlines()[-1])
    assert sorted(p for p in checkpoints.rglob("*")) == before  # none overwritten or pruned


def test_a_small_checkpoint_file_changed_at_its_saved_size_is_damage(smoke_run):
    """An RNG state (or a config) changed inside, its size kept, would load: its digest tells."""
    newest = latest_checkpoint(smoke_run)
    rng = newest / "state" / "random_states_0.pkl"
    changed = bytearray(rng.read_bytes())
    changed[len(changed) // 2] ^= 0xFF
    rng.write_bytes(changed)
    assert checkpoint_problem(newest) == ("state/random_states_0.pkl changed since it was saved "
                                          "(its sha256)")
    assert latest_checkpoint(smoke_run, say=lambda message: None).name == "step_000001"


def test_a_trainer_state_listing_files_it_cannot_hold_is_damage(smoke_run):
    newest = latest_checkpoint(smoke_run)
    intact = torch.load(newest / "trainer_state.pt", weights_only=True)
    config = "model/config.json"
    for key, name, value in [("files", 1, 5), ("files", "/etc/passwd", 1),
                             ("files", "../../config.json", 1), ("files", config, "9"),
                             ("files", config, -1), ("digests", config, 7)]:
        torch.save({**intact, key: {**intact[key], name: value}}, newest / "trainer_state.pt")
        assert checkpoint_problem(newest).endswith(
            f"is not a trainer state ({key}: {name!r} -> {value!r})")
        assert latest_checkpoint(smoke_run, say=lambda message: None).name == "step_000001"


def test_pruning_leaves_a_checkpoint_this_user_cannot_read(smoke_run):
    """Not the run's to judge: neither deleted nor counted, and the run goes on saving."""
    if shutil.which("bwrap") is None:
        pytest.skip("bwrap is needed to drop root's right to read every file")
    checkpoints = smoke_run / "checkpoints"
    (checkpoints / "step_000001" / "model" / "config.json").chmod(0)
    prune = ("import sys, pathlib, run; out = pathlib.Path(sys.argv[1]); "
             "run.prune_checkpoints(out / 'checkpoints', 1); run.prune_references(out)")
    subprocess.run(["bwrap", "--dev-bind", "/", "/", "--unshare-user", "--uid", "1234",
                    sys.executable, "-c", prune, str(smoke_run)], cwd=ROOT, check=True,
                   capture_output=True, timeout=600)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000001", "step_000002"]


def test_the_verifier_settings_reach_the_verifier_under_their_own_names():
    cfg = train_brorl.parse_config(["--verify-timeout", "2", "--code-test-timeout", "1",
                                    "--verify-step-timeout", "30", "--verify-workers", "3"])
    verify = train_brorl.component_configs(cfg)[2]
    assert (verify.timeout, verify.test_timeout, verify.step_timeout) == (2.0, 1.0, 30.0)
    assert train_brorl.component_configs(cfg)[3].verify_workers == 3


def test_a_run_folder_another_run_is_writing_is_refused_and_free_once_it_ends(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    other = run.lock_run_folder(out)  # as a run still going holds it
    try:
        refused = run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(out),
                             "--resume", check=False)
    finally:
        other.close()
    assert refused.returncode != 0 and refused.stderr.strip().splitlines()[-1] == (
        f"error: {out} is being written by another run (process {os.getpid()}): stop it first, "
        "or pass another --output-dir")
    assert not (out / "checkpoints").exists()  # nothing written
    mine = run.lock_run_folder(out)  # released by the refused run's exit, and by close()
    mine.close()
    run.lock_run_folder(out).close()
    (out / ".lock").unlink()
    victim = tmp_path / "victim.txt"
    victim.write_text("kept")
    for make, said in [(lambda lock: lock.mkdir(), "Is a directory"),
                       (lambda lock: lock.symlink_to(victim), "a symbolic link"),
                       (lambda lock: lock.symlink_to(tmp_path / "nothing"), "a symbolic link"),
                       (lambda lock: os.mkfifo(lock), "is not a plain file")]:
        make(out / ".lock")  # one line, and nothing it points to is written
        with pytest.raises(tasks.InputError, match=rf"\.lock:? {said}"):
            run.lock_run_folder(out)
        (out / ".lock").rmdir() if (out / ".lock").is_dir() else (out / ".lock").unlink()
    assert victim.read_text() == "kept"


def test_a_trainer_state_that_is_not_one_is_a_damaged_checkpoint_passed_over(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    not_one = "is not a trainer state"
    for step, state, problem in [
            (1, a_trainer_state(), None),
            (2, [1, 2], f"{not_one} (not a dict)"),
            (3, a_trainer_state(files=[1]), f"{not_one} (files: not a count, or not a dict)"),
            (4, {"step": 4, "files": {}},
             f"{not_one} (no data_position, config, reference_step, allocation)"),
            (5, a_trainer_state(step=-5, data_position="x"), f"{not_one} (step, data_position: ")]:
        (checkpoints / f"step_{step:06d}").mkdir(parents=True)
        torch.save(state, checkpoints / f"step_{step:06d}" / "trainer_state.pt")
        assert (problem is None) == (checkpoint_problem(checkpoints / f"step_{step:06d}") is None)
        if problem:
            assert problem in checkpoint_problem(checkpoints / f"step_{step:06d}")
    said = []
    assert latest_checkpoint(tmp_path, say=said.append) == checkpoints / "step_000001"
    assert len(said) == 4 and all("skipping the damaged checkpoint" in line for line in said)


def test_pruning_keeps_the_newest_complete_checkpoints_and_leaves_foreign_folders(tmp_path):
    for step in (1, 2, 3, 9):
        folder = tmp_path / f"step_{step:06d}"
        folder.mkdir()
        if step != 9:  # step_000009: a folder someone made, no checkpoint
            torch.save(a_trainer_state(step=step), folder / "trainer_state.pt")
    run.prune_checkpoints(tmp_path, keep=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000002", "step_000003",
                                                          "step_000009"]


def test_reference_pruning_passes_over_a_checkpoint_killed_before_its_trainer_state(tmp_path):
    # step 1 uses the reference of step 0; step 2 was killed before trainer_state.pt was written
    for step, state in ((1, a_trainer_state(reference_step=0)), (2, None)):
        checkpoint = tmp_path / "checkpoints" / f"step_{step:06d}"
        checkpoint.mkdir(parents=True)
        if state is not None:
            torch.save(state, checkpoint / "trainer_state.pt")
    for step in (0, 2):
        (tmp_path / run.REFERENCE / f"step_{step:06d}").mkdir(parents=True)
    run.prune_references(tmp_path)
    assert [p.name for p in (tmp_path / run.REFERENCE).iterdir()] == ["step_000000"]


def test_ctrl_c_stops_with_one_line_saying_where_the_run_resumes_from(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "train_brorl.py", "--preset", "smoke",
                             "--total-steps", "50", "--eval-every", "100",
                             "--output-dir", str(out)],
                            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True,
                            # as in a terminal: a test run in the background (`cmd &`) inherits
                            # SIGINT ignored, and Python then never raises KeyboardInterrupt
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 300
    # any checkpoint: step 1's lives only until step 3's is saved (--keep-checkpoints 2)
    while (not any((out / "checkpoints").glob("step_*")) and time.time() < deadline
           and proc.poll() is None):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole process group
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode not in (0, None) and "Traceback" not in stderr, stderr
    last = latest_checkpoint(out)
    assert stderr.strip().splitlines()[-1] == (
        f"interrupted: the last complete checkpoint is {last}; continue with: "
        f"python train_brorl.py --output-dir {out} --resume")


DISK_FULL_AT_STEP_2 = f"""
import errno, os, sys
sys.path.insert(0, {str(ROOT)!r})
import torch, train_brorl
save = torch.save
def save_or_fail(obj, path, *args, **kwargs):  # the trainer state, which the main process writes
    if isinstance(obj, dict) and obj.get("step") == int(os.environ.get("FULL_AT_STEP", 2)):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))
    return save(obj, path, *args, **kwargs)
torch.save = save_or_fail
sys.argv[0] = "train_brorl.py"
train_brorl.main()
"""


def test_a_full_disk_during_a_save_is_one_line_and_keeps_the_last_good_checkpoint(tmp_path):
    out = tmp_path / "run"
    result = run_script("-c", DISK_FULL_AT_STEP_2, "--preset", "smoke", "--output-dir", str(out),
                        check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    last = out / "checkpoints" / "step_000001"
    assert result.stderr.strip().splitlines()[-1] == (  # after the progress bar
        "error: no space left on device writing "
        f"{out / 'checkpoints' / '.step_000002.tmp' / 'trainer_state.pt'}; "
        f"the last complete checkpoint is {last}; continue with: "
        f"python train_brorl.py --output-dir {out} --resume")
    assert (latest_checkpoint(out) == last
            and not list((out / "checkpoints").glob(".step_*")))


def test_a_process_other_than_the_main_one_leaves_the_checkpoint_in_progress_on_a_full_disk(
        tmp_path, monkeypatch):
    """Under a launch the main process may still be writing the checkpoint a full disk stopped
    another process in: only the main process, which holds the run folder, removes it."""
    out = tmp_path / "run"
    in_progress = out / "checkpoints" / ".step_000002.tmp"
    in_progress.mkdir(parents=True)

    def disk_full(cfg):
        raise OSError(errno.ENOSPC, "No space left on device", str(in_progress / "random_1.pkl"))

    monkeypatch.setattr(train_brorl, "train", disk_full)
    monkeypatch.setattr(sys, "argv", ["train_brorl.py", "--preset", "smoke", "--output-dir",
                                      str(out)])
    for main_process in (False, True):
        monkeypatch.setattr(train_brorl, "PartialState",
                            lambda: types.SimpleNamespace(is_main_process=main_process))
        with pytest.raises(SystemExit, match="no space left on device writing"):
            train_brorl.main()
        assert in_progress.is_dir() != main_process


METRICS_DISK_FULL_AT_STEP_2 = f"""
import errno, sys
sys.path.insert(0, {str(ROOT)!r})
import run, train_brorl
log = run.MetricsLog.log
def log_or_fail(self, step, scalars, prefix):  # the main process alone writes metrics.jsonl
    if step == 2:
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
    return log(self, step, scalars, prefix)
run.MetricsLog.log = log_or_fail
sys.argv[0] = "train_brorl.py"
train_brorl.main()
"""


def test_a_metrics_write_that_fails_on_the_main_process_stops_every_process_with_its_line(
        tmp_path):
    script, out = tmp_path / "metrics_full.py", tmp_path / "run"
    script.write_text(METRICS_DISK_FULL_AT_STEP_2)
    full = accelerate_launch(str(script), "--preset", "smoke", "--output-dir", str(out),
                             check=False)
    line = (f"error: no space left on device writing {out / 'metrics.jsonl'}; the last complete "
            f"checkpoint is {out / 'checkpoints' / 'step_000001'}")
    assert full.returncode != 0 and full.stderr.count(line) == 2, full.stderr
    assert "[rank1]: Traceback" not in full.stderr


def test_a_full_disk_is_one_line_whichever_library_was_writing():
    from safetensors import SafetensorError
    from torch.distributed.checkpoint.api import CheckpointException

    full = OSError(errno.ENOSPC, "No space left on device", "/run/state/__1_0.distcp")
    weights = SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
                              'message: "No space left on device" }) (os error 28)')
    for error, line in [(weights, "no space left on device writing the model's weights "
                                  "(safetensors)"),
                        (CheckpointException("save", {1: (full, None)}),  # FSDP2's shards
                         "no space left on device writing /run/state/__1_0.distcp"),
                        (RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos "
                                      "704 vs 598"),
                         "a checkpoint file could not be written (no space left on device?)")]:
        with pytest.raises(run.WriteFailure, match=re.escape(line)):
            with run.refused_together(types.SimpleNamespace(num_processes=1), run.WriteFailure):
                raise error
    with pytest.raises(ValueError):  # not a file's failure: not turned into a line
        with run.refused_together(types.SimpleNamespace(num_processes=1), run.WriteFailure):
            raise ValueError("a bug")


def test_an_output_dir_that_is_a_file_or_read_only_is_one_line(tmp_path):
    a_file = tmp_path / "taken"
    a_file.write_text("")
    result = run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(a_file),
                        check=False)
    assert (result.returncode != 0
            and result.stderr.strip() == f"error: --output-dir is a file, not a folder: {a_file}")
    if shutil.which("bwrap") is None:
        pytest.skip("bwrap is needed to mount a read-only folder")
    read_only = tmp_path / "read-only"
    read_only.mkdir()
    result = subprocess.run(["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(read_only),
                             str(read_only), sys.executable, "train_brorl.py", "--preset", "smoke",
                             "--output-dir", str(read_only / "run")],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode != 0
    assert result.stderr.strip() == (f"error: cannot write to --output-dir {read_only / 'run'}: "
                                     "Read-only file system")


def test_a_checkpoint_this_user_cannot_read_is_one_line_not_a_damaged_checkpoint(smoke_run):
    """A run folder of another user's (as if: root reads everything, so an unprivileged user
    namespace reads it here)."""
    if shutil.which("bwrap") is None:
        pytest.skip("bwrap is needed to drop root's right to read every file")
    newest = latest_checkpoint(smoke_run)
    as_a_user = ["bwrap", "--dev-bind", "/", "/", "--unshare-user", "--uid", "1234",
                 sys.executable, "train_brorl.py", "--output-dir", str(smoke_run), "--resume"]
    unread = "its checkpoints cannot all be read"
    for unreadable, after in [(newest / "trainer_state.pt", unread),
                              (newest / "state" / "optimizer.bin", unread),
                              (smoke_run / "config.json", "nothing ran"),
                              (smoke_run / "checkpoints", unread)]:
        unreadable.chmod(0)
        result = subprocess.run(as_a_user, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
        said = f"error: permission denied on {unreadable}"
        if unreadable.is_dir():  # its listing fails on the first entry it opens, or on itself
            assert result.stderr.strip().startswith(said), result.stderr
        else:
            assert result.stderr.strip() == f"{said}; {after}", result.stderr
        assert "damaged" not in result.stdout and newest.is_dir()  # not passed over, nor renamed
        unreadable.chmod(0o755 if unreadable.is_dir() else 0o644)
    weights = newest / "model" / "model.safetensors"  # eval.py reads the run the same way
    weights.chmod(0)
    result = subprocess.run([*as_a_user[:-4], "eval.py", "--model", str(smoke_run)], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.stderr.strip() == f"error: Permission denied: {weights}", result.stderr


def test_a_refusal_of_the_main_process_alone_stops_every_process_with_its_line(tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("")
    refused = accelerate_launch("train_brorl.py", "--preset", "smoke", "--output-dir", str(taken),
                                check=False)
    refusal = f"error: --output-dir is a file, not a folder: {taken}"
    assert refused.returncode != 0 and refused.stderr.count(refusal) == 2, refused.stderr
    assert "[rank1]: Traceback" not in refused.stderr


def test_a_start_refused_after_making_its_folder_leaves_no_folder(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    out = tmp_path / "new" / "run"
    flags = ["--preset", "smoke", "--train-data", str(bad), "--output-dir", str(out)]
    with pytest.raises(tasks.InputError, match=re.escape(f"{bad}:1: not valid JSON")):
        train_brorl.train(train_brorl.parse_config(flags))
    assert not out.exists()
    out.mkdir()  # a folder that was there before stays
    with pytest.raises(tasks.InputError):
        train_brorl.train(train_brorl.parse_config(flags))
    assert out.is_dir()


def test_smoke_run_on_two_processes_saves_every_processes_state_and_resumes(tmp_path):
    out = tmp_path / "ddp"
    accelerate_launch("train_brorl.py", "--preset", "smoke", "--output-dir", str(out))
    state = out / "checkpoints" / "step_000002" / "state"
    assert (state / "random_states_0.pkl").is_file() and (state / "random_states_1.pkl").is_file()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 2]  # one writer: the main process
    # one process's own RNG file written wrong before its digest was taken (accelerate alone would
    # pass over it): both processes stop with its line, nothing rewritten
    rng, config = state / "random_states_1.pkl", (out / "config.json").read_text()
    intact, saved = rng.read_bytes(), (state.parent / "trainer_state.pt").read_bytes()
    rng.write_bytes(bytes(len(intact)))
    trainer_state = torch.load(state.parent / "trainer_state.pt", weights_only=True)
    trainer_state["digests"]["state/random_states_1.pkl"] = file_digest(rng)
    torch.save(trainer_state, state.parent / "trainer_state.pt")
    refused = accelerate_launch("train_brorl.py", "--output-dir", str(out), "--resume",
                                "--total-steps", "3", check=False)
    refusal = f"error: {state.parent}/state does not load ("
    assert refused.returncode != 0 and refused.stderr.count(refusal) == 2, refused.stderr
    assert "[rank0]: Traceback" not in refused.stderr  # not left to die in a collective
    assert "[rank1]: Traceback" not in refused.stderr
    assert (out / "config.json").read_text() == config
    rng.write_bytes(intact)
    (state.parent / "trainer_state.pt").write_bytes(saved)
    # resumed, then the disk full while the main process writes the step-3 checkpoint: the other
    # process, waiting for it, stops with the same line
    script = out.parent / "disk_full.py"
    script.write_text(DISK_FULL_AT_STEP_2)
    full = run_script("-m", "accelerate.commands.launch", "--config_file", "configs/ddp_cpu.yaml",
                      "--main_process_port", str(free_port()), str(script), "--output-dir",
                      str(out), "--resume", "--total-steps", "3", env={"FULL_AT_STEP": "3"},
                      check=False)
    line = (f"error: no space left on device writing {out}/checkpoints/.step_000003.tmp/"
            f"trainer_state.pt; the last complete checkpoint is {state.parent}")
    assert "resumed from" in full.stdout and full.stderr.count(line) == 2, full.stderr
    assert "[rank1]: Traceback" not in full.stderr
    assert latest_checkpoint(out) == state.parent and not list(out.glob("checkpoints/.step_*"))


@pytest.mark.parametrize("distributed_type, processes, environ, message", [
    # Accelerator(cpu=False) on a machine without GPUs: every process alone
    (DistributedType.NO, 1, {"WORLD_SIZE": "2"},
     "launched as 2 processes, but each would run alone"),
])
def test_a_launch_that_would_degrade_silently_is_refused(distributed_type, processes, environ,
                                                         message):
    with pytest.raises(tasks.InputError, match=message):
        run.check_launch(distributed_type, processes, environ)


@pytest.mark.parametrize("distributed_type, processes, environ", [
    (DistributedType.MULTI_CPU, 2, {"WORLD_SIZE": "2"}),  # configs/ddp_cpu.yaml
    # configs/fsdp_cpu.yaml: train_brorl.py shards over gloo itself
    (DistributedType.MULTI_CPU, 2, {"ACCELERATE_USE_FSDP": "true", "WORLD_SIZE": "2"}),
    # configs/fsdp_8gpu.yaml on GPUs
    (DistributedType.FSDP, 8, {"ACCELERATE_USE_FSDP": "true", "WORLD_SIZE": "8"}),
    (DistributedType.NO, 1, {}),  # python train_brorl.py
])
def test_launches_that_run_what_they_ask_for_pass(distributed_type, processes, environ):
    run.check_launch(distributed_type, processes, environ)


def test_one_update_on_two_processes_equals_one_process_on_the_same_global_batch(
        untrained_model_dir, tmp_path):
    run_script("tests/data_parallel_update.py", str(untrained_model_dir), str(tmp_path / "one.pt"))
    accelerate_launch("tests/data_parallel_update.py", str(untrained_model_dir),
                      str(tmp_path / "two.pt"))
    one, two = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    # the rows were re-dealt: same total, each process's compute closer to half of it
    shares = [json.loads((tmp_path / f"two.rank{rank}.json").read_text()) for rank in (0, 1)]
    assert sum(s["rows"][0] for s in shares) == sum(s["rows"][1] for s in shares) == 12
    before, after = ([s["cost"][k] for s in shares] for k in (0, 1))
    assert sum(before) == pytest.approx(sum(after))
    assert max(after) - min(after) < max(before) - min(before)
    # every statistic is the whole batch's (a token mean over both processes' tokens), as one
    # process computes it: sums of <= 156 fp32 terms in another order
    alone = json.loads((tmp_path / "one.rank0.json").read_text())["stats"]
    assert shares[0]["tokens"] != shares[1]["tokens"]
    for key in ("loss", "clip_frac", "entropy", "mismatch_abs_mean", "mismatch_abs_max",
                "mismatch_kl"):
        for share in shares:
            assert share["stats"][key] == pytest.approx(alone[key], rel=156 * 2**-24), key
    start = rollout.load_policy(str(untrained_model_dir))[0].state_dict()
    # the update moved something
    assert any(not torch.equal(start[name], one[name]) for name in one)
    # one SGD step (lr 0.5) on fp32 gradients of order 1 summed over <= 156 positions (12 rows of
    # <= 13 tokens) in another order: <= 0.5 * 156 * 2^-24 apart, plus 2^-24 rounding the weights
    for name in one:
        assert torch.allclose(one[name], two[name], atol=(0.5 * 156 + 1) * 2**-24), name


def test_data_parallel_runs_end_without_hanging_round_after_round(tmp_path):
    """Run.close frees the DDP module before the process group (tests/teardown_rounds.py); freed
    after it, round 0 or 1 hung in each of 3 tries, so 5 rounds catch it. A run that still holds
    it is not ended."""
    ended = run_script("tests/teardown_rounds.py", str(tmp_path), "5", timeout=300)
    assert ended.stdout.count("round 4 ended") == 2

    kept = run_script("tests/teardown_rounds.py", str(tmp_path / "kept"), "1", "--keep-policy",
                      check=False, timeout=300)
    assert kept.returncode != 0 and "the DDP policy is still referenced" in kept.stderr


def test_eval_sharded_over_two_processes_gives_the_numbers_of_one_process(tmp_path):
    # --total-steps 0: only the step-0 eval, which is then the final one and writes eval.json and
    # its samples; 8-sequence batches deal 8 batches of the 32 test problems and 3 of rg/gcd's 10
    # out to the 2 processes (batches of 4 problems, for one process as for two: each process gets
    # at least one batch only when there are fewer problems than that)
    args = ["train_brorl.py", "--preset", "smoke", "--total-steps", "0", "--gen-batch-seqs", "8",
            "--threads", "1", "--eval-benchmarks", "rg/gcd", "--process-group-timeout-min", "5"]
    run_script(*args, "--output-dir", str(tmp_path / "one"))
    accelerate_launch(*args, "--output-dir", str(tmp_path / "two"))
    one, two = (json.loads((tmp_path / run / "eval.json").read_text()) for run in ("one", "two"))
    for name in ("test_data", "rg/gcd"):
        assert (one["benchmarks"][name]["correct_per_problem"]
                == two["benchmarks"][name]["correct_per_problem"])
        assert one["benchmarks"][name]["pass1"] == two["benchmarks"][name]["pass1"]
    samples = [(tmp_path / run / "eval.samples.jsonl").read_text() for run in ("one", "two")]
    problems = sum(entry["problems"] for entry in one["benchmarks"].values())
    # header + every sample, once
    assert samples[0] == samples[1] and samples[0].count("\n") == 1 + 2 * problems


def test_dynamic_sampling_refills_the_batch_until_enough_groups_are_kept(finished_smoke_run):
    # up to 3 refill rounds (conftest.SMOKE_RUN)
    rows = [json.loads(line)
            for line in (finished_smoke_run / "metrics.jsonl").read_text().splitlines()
            if "gen_rounds" in line]
    prompts = train_brorl.PRESETS["smoke"]["prompts_per_step"]
    for row in rows:
        found = round(row["pass_rate"] * prompts * row["gen_rounds"])
        # stopped early only once the batch was full
        assert row["gen_rounds"] == 4 or found >= prompts
        assert row["gen_rounds"] > 1 or row["pass_rate"] == 1.0
        # exactly the batch size, never the surplus
        assert row["kept_groups"] == min(found, prompts)
    assert any(row["gen_rounds"] > 1 for row in rows)  # this seed needs a refill at step 2


@pytest.mark.parametrize("counts, quotas", [
    ([5, 5], [4, 4]),  # both found more than their share of 8: each keeps its share
    ([1, 9], [1, 7]),  # process 0 found too few: process 1 fills the shortfall
    ([2, 3], [2, 3]),  # fewer than 8 in all: every informative group is kept
    ([6, 6, 1, 0], [5, 1, 1, 0]),  # 4 processes, target 7: shares of 1, then the lowest rank fills
])
def test_refilled_batch_keeps_exactly_the_target_across_processes(counts, quotas):
    target = 8 if len(counts) == 2 else 7
    assert train_brorl.kept_group_quotas(counts, target) == quotas


def test_the_last_collected_informative_groups_are_the_ones_dropped():
    # two rounds, in collection order
    informative = torch.tensor([True, False, True, True, False, True, True])
    keep = train_brorl.keep_target_groups(informative, target=3, rank=0, processes=1)
    assert keep.tolist() == [True, False, True, True, False, False, False]


def test_probe_report_counts_changes_beyond_the_noise_floor_and_splits_sampled_prompts():
    probes = {"base": torch.tensor([-1.0, -1.0, -2.0, -2.0]), "noise_floor": 0.01,
              "prompts": ["a", "b", "c", "d"]}
    now = torch.tensor([-0.5, -1.005, -2.5, -1.0])  # up, within the floor, down 0.5, up
    report = monitor.probe_report(probes, now, sampled_prompts={"a", "c"})
    assert (report["probe_count"] == 4 and report["probe_improved_frac"] == 0.5
            and report["probe_dropped_frac"] == 0.25)
    assert report["probe_worst_drop"] == pytest.approx(-0.5)
    assert report["probe_sampled_count"] == 2 and report["probe_sampled_improved_frac"] == 0.5
    assert (report["probe_unsampled_improved_frac"] == 0.5
            and report["probe_unsampled_worst_drop"] == pytest.approx(-0.005))


def test_init_from_starts_a_new_run_with_another_runs_weights_optimizer_state_and_probes(
        smoke_run, tmp_path):
    # the source: KL on, its reference reset at step 2, 8 probe prompts (conftest.SMOKE_RUN)
    source, branch = smoke_run, tmp_path / "branch"
    kl = ["--kl-coef", "0.01", "--ref-reset-every", "2"]
    checkpoint = source / "checkpoints" / "step_000002"
    ran = run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(branch),
                     "--init-from", str(checkpoint), "--n-rollouts", "32", "--total-steps", "1",
                     "--lr", "3e-4", "--probe-prompts", "8", *kl)
    assert f"initialised from {checkpoint}" in ran.stdout
    # the source's reference (reset at step 2: its policy then) is the branch's from its start
    source_policy = load_file(str(checkpoint / "model" / "model.safetensors"))
    branch_reference = reference_weights(branch / "reference" / "step_000000")
    assert all(torch.equal(source_policy[name], branch_reference[f"model.{name}"])
               for name in source_policy)
    source_probes, branch_probes = (torch.load(source / "probes.pt"),
                                    torch.load(branch / "probes.pt"))
    assert source_probes["prompts"] and branch_probes["prompts"] == source_probes["prompts"]
    # changes are measured from the source's step 0
    assert torch.equal(branch_probes["base"], source_probes["base"])
    state = lambda run, step: torch.load(run / "checkpoints" / f"step_{step:06d}" / "state"
                                         / "optimizer.bin")
    before, after = state(source, 2), state(branch, 1)
    # AdamW continued: its step count went on from the source's (2 steps x 2 mini-batches), at the
    # branch's lr
    assert float(after["state"][0]["step"]) == float(before["state"][0]["step"]) + 2
    assert after["param_groups"][0]["lr"] == 3e-4
    rows = [json.loads(line) for line in (branch / "metrics.jsonl").read_text().splitlines()]
    probe_rows = [r for r in rows if "probe_improved_frac" in r]
    # the branch moved
    assert [r["step"] for r in probe_rows] == [0, 1] and probe_rows[0]["probe_mean_change"] != 0
    assert all({"gen_tokens_per_s", "correct_frac/0", "correct_frac/1"} <= set(r)
               for r in rows if "reward_mean" in r)


def reference_weights(folder) -> dict:
    """A reference/step_N folder's weights, keyed like update.Policy's state_dict."""
    state = update.Policy(rollout.load_policy(str(ensure_tiny_model()))[0]).state_dict()
    dcp.load(state, checkpoint_id=folder)
    return state


def test_init_from_a_folder_that_is_not_a_checkpoint_is_one_line(tmp_path):
    result = run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(tmp_path / "b"),
                        "--init-from", str(tmp_path), check=False)
    assert (result.returncode != 0
            and "--init-from needs a complete checkpoint folder" in result.stderr)
    assert "Traceback" not in result.stderr


class CreatesFileWhenUnpickled:
    """What a hostile pickle holds: an object whose unpickling calls a function of its choice."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def test_a_shared_run_folder_whose_pickles_would_run_code_is_refused_without_running_it(
        smoke_run, tmp_path):
    out, ran_code = smoke_run, tmp_path / "ran_code"  # a run with a probe set
    checkpoints = out / "checkpoints"
    hostile = {"step": 2, "data_position": 0, "payload": CreatesFileWhenUnpickled(ran_code)}
    torch.save(hostile, checkpoints / "step_000002" / "trainer_state.pt")
    branch = run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(tmp_path / "b"),
                        "--init-from", str(checkpoints / "step_000002"), check=False, env=NO_BWRAP)
    assert branch.returncode != 0 and "does not load as plain data" in branch.stderr
    assert "Traceback" not in branch.stderr
    resumed = run_script("train_brorl.py", "--output-dir", str(out), "--resume",
                         "--total-steps", "3", env=NO_BWRAP)
    assert "skipping the damaged checkpoint" in resumed.stdout
    assert "resumed from" in resumed.stdout and "step_000001 at step 1" in resumed.stdout
    torch.save({"prompts": CreatesFileWhenUnpickled(ran_code)}, out / "probes.pt")
    again = run_script("train_brorl.py", "--output-dir", str(out), "--resume",
                       "--total-steps", "4", check=False, env=NO_BWRAP)
    assert again.returncode != 0 and "probes.pt does not load as plain data" in again.stderr
    assert "Traceback" not in again.stderr
    assert not ran_code.exists()
