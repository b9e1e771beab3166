"""eval.py: the unbiased pass@k estimator and the command line."""

import itertools
import json
import math

import pytest

from conftest import run_script
from eval import k_values, pass_at_k


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """Fraction of all k-subsets of n samples (c correct) that contain a correct one."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@pytest.mark.parametrize("n, c, k", [(n, c, k) for n in (1, 4, 7) for c in range(n + 1) for k in range(1, n + 1)])
def test_pass_at_k_equals_brute_force_enumeration(n, c, k):
    assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k))


def test_pass_at_k_hand_values():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 3, 2) == pytest.approx(1 - math.comb(7, 2) / math.comb(10, 2))
    assert pass_at_k(16, 0, 16) == 0.0
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_k_values():
    assert k_values(16) == [1, 2, 4, 8, 16]
    assert k_values(6) == [1, 2, 4, 6]
    assert k_values(1) == [1]


def test_eval_cli_scores_a_checkpoint_and_writes_json(untrained_model_dir, tmp_path):
    out = tmp_path / "result.json"
    result = run_script("eval.py", "--model", str(untrained_model_dir), "--data", "data/arith_test.jsonl",
                        "--samples", "4", "--max-problems", "8", "--out", str(out))
    assert "pass@1" in result.stdout
    saved = json.loads(out.read_text())
    assert saved["problems"] == 8 and set(saved["pass_at_k"]) == {"1", "2", "4"}
    assert 0.0 <= saved["pass1"] <= saved["pass_at_k"]["4"] <= 1.0


def test_eval_cli_missing_model_is_one_clear_line(tmp_path):
    result = run_script("eval.py", "--model", str(tmp_path / "nope"), "--data", "data/arith_test.jsonl", check=False)
    assert result.returncode != 0
    assert result.stderr.strip() == f"error: model path does not exist: {tmp_path / 'nope'}"
