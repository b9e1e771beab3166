"""The install and the machine: pins that resolve together, and GPUs torch cannot use refused."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_script


def test_the_gpu_requirements_resolve_together_with_the_pinned_torch(tmp_path):
    """pip's resolver, dry run, on what a GPU machine installs: a vLLM pin whose wheel declares
    another torch than requirements.txt has no solution."""
    report = tmp_path / "report.json"
    resolve = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(report), "-r", "requirements.txt", "-r", "requirements-vllm.txt"]
    result = subprocess.run(resolve, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    chosen = {item["metadata"]["name"]: item["metadata"]["version"]
              for item in json.loads(report.read_text())["install"]}
    pins = {line.split("==")[0]: line.split("==")[1].split()[0]
            for name in ("requirements.txt", "requirements-vllm.txt")
            for line in (ROOT / name).read_text().splitlines() if "==" in line
            and not line.startswith("#")}
    assert chosen["torch"].split("+")[0] == pins["torch"]
    assert chosen["vllm"] == pins["vllm"]


@pytest.fixture
def old_driver_path(tmp_path) -> str:
    """A PATH on which nvidia-smi lists a GPU whose driver is too old for torch's CUDA build."""
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "NVIDIA H100 80GB HBM3, 550.54.15"\n')
    fake.chmod(0o755)
    return f"{fake.parent}{os.pathsep}{os.environ['PATH']}"


def refused_for_the_old_driver(result) -> bool:
    return (result.returncode == 1 and "Traceback" not in result.stderr
            and result.stderr.startswith("error: nvidia-smi sees 1 GPU(s) (NVIDIA H100 80GB HBM3, "
                                         "driver 550.54.15) but torch")
            and "--device cpu" in result.stderr)


def test_gpus_that_torch_cannot_use_stop_the_run_in_one_line_instead_of_training_on_the_cpu(
        old_driver_path, tmp_path):
    args = ["train_brorl.py", "--preset", "smoke", "--output-dir", str(tmp_path / "run")]
    refused = run_script(*args, check=False, env={"PATH": old_driver_path})
    assert refused_for_the_old_driver(refused), refused.stderr
    assert not (tmp_path / "run").exists()
    chosen = run_script(*args, "--device", "cpu", "--total-steps", "0",
                        env={"PATH": old_driver_path})
    assert "step 0: eval_pass1" in chosen.stdout


def test_gpus_that_torch_cannot_use_stop_an_eval_in_one_line_too(old_driver_path,
                                                                 untrained_model_dir, tmp_path):
    out = tmp_path / "eval.json"
    args = ["eval.py", "--model", str(untrained_model_dir), "--data", "data/arith_test.jsonl",
            "--max-problems", "1", "--samples", "1", "--max-new-tokens", "4", "--out", str(out)]
    refused = run_script(*args, check=False, env={"PATH": old_driver_path})
    assert refused_for_the_old_driver(refused), refused.stderr
    assert not out.parent.joinpath("eval.samples.jsonl").exists()
    run_script(*args, "--device", "cpu", env={"PATH": old_driver_path})
    assert json.loads(out.read_text())["benchmarks"]["arith_test"]["problems"] == 1
