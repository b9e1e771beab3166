"""The install and the machine: pins that resolve together, and GPUs torch cannot use refused."""

import json
import os
import subprocess
import sys

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


def test_gpus_that_torch_cannot_use_stop_the_run_in_one_line_instead_of_training_on_the_cpu(
        tmp_path):
    fake = tmp_path / "bin" / "nvidia-smi"  # a machine with a GPU and an old driver
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\necho "NVIDIA H100 80GB HBM3, 550.54.15"\n')
    fake.chmod(0o755)
    path = f"{fake.parent}{os.pathsep}{os.environ['PATH']}"
    args = ["train_brorl.py", "--preset", "smoke", "--output-dir", str(tmp_path / "run")]
    refused = run_script(*args, check=False, env={"PATH": path})
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.startswith("error: nvidia-smi sees 1 GPU(s) (NVIDIA H100 80GB HBM3, "
                                     "driver 550.54.15) but torch")
    assert "--device cpu" in refused.stderr and not (tmp_path / "run").exists()
    chosen = run_script(*args, "--device", "cpu", "--total-steps", "0", env={"PATH": path})
    assert "step 0: eval_pass1" in chosen.stdout
