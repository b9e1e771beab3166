"""The install and the machine: pins that resolve together, and GPUs torch cannot use refused."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT, run_script


def requirement_lines(name: str) -> list[str]:
    return [line.split(" #")[0].strip() for line in (ROOT / name).read_text().splitlines()
            if line.strip() and not line.startswith(("#", "-r"))]


def pins() -> dict[str, str]:
    """The exact versions requirements.txt and requirements-vllm.txt pin: torch, vllm, ..."""
    return {line.split("==")[0]: line.split("==")[1]
            for name in ("requirements.txt", "requirements-vllm.txt")
            for line in requirement_lines(name) if "==" in line}


def applies(requirement: Requirement) -> bool:
    """Whether a wheel's requirement holds on this machine (Linux x86_64, as the GPU machines)."""
    return requirement.marker is None or requirement.marker.evaluate({"extra": ""})


def chosen_without_dependencies(report: Path, *requirements: str) -> dict[str, dict]:
    """pip's choice for `requirements` alone, their dependencies left out (a dry run: only the
    wheels' metadata is downloaded): name -> the chosen wheel's metadata."""
    resolve = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
               "--no-deps", "--quiet", "--report", str(report), *requirements]
    result = subprocess.run(resolve, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    return {canonicalize_name(item["metadata"]["name"]): item["metadata"]
            for item in json.loads(report.read_text())["install"]}


def test_the_vllm_pin_and_requirements_txt_agree_on_torch_and_every_package_both_name(tmp_path):
    """A vLLM pin whose wheel declares another torch than requirements.txt (or a transformers range
    outside its range) has no solution: pip must find one version of each package that both
    name, with every chosen wheel's requirements on the others met."""
    vllm = chosen_without_dependencies(tmp_path / "vllm.json", "-r", "requirements-vllm.txt")
    ours = {canonicalize_name(Requirement(line).name)
            for line in requirement_lines("requirements.txt")}
    shared = [str(requirement) for requirement in map(Requirement, vllm["vllm"]["requires_dist"])
              if canonicalize_name(requirement.name) in ours and applies(requirement)]
    assert "torch" in {Requirement(requirement).name for requirement in shared}
    chosen = chosen_without_dependencies(tmp_path / "together.json", "-r", "requirements.txt",
                                         "-r", "requirements-vllm.txt", *shared)
    assert chosen["torch"]["version"].split("+")[0] == pins()["torch"]
    assert chosen["vllm"]["version"] == pins()["vllm"]
    for name, metadata in chosen.items():
        for requirement in map(Requirement, metadata.get("requires_dist") or []):
            other = chosen.get(canonicalize_name(requirement.name))
            if other is not None and applies(requirement):
                assert requirement.specifier.contains(other["version"], prereleases=True), (
                    name, str(requirement), other["version"])


@pytest.mark.slow  # ~35 s of pip resolving; the pins' agreement above runs in every suite
def test_the_gpu_requirements_resolve_together_with_the_pinned_torch(tmp_path):
    """pip's resolver, dry run, on everything a GPU machine installs, dependencies of dependencies
    included."""
    report = tmp_path / "report.json"
    resolve = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--report", str(report), "-r", "requirements.txt", "-r", "requirements-vllm.txt"]
    result = subprocess.run(resolve, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    chosen = {item["metadata"]["name"]: item["metadata"]["version"]
              for item in json.loads(report.read_text())["install"]}
    assert chosen["torch"].split("+")[0] == pins()["torch"]
    assert chosen["vllm"] == pins()["vllm"]


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
