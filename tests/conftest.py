"""Shared fixtures: a small untrained model built locally (no hub), and a way to run the scripts."""

import contextlib
import itertools
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# OpenMP threads waiting for work sleep instead of spinning, in the tests and every launch (set
# before torch loads): on a busy 2-core machine spinning threads take the cores from the working
# ones (the tied model's warm-up, machine loaded: 126 s spinning, 12 s sleeping); same arithmetic
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import tiny_model  # noqa: E402

# no core files from the processes a test aborts (stop_with_stacks), inherited by every launch
resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))


@pytest.fixture(scope="session")
def untrained_model_dir(tmp_path_factory) -> Path:
    """The tiny Qwen2 architecture without warm-up: fast to build, same loading path as any
    model."""
    return tiny_model.build(tmp_path_factory.mktemp("models") / "tiny",
                            tiny_model.TinySpec(warmup_steps=0))


@pytest.fixture(scope="session")
def untrained_policy(untrained_model_dir):
    from rollout import load_policy

    return load_policy(str(untrained_model_dir))


LAUNCH = "BRORL_TEST_LAUNCH"  # marks every process a run_script started, reparented ones too
LAUNCHES = itertools.count()


def a_trainer_state(**values) -> dict:
    """What the trainer writes into a checkpoint's trainer_state.pt, with `values` changed."""
    return {"step": 1, "data_position": 0, "config": {}, "reference_step": 0, "allocation": {},
            "files": {}, **values}


def run_script(*args: str, check: bool = True, env: dict | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """Run one of the project's scripts as a user would, from the repository root (`env`: extra
    variables). A run still going after `timeout` s fails the test with the Python stacks of all its
    processes (the launcher's workers too), then none of them is left running."""
    launch = f"{os.getpid()}-{next(LAUNCHES)}"
    process = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "PYTHONFAULTHANDLER": "1", LAUNCH: launch,
                                    **(env or {})})
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_with_stacks(process.pid, launch)
        stdout, stderr = process.communicate(timeout=30)
        raise AssertionError(f"{args} still running after {timeout} s; its processes' stacks "
                             f"(stderr):\n{stderr[-30000:]}") from None
    except BaseException:  # Ctrl-C, or any other error here: leave nothing running
        signal_launch(process.pid, launch, signal.SIGKILL)
        raise
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed "
                             f"({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def signal_tree(pid: int, sig: int) -> list[psutil.Process]:
    """Send `sig` to a process and all its descendants: torchrun starts each worker in a session of
    its own, out of reach of `os.killpg` on the launcher's group. Returns the processes."""
    return signal_all(process_tree(pid), sig)


def signal_launch(pid: int, launch: str, sig: int) -> list[psutil.Process]:
    """`signal_tree`, and the processes of this launch that left the tree (their parent gone)."""
    found = {process.pid: process for process in process_tree(pid)}
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.pid not in found and process.environ().get(LAUNCH) == launch:
                found[process.pid] = process
    return signal_all(list(found.values()), sig)


def process_tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def signal_all(processes: list[psutil.Process], sig: int) -> list[psutil.Process]:
    for process in reversed(processes):
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(sig)
    return processes


def stop_with_stacks(pid: int, launch: str) -> None:
    """SIGABRT to a launch's processes, one at a time, the launcher last: with PYTHONFAULTHANDLER
    set each Python process prints every thread's stack as it dies. All are frozen first
    (SIGSTOP), so that no launcher tears its workers down before they print, and the stacks do not
    interleave; any process still there 10 s after its turn is killed."""
    processes = signal_launch(pid, launch, signal.SIGSTOP)
    for process in reversed(processes):
        with contextlib.suppress(psutil.NoSuchProcess):
            process.send_signal(signal.SIGABRT)
            process.send_signal(signal.SIGCONT)
            deadline = time.time() + 10
            while process.status() != psutil.STATUS_ZOMBIE and time.time() < deadline:
                time.sleep(0.05)
    signal_all(processes, signal.SIGKILL)


def accelerate_launch(*args: str, config: str = "configs/ddp_cpu.yaml", check: bool = True):
    """`accelerate launch --config_file configs/ddp_cpu.yaml ...`: 2 processes, DDP on CPU.

    A free port per launch, so test runs side by side on one machine do not collide on 29500."""
    return run_script("-m", "accelerate.commands.launch", "--config_file", config,
                      "--main_process_port", str(free_port()), *args, check=check)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


NO_BWRAP = {"PATH": os.path.dirname(sys.executable)}  # the venv's scripts, not /usr/bin/bwrap
# KL on with a reference reset at step 2, a probe set and DAPO refills (step 2 needs one): what the
# tests of a finished run need
SMOKE_RUN = ["--preset", "smoke", "--kl-coef", "0.01", "--ref-reset-every", "2",
             "--probe-prompts", "8", "--refill-rounds", "3"]


@pytest.fixture(scope="session")
def finished_smoke_run(tmp_path_factory) -> Path:
    """`train_brorl.py` with SMOKE_RUN, trained once per test session, without bubblewrap (arith
    needs no sandbox). Read-only: a test that resumes or damages it takes `smoke_run`, a copy."""
    out = tmp_path_factory.mktemp("finished") / "smoke"
    run_script("train_brorl.py", *SMOKE_RUN, "--output-dir", str(out), env=NO_BWRAP)
    return out


@pytest.fixture
def smoke_run(finished_smoke_run, tmp_path) -> Path:
    """This test's own copy of the finished smoke run."""
    return Path(shutil.copytree(finished_smoke_run, tmp_path / "smoke"))


def trainer_logprobs(model, rollouts, temperature: float, micro_batch_tokens: int = 16384):
    """update.py's teacher-forced log-probs [S, R] of the tokens an engine sampled (compare with
    rollouts.logprobs)."""
    import torch
    import update

    batch = update.TrainBatch(rollouts.prompt_ids, rollouts.prompt_mask, rollouts.response_ids,
                              rollouts.response_mask, torch.zeros(len(rollouts.texts)))
    cfg = update.UpdateConfig(temperature=temperature, micro_batch_tokens=micro_batch_tokens)
    return update.batch_logprobs(update.Policy(model), batch, cfg)
