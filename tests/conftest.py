"""Shared fixtures: a small untrained model built locally (no hub), and a way to run the scripts."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import tiny_model  # noqa: E402


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


def run_script(*args: str, check: bool = True,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """Run one of the project's scripts as a user would, from the repository root (`env`: extra
    variables)."""
    result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=600, env={**os.environ, **(env or {})})
    if check and result.returncode != 0:
        raise AssertionError(f"{args} failed "
                             f"({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


def accelerate_launch(*args: str, config: str = "configs/ddp_cpu.yaml", check: bool = True):
    """`accelerate launch --config_file configs/ddp_cpu.yaml ...`: 2 processes, DDP on CPU.

    A free port per launch, so test runs side by side on one machine do not collide on 29500."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return run_script("-m", "accelerate.commands.launch", "--config_file", config,
                      "--main_process_port", str(port), *args, check=check)


def trainer_logprobs(model, rollouts, temperature: float, micro_batch_tokens: int = 16384):
    """update.py's teacher-forced log-probs [S, R] of the tokens an engine sampled (compare with
    rollouts.logprobs)."""
    import torch
    import update

    batch = update.TrainBatch(rollouts.prompt_ids, rollouts.prompt_mask, rollouts.response_ids,
                              rollouts.response_mask, torch.zeros(len(rollouts.texts)))
    cfg = update.UpdateConfig(temperature=temperature, micro_batch_tokens=micro_batch_tokens)
    return update.batch_logprobs(update.Policy(model), batch, cfg)
