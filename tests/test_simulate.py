"""simulate.py: Theorem 1 against autograd for the paper's surrogate and the trainer's estimators,
Lemma 2 by Monte Carlo, the Fig. 3 simulator and its files."""

import csv
import errno
import json
import math
import re

import pytest
import torch

import simulate
from conftest import run_script


def fixed_instance(vocab=50, n=20, peak=2.0, seed=0, r_c=1.0, r_w=-1.0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(vocab, generator=g, dtype=torch.float64) * peak
    correct = torch.arange(vocab) < vocab // 3
    draws = torch.multinomial(torch.softmax(z, -1), n, replacement=True, generator=g)
    sampled = torch.zeros(vocab, dtype=torch.bool)
    sampled[draws] = True
    return z, correct, sampled & correct, sampled & ~correct, r_c, r_w, 0.5, n


@pytest.mark.parametrize("kwargs", [dict(), dict(peak=0.0), dict(peak=6.0, n=3),
                          dict(vocab=500, n=400, r_c=0.3, r_w=-2.0)])
def test_theorem1_closed_form_equals_the_autograd_first_order_change(kwargs):
    instance = fixed_instance(**kwargs)
    *terms, total = simulate.theorem1_terms(*instance)
    assert float(total) == pytest.approx(float(sum(terms)))
    # relative to the terms' sizes, as --check-theorem reports
    size = float(sum(abs(t) for t in terms))
    # --check-theorem's bound: float64 throughout but for the autograd path's float32 rewards (0.3
    # is 2^-24 = 6e-8 off in float32)
    assert abs(float(total) - float(simulate.first_order_delta_q_pos(*instance))) <= 1e-6 * size


def test_sampled_terms_are_never_negative_and_only_the_unsampled_term_can_be():
    signs = set()
    for seed in range(200):
        sampled_pos, sampled_neg, unsampled, _ = simulate.theorem1_terms(
            *fixed_instance(seed=seed, peak=3.0, n=5))
        assert sampled_pos >= 0 and sampled_neg >= 0
        signs.add(bool(unsampled < 0))
    assert signs == {True, False}  # the coupling term really takes both signs



def fixed_group(vocab=40, n=12, peak=2.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(vocab, generator=g, dtype=torch.float64) * peak
    correct = torch.arange(vocab) < vocab // 3
    return z, correct, torch.multinomial(torch.softmax(z, -1), n, replacement=True, generator=g)


@pytest.mark.parametrize("name", simulate.ESTIMATOR_ROWS)
@pytest.mark.parametrize("kwargs", [dict(), dict(peak=0.0), dict(peak=6.0, n=3),
                                    dict(vocab=300, n=63, seed=1)])
def test_trainer_update_terms_equal_the_autograd_first_order_change(name, kwargs):
    z, correct, tokens = fixed_group(**kwargs)
    (*terms, total), delta_z, bound = simulate.estimator_step(name, z, correct, tokens, eta=0.5)
    assert float(total) == pytest.approx(float(sum(terms)))
    # closed form and autograd are each within one float64 rounding bound of the exact value
    assert abs(float(total) - float(simulate.first_order_change(z, correct, delta_z))) <= 2 * bound


def test_group_baselined_estimators_never_shrink_the_correct_mass_and_raw_rewards_can():
    g = torch.Generator().manual_seed(1)
    negative_totals = dict.fromkeys(["raw", "surrogate"], 0)
    single_correct_tokens_fall = 0
    for _ in range(2000):
        z, correct, tokens = simulate.random_group(g)
        for name in simulate.ADVANTAGES:
            weights = simulate.group_weights(name, correct[tokens])
            bound = simulate.rounding_bound(len(z), weights, 1.0)
            sampled_pos, sampled_neg, unsampled, total = simulate.logprob_update_terms(
                z, correct, tokens, weights, 1.0)
            assert min(sampled_pos, sampled_neg, total) >= -bound and abs(unsampled) <= bound
        # with the baseline, every unsampled token moves by -(1/N)·Σ_j A_j·p_{y_j}
        p = torch.softmax(z, -1)
        weights = simulate.group_weights("grpo", correct[tokens])
        unsampled_correct = correct.clone().index_fill_(0, tokens, False)
        single_correct_tokens_fall += bool(unsampled_correct.any()
                                           and (weights * p[tokens]).sum() > 0)
        for name in negative_totals:
            (*_, total), _, bound = simulate.estimator_step(name, z, correct, tokens)
            negative_totals[name] += float(total) < -bound
    assert all(count > 0 for count in negative_totals.values()), negative_totals
    assert single_correct_tokens_fall > 0  # the total grows while single correct tokens fall

def test_lemma2_unsampled_second_moment_matches_its_expectation():
    g = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(100, generator=g, dtype=torch.float64) * 2, -1)
    for n in (2, 32, 256):
        mean, se = simulate.unsampled_second_moment_mc(p, n, 5000, g)
        assert abs(mean - float((p**2 * (1 - p) ** n).sum())) <= 4 * se


@pytest.mark.parametrize("n", [64, 20_000])  # torch.multinomial path and the sorted-uniforms path
def test_sampled_token_frequencies_follow_p(n):
    p = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]])
    g = torch.Generator().manual_seed(0)
    sample_tokens = simulate.TokenSampler(4, n, [g, g])
    calls = -(-64_000 // n)  # at least 64,000 draws per row: 1,000 calls of 64, 4 of 20,000
    counts = sum(torch.zeros_like(p).scatter_add_(1, sample_tokens(p), torch.ones(2, n))
                 for _ in range(calls))
    # a frequency's standard error is at most sqrt(0.25 / 64,000) = 0.002: 0.01 is 5 of them
    assert torch.allclose(counts / (calls * n), p, atol=0.01)


# A float32 mass over the 128,000-token vocabulary: its normaliser and its own sum are pairwise
# sums, each <= log2(128,000) = 17 roundings of 2^-24 off
FLOAT32_MASS = 2 * 17 * 2**-24


def test_seeded_start_is_the_papers_correct_mass():
    cfg = simulate.SimConfig()
    z, correct = simulate.initial_state(cfg)
    p = simulate.softmax_(z, torch.empty_like(z))
    assert float(p.sum()) == pytest.approx(1.0, abs=FLOAT32_MASS)
    expected = 10_000 * math.exp(3) / (10_000 * math.exp(3) + math.exp(5) + 117_999)
    assert (float(p[correct].sum()) == pytest.approx(expected, abs=FLOAT32_MASS)
            and expected == pytest.approx(0.6296, abs=1e-4))


SMALL = simulate.SimConfig(vocab=3000, n_correct=200, steps=30, ns=[4, 2000], seeds=3)


def test_simulator_shapes_ranges_and_determinism():
    first, again = simulate.simulate(SMALL), simulate.simulate(SMALL)
    for n in SMALL.ns:
        for name, values in first[n].items():
            assert values.shape == (SMALL.steps + 1, SMALL.seeds)
            assert torch.equal(values, again[n][name])
        assert ((first[n]["correct_mass"] > 0) & (first[n]["correct_mass"] < 1)).all()
        assert ((first[n]["frac_increased"][0] == 0).all()
                and (first[n]["worst_change"][0] == 0).all())
    other = simulate.simulate(simulate.SimConfig(**{**SMALL.__dict__, "seed": 1}))
    assert not torch.equal(other[4]["correct_mass"], first[4]["correct_mass"])
    parallel = simulate.simulate(SMALL, workers=2)  # same numbers whatever the number of processes
    assert all(torch.equal(parallel[n][k], first[n][k]) for n in SMALL.ns for k in first[n])



# every N draws 4,000 tokens: N=4 in 1,000 steps, N=200 in 20, SGD at 5 per draw (lr 5·N)
EQUAL_SAMPLES = simulate.SimConfig(vocab=3000, n_correct=200, optimizer="sgd", lr=5.0,
                                   lr_scaling="linear", samples=4000, ns=[4, 200], seeds=8)


def test_at_equal_samples_sgd_with_lr_proportional_to_n_gains_the_same_correct_mass_at_every_n():
    results = simulate.simulate(EQUAL_SAMPLES)
    start = results[4]["correct_mass"][0, 0]
    gains = []
    for n in EQUAL_SAMPLES.ns:
        assert results[n]["correct_mass"].shape == (4000 // n + 1, EQUAL_SAMPLES.seeds)
        # the expected step per draw is the same at every N but for the batch-mean baseline, which
        # shrinks it by (1 - 1/N): a draw's reward is centred on a mean that includes itself
        gain = (results[n]["correct_mass"][-1] - start) / (1 - 1 / n)
        gains.append((float(gain.mean()), float(gain.std()) / EQUAL_SAMPLES.seeds**0.5))
    (gain_4, se_4), (gain_200, se_200) = gains
    assert gain_4 > 0 and abs(gain_4 - gain_200) <= 4 * (se_4**2 + se_200**2) ** 0.5


def test_simulator_cli_writes_figure_curves_and_summary(tmp_path):
    simulate.main(["--out", str(tmp_path), "--vocab", "3000", "--n-correct", "200", "--steps", "20",
                   "--ns", "4", "2000", "--seeds", "2", "--workers", "1"])
    assert (tmp_path / "fig3.png").stat().st_size > 10_000
    with open(tmp_path / "curves.csv") as f:
        rows = list(csv.DictReader(f))
    assert set(rows[0]) == {"n", "step", "metric", "mean", "std", "min", "max"}
    assert len(rows) == 2 * 21 * 3
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary) == {"4", "2000"}
    for values in summary.values():
        assert set(values) == {"correct_mass", "frac_increased", "worst_change", "shrink_seed_frac"}
        assert 0 <= values["shrink_seed_frac"] <= 1


def test_a_simulation_with_other_settings_is_refused_where_one_is_written(tmp_path, capsys):
    argv = ["--out", str(tmp_path), "--vocab", "300", "--n-correct", "20", "--steps", "3",
            "--ns", "4", "--seeds", "1", "--workers", "1"]
    simulate.main(argv)
    written = {f.name: f.read_bytes() for f in tmp_path.iterdir()}
    with pytest.raises(SystemExit) as exit:
        simulate.main(argv + ["--lr", "0.5"])
    assert exit.value.code == 2 and (f"error: --out {tmp_path} holds a simulation with other "
                                     "settings" in capsys.readouterr().err)
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir()} == written
    simulate.main(argv + ["--workers", "2"])  # the same simulation again: written over
    assert (tmp_path / "summary.json").read_bytes() == written["summary.json"]


def test_a_simulation_started_while_another_runs_into_its_out_is_refused(tmp_path, monkeypatch,
                                                                         capsys):
    argv = ["--out", str(tmp_path), "--vocab", "300", "--n-correct", "20", "--steps", "3",
            "--ns", "4", "--seeds", "1", "--workers", "1"]
    run_first = simulate.simulate

    def another_starts_meanwhile(cfg, workers):
        with pytest.raises(SystemExit) as exit:
            simulate.main(argv + ["--lr", "0.5"])
        assert exit.value.code == 2 and "holds a simulation with other settings" in (
            capsys.readouterr().err)
        return run_first(cfg, workers)

    monkeypatch.setattr(simulate, "simulate", another_starts_meanwhile)
    simulate.main(argv)
    assert json.loads((tmp_path / "config.json").read_text())["lr"] == simulate.SimConfig().lr
    # a config.json nested past the parser's depth is settings of its own, not a traceback
    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SystemExit) as exit:
        simulate.main(argv)
    assert exit.value.code == 2 and "holds a simulation with other settings" in (
        capsys.readouterr().err)


def test_a_simulation_that_diverges_stops_in_one_line_and_leaves_its_out_free(tmp_path):
    argv = ["--out", str(tmp_path), "--vocab", "300", "--n-correct", "20", "--steps", "100",
            "--ns", "4", "--seeds", "2", "--workers", "2"]
    # AdamW's decay multiplies the logits by 1 - lr * 0.01 = -9 a step
    with pytest.raises(SystemExit) as exit:
        simulate.main(argv + ["--lr", "1000"])
    assert re.fullmatch(r"error: N=4: the logits left the float range at step \d+: a lower --lr\?",
                        exit.value.code)
    assert list(tmp_path.iterdir()) == []
    simulate.main(argv + ["--lr", "0.1"])
    assert (tmp_path / "summary.json").is_file()


def test_equal_samples_cli_runs_every_n_for_the_same_draws(tmp_path):
    simulate.main(["--out", str(tmp_path), "--vocab", "3000", "--n-correct", "200",
                   "--equal-samples", "400", "--ns", "4", "40", "--optimizer", "sgd", "--lr", "5",
                   "--lr-scaling", "linear", "--seeds", "2", "--workers", "1"])
    assert (tmp_path / "fig3.png").stat().st_size > 10_000
    with open(tmp_path / "curves.csv") as f:
        last_step = {}
        for row in csv.DictReader(f):
            last_step[row["n"]] = max(last_step.get(row["n"], 0), int(row["step"]))
    assert last_step == {"4": 100, "40": 10}
    assert json.loads((tmp_path / "config.json").read_text())["samples"] == 400


def test_check_theorem_command_passes_and_bad_options_are_one_line_errors():
    result = run_script("simulate.py", "--check-theorem", "--instances", "200")
    assert "PASS" in result.stdout and "worst relative error" in result.stdout
    bad = run_script("simulate.py", "--n-correct", "0", check=False)
    assert bad.returncode == 2 and "--n-correct must be in [1, vocab - 1]" in bad.stderr
    bad = run_script("simulate.py", "--weight-decay", "-0.01", check=False)
    assert (bad.returncode == 2 and "--weight-decay must be >= 0" in bad.stderr
            and "Traceback" not in bad.stderr)
    bad = run_script("simulate.py", "--equal-samples", "1000", "--ns", "16", "512", check=False)
    assert (bad.returncode == 2 and "Traceback" not in bad.stderr
            and "--equal-samples must be 0 or a positive multiple of every N" in bad.stderr)


def test_n_of_zero_a_number_that_is_not_finite_and_an_out_that_is_a_file_are_one_line_errors(
        tmp_path, capsys):
    (tmp_path / "file").write_text("")
    for argv, message in [(["--ns", "0", "4"], "every N in --ns must be >= 1"),
                          (["--correct-logit", "nan"], "every number must be finite in float32"),
                          (["--correct-logit", "1e300"], "every number must be finite in float32"),
                          (["--temperature", "1e-300"], "--temperature must be >= 0.01"),
                          (["--seed", "-1"], "--seed must be in [0, 2^32)"),
                          (["--vocab", str(10**13)], "these sizes (--vocab, --seeds, --ns, steps) "
                                                     "need about "),
                          (["--steps", str(10**15)], "these sizes"),
                          (["--out", str(tmp_path / "file")], f"--out {tmp_path / 'file'}: ")]:
        with pytest.raises(SystemExit) as exit:
            simulate.main(argv)
        assert exit.value.code == 2 and f"error: {message}" in capsys.readouterr().err


def test_check_estimators_command_passes_with_a_row_per_estimator():
    result = run_script("simulate.py", "--check-estimators", "--instances", "300")
    assert "PASS" in result.stdout
    rows = {line.split("|")[0].strip() for line in result.stdout.splitlines() if "|" in line}
    assert set(simulate.ESTIMATOR_ROWS) <= rows


def test_outputs_that_cannot_be_written_are_one_line(tmp_path, monkeypatch):
    def full_disk(results, cfg, out):
        raise OSError(errno.ENOSPC, "No space left on device", str(out / "curves.csv"))

    monkeypatch.setattr(simulate, "write_outputs", full_disk)
    with pytest.raises(SystemExit) as exit:
        simulate.main(["--out", str(tmp_path), "--vocab", "300", "--n-correct", "20", "--steps",
                       "2", "--ns", "4", "--seeds", "1", "--workers", "1"])
    assert exit.value.code == f"error: writing {tmp_path / 'curves.csv'}: No space left on device"
