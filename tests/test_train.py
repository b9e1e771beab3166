"""train_brorl.py end to end: config validation, a smoke run, resume after a crash."""

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

import common
import train_brorl
from conftest import ROOT, run_script

SMOKE_KEYS = {"step", "reward_mean", "pass_rate", "samples_per_s", "shrink_frac", "shrink_worst",
              "verify/seconds", "verify/timeouts", "verify/cache_hit_rate"}


@pytest.mark.parametrize("args, message", [
    (["--n-rollouts", "1"], "n_rollouts must be >= 2"),
    (["--eps-low", "-0.1"], "eps_low must be in [0, 1)"),
    (["--prompts-per-step", "3", "--n-rollouts", "5", "--minibatches", "2"], "not divisible into 2 mini-batches"),
    (["--preset", "huge"], "unknown preset 'huge'"),
    (["--model", "/no/such/model"], "model path does not exist: /no/such/model"),
    (["--train-data", "/no/such.jsonl"], "data file not found: /no/such.jsonl"),
    (["--resume"], "--resume needs --output-dir"),
    (["--tis-cap", "0.5"], "tis_cap must be 0 (off) or >= 1"),
    (["--gpu-memory-utilization", "1.5"], "gpu_memory_utilization must be in (0, 1]"),
])
def test_bad_config_values_are_rejected_with_one_clear_line(args, message):
    with pytest.raises(common.InputError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        train_brorl.parse_config(args)


def test_bad_config_on_the_command_line_prints_one_line_and_no_traceback():
    result = run_script("train_brorl.py", "--n-rollouts", "1", check=False)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == ["error: n_rollouts must be >= 2 (a group baseline needs two rollouts), got 1"]


def test_presets_are_plain_overrides_and_flags_win():
    cfg = train_brorl.parse_config(["--preset", "smoke", "--total-steps", "5"])
    assert cfg.preset == "smoke" and cfg.n_rollouts == 16 and cfg.total_steps == 5


# The paper's recipe (paper.md, Sec. 3-4.2); a silent change to a preset fails here.
PAPER_PRESET_TABLE = {
    #  option               brorl-paper               prorl-paper
    "model": ("nvidia/Nemotron-Research-Reasoning-Qwen-1.5B",) * 2,
    "n_rollouts": (512, 16),
    "prompts_per_step": (128, 512),
    "minibatches": (8, 8),  # the same number of PPO mini-batches per step
    "lr": (2e-6 * 8 ** 0.5, 2e-6),  # η = η_0·sqrt(B_new/B_0), B = 65,536 vs 8,192 samples
    "advantage": ("reinforce_pp_baseline",) * 2,
    "eps_low": (0.2, 0.2),
    "eps_high": (0.28, 0.28),
    "kl_estimator": ("k2", "k2"),
    "ref_reset_every": (200, 200),
    "dynamic_sampling": (True, True),
    "refill_rounds": (4, 4),
    "tis_cap": (2.0, 2.0),
    "max_new_tokens": (16384, 16384),
    "temperature": (1.2, 1.2),
    "engine": ("vllm", "vllm"),
    "total_steps": (191, 535),
    "eval_samples": (16, 16),
    "eval_temperature": (0.6, 0.6),
    "eval_top_p": (0.95, 0.95),
}


@pytest.mark.parametrize("column, preset", [(0, "brorl-paper"), (1, "prorl-paper")])
def test_paper_presets_hold_the_papers_recipe(column, preset):
    values = {**dataclasses.asdict(train_brorl.Config()), **train_brorl.PRESETS[preset]}
    for option, expected in PAPER_PRESET_TABLE.items():
        assert values[option] == pytest.approx(expected[column]), option


def test_paper_preset_demands_a_pinned_revision():
    with pytest.raises(common.InputError, match="--model-revision is required"):
        train_brorl.parse_config(["--preset", "brorl-paper"])


def test_malformed_data_line_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "1+1=", "answer": "2", "task": "arith"}\n{"prompt": "2+2=", "answer": 4, "task": "arith"}\n')
    with pytest.raises(common.InputError, match=f"{path}:2: field 'answer' must be a string"):
        common.load_tasks(path)
    path.write_text("not json\n")
    with pytest.raises(common.InputError, match=f"{path}:1: not valid JSON"):
        common.load_tasks(path)


NO_BWRAP = {"PATH": os.path.dirname(sys.executable)}  # the venv's scripts, not /usr/bin/bwrap


def test_smoke_run_logs_metrics_tensorboard_and_a_resumable_checkpoint(tmp_path):
    out = tmp_path / "smoke"
    run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(out), env=NO_BWRAP)  # arith needs no sandbox
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in rows if "reward_mean" in r]
    eval_rows = [r for r in rows if "eval_pass1" in r]
    assert [r["step"] for r in train_rows] == [1, 2] and all(SMOKE_KEYS <= set(r) for r in train_rows)
    assert [r["step"] for r in eval_rows] == [0, 2]
    assert list(out.glob("events.out.tfevents.*"))
    checkpoint = out / "checkpoints" / "step_000002"
    assert (checkpoint / "model" / "config.json").is_file() and (checkpoint / "trainer_state.pt").is_file()
    model, _ = common.load_policy(str(checkpoint / "model"))  # what eval.py and from_pretrained load
    assert model.config.tie_word_embeddings is False
    again = run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(out), check=False)
    assert again.returncode != 0 and "pass --resume" in again.stderr
    run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(out), "--resume", "--total-steps", "3")
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 2, 3, 3]


def test_one_run_trains_on_math_code_and_reasoning_gym_tasks_together(tmp_path):
    mixed = [{"task": "math", "prompt": "1+1=", "answer": "2"},
             {"task": "code", "prompt": "add=", "answer": {"inputs": ["1 2\n"], "outputs": ["3"]}},
             *common.load_tasks(ROOT / "data" / "rg_test.jsonl")[:2]]
    data = tmp_path / "mixed.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in mixed))
    run_script("train_brorl.py", "--preset", "smoke", "--train-data", str(data), "--test-data", str(data),
               "--output-dir", str(tmp_path / "run"), "--eval-benchmarks", "rg/gcd", "humaneval",
               "--eval-max-problems", "3")
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "verify/seconds" in r] == [1, 2]
    assert [r["step"] for r in rows if "rg/gcd/pass1" in r and "humaneval/pass1" in r] == [0, 2]
    final = json.loads((tmp_path / "run" / "eval.json").read_text())  # what eval.py --out writes
    assert set(final["benchmarks"]) == {"test_data", "rg/gcd", "humaneval"} and "code" in final["suites"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task": "code", "prompt": "x", "answer": {"inputs": [1]}}) + "\n")
    result = run_script("train_brorl.py", "--preset", "smoke", "--train-data", str(bad), check=False)
    assert result.returncode != 0 and "bad.jsonl: task record 1: code answer must be" in result.stderr
    assert "Traceback" not in result.stderr


def test_without_bubblewrap_code_data_is_refused_in_one_line(tmp_path):
    code = tmp_path / "code.jsonl"
    code.write_text(json.dumps({"task": "code", "prompt": "add=", "answer": {"inputs": ["1 2"], "outputs": ["3"]}}) + "\n")
    result = run_script("train_brorl.py", "--preset", "smoke", "--train-data", str(code), check=False, env=NO_BWRAP)
    assert result.returncode != 0 and result.stderr.strip().splitlines() == [
        "error: code tasks run untrusted programs, and bubblewrap is not installed: install bubblewrap "
        "(apt-get install bubblewrap), or pass --unsafe-no-sandbox to run them without isolation"]


def final_weights(out_dir):
    return load_file(str(train_brorl.latest_checkpoint(out_dir) / "model" / "model.safetensors"))


def test_kill_9_mid_run_then_resume_gives_the_parameters_of_an_uninterrupted_run(tmp_path):
    args = ["--preset", "smoke", "--total-steps", "6", "--eval-every", "100", "--kl-coef", "0.01",
            "--ref-reset-every", "2", "--minibatches", "2"]
    run_script("train_brorl.py", *args, "--output-dir", str(tmp_path / "straight"))

    crashed = tmp_path / "crashed"
    proc = subprocess.Popen([sys.executable, "train_brorl.py", *args, "--output-dir", str(crashed)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (crashed / "checkpoints" / "step_000003").exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    last = train_brorl.latest_checkpoint(crashed)
    assert last is not None and last.name < "step_000006", "the kill came too late to test anything"
    run_script("train_brorl.py", *args, "--output-dir", str(crashed), "--resume")

    straight, resumed = final_weights(tmp_path / "straight"), final_weights(crashed)
    assert straight.keys() == resumed.keys()
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)
    steps = [json.loads(line)["step"] for line in (crashed / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3, 4, 5, 6, 6]  # no step logged twice, none missing


@pytest.mark.slow
def test_default_run_raises_held_out_pass1_by_20_points(tmp_path):
    """The README's claim: `python train_brorl.py` (no flags) learns, within 10 minutes on 2 cores."""
    start = time.time()
    run_script("train_brorl.py", "--output-dir", str(tmp_path / "demo"))
    evals = [json.loads(line) for line in (tmp_path / "demo" / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in evals if "eval_pass1" in r]
    assert evals[0]["step"] == 0 and evals[-1]["step"] == train_brorl.Config.total_steps
    assert evals[-1]["eval_pass1"] - evals[0]["eval_pass1"] >= 0.20
    assert time.time() - start < 600


def test_a_torn_metrics_line_and_a_half_written_checkpoint_do_not_break_resume(tmp_path):
    out = tmp_path / "run"
    run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(out), "--eval-every", "100")
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "reward_me')  # killed mid-write
    (out / "checkpoints" / "step_000003" / "model").mkdir(parents=True)  # killed before trainer_state.pt
    assert train_brorl.latest_checkpoint(out).name == "step_000002"
    run_script("train_brorl.py", "--preset", "smoke", "--output-dir", str(out), "--resume", "--total-steps", "3")
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 2, 3, 3]


def accelerate_launch(*args: str):
    """`accelerate launch --config_file configs/ddp_cpu.yaml ...`: 2 processes, DDP on CPU.

    A free port per launch, so test runs side by side on one machine do not collide on 29500."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return run_script("-m", "accelerate.commands.launch", "--config_file", "configs/ddp_cpu.yaml",
                      "--main_process_port", str(port), *args)


def test_smoke_run_on_two_processes_saves_every_processes_state_and_resumes(tmp_path):
    out = tmp_path / "ddp"
    accelerate_launch("train_brorl.py", "--preset", "smoke", "--output-dir", str(out))
    state = out / "checkpoints" / "step_000002" / "state"
    assert (state / "random_states_0.pkl").is_file() and (state / "random_states_1.pkl").is_file()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 2]  # one writer: the main process
    accelerate_launch("train_brorl.py", "--preset", "smoke", "--output-dir", str(out), "--resume", "--total-steps", "3")
    assert (out / "checkpoints" / "step_000003" / "model" / "config.json").is_file()


def test_one_update_on_two_processes_equals_one_process_on_the_same_global_batch(untrained_model_dir, tmp_path):
    run_script("tests/data_parallel_update.py", str(untrained_model_dir), str(tmp_path / "one.pt"))
    accelerate_launch("tests/data_parallel_update.py", str(untrained_model_dir), str(tmp_path / "two.pt"))
    one, two = torch.load(tmp_path / "one.pt"), torch.load(tmp_path / "two.pt")
    start = common.load_policy(str(untrained_model_dir))[0].state_dict()
    assert any(not torch.equal(start[name], one[name]) for name in one)  # the update moved something
    for name in one:
        assert torch.allclose(one[name], two[name], atol=1e-6), name


def test_dynamic_sampling_refills_the_batch_until_enough_groups_are_kept(tmp_path):
    out = tmp_path / "refill"
    run_script("train_brorl.py", "--preset", "smoke", "--refill-rounds", "3", "--output-dir", str(out), "--eval-every", "9")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if "gen_rounds" in line]
    prompts = train_brorl.PRESETS["smoke"]["prompts_per_step"]
    for row in rows:
        kept = round(row["pass_rate"] * prompts * row["gen_rounds"])
        assert row["gen_rounds"] == 4 or kept >= prompts  # stopped early only once the batch was full
        assert row["gen_rounds"] > 1 or row["pass_rate"] == 1.0
    assert any(row["gen_rounds"] > 1 for row in rows)  # this seed needs a refill at step 2
