"""experiments/coverage_experiment.py: the branches' shapes, coverage read at matched pass@1, and
one real --quick experiment in two sittings (the pipeline, not the science)."""

import json
import math
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "experiments"))
import coverage_experiment as experiment  # noqa: E402
from tasks import InputError  # noqa: E402


def test_every_branch_generates_the_same_samples_per_step_for_the_same_steps():
    shapes = {s["name"]: s for s in experiment.branch_shapes(experiment.Plan())}
    assert set(shapes) == {"prorl_N16", "brorl_N512", "focal_N16"}
    assert {s["samples_per_step"] for s in shapes.values()} == {16 * 64}
    assert {s["steps"] for s in shapes.values()} == {experiment.Plan.steps}
    assert all(s["n_rollouts"] * s["prompts_per_step"] == 16 * 64 for s in shapes.values())
    assert shapes["brorl_N512"]["prompts_per_step"] == 2
    # focal_grpo is the one change from ProRL: its weight on GRPO's advantages
    assert shapes["prorl_N16"]["advantage"] == shapes["brorl_N512"]["advantage"] == "grpo"
    assert shapes["focal_N16"]["advantage"] == "focal_grpo"
    assert {k: v for k, v in shapes["focal_N16"].items() if k not in ("name", "advantage")} == {
        k: v for k, v in shapes["prorl_N16"].items() if k not in ("name", "advantage")}
    with pytest.raises(InputError, match="must divide"):
        experiment.branch_shapes(experiment.Plan(prorl_prompts=20))


def test_a_metric_at_matched_pass1_is_read_where_the_run_first_reaches_it():
    pass1, distinct = [0.2, 0.5, 0.4, 0.8], [10.0, 7.0, 9.0, 3.0]
    assert experiment.at_pass1(pass1, distinct, 0.35) == pytest.approx(8.5)
    assert experiment.at_pass1(pass1, distinct, 0.5) == 7.0  # at an eval, no interpolation
    assert experiment.at_pass1(pass1, distinct, 0.6) == pytest.approx(7.0 - 4.0 / 4)
    assert experiment.at_pass1(pass1, distinct, 0.1) == 10.0  # the start is already above it
    assert math.isnan(experiment.at_pass1(pass1, distinct, 0.9))


def test_matched_levels_are_ones_every_run_of_every_branch_reaches():
    def branch(*curves):
        return {"seeds": {str(i): {"coverage": {"train": {"correct_mass": c}}}
                          for i, c in enumerate(curves)}}

    branches = {"fast": branch([0.2, 0.9], [0.2, 0.7]), "slow": branch([0.2, 0.3, 0.5])}
    assert experiment.matched_levels(branches, "train") == [0.3, 0.4, 0.5]
    assert experiment.matched_levels({"flat": branch([0.2, 0.1])}, "train") == []


# ---- one real experiment at --quick sizes, in two sittings ---------------------------------------


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """The --quick experiment from a model briefly warmed on the task (so rewards vary): a first
    sitting stopped after one step of every run, then --resume to the plan's two."""
    import tiny_model

    model = tiny_model.build(tmp_path_factory.mktemp("models") / "warmed",
                             tiny_model.TinySpec(warmup_steps=30), experiment.TRAIN_DATA)
    out = tmp_path_factory.mktemp("coverage") / "quick"
    flags = ["--quick", "--out", str(out), "--model", str(model)]
    experiment.main([*flags, "--steps", "1"])
    first = json.loads((out / "results.json").read_text())
    experiment.main([*flags, "--resume"])
    return {"out": out, "flags": flags, "first": first,
            "results": json.loads((out / "results.json").read_text())}


def test_quick_runs_every_branch_and_writes_coverage_against_pass1(quick):
    results, out = quick["results"], quick["out"]
    assert set(results["branches"]) == {"prorl_N4", "brorl_N16", "focal_N4"}
    for b in results["branches"].values():
        assert list(b["seeds"]) == ["0"] and b["samples"] == [0, 32, 64]
        assert list(b["format_gap"]["per_seed"]) == ["0"]
        for split in experiment.SPLITS:
            curves = b["coverage"][split]
            assert set(experiment.COLUMNS) <= set(curves) <= set(b["final"][split])
            assert all(len(values) == 3 for values in curves.values())
            # step 0 is the reference of the metrics against it
            assert curves["retained_mass"][0] == 1.0 and curves["worst_drop"][0] == 0.0
            assert 0 < curves["correct_mass"][0] <= curves["pass@16"][0] <= curves["pass@256"][0]
    # every branch starts from the same model on the same probe prompts
    starts = {b["coverage"]["held_out"]["correct_mass"][0] for b in results["branches"].values()}
    assert len(starts) == 1
    assert (out / "coverage.png").stat().st_size > 0
    table = (out / "results.md").read_text()
    assert "| prorl_N4 | mean | 64 |" in table and "| focal_N4 | 0 | 64 |" in table


def test_the_probe_and_the_eval_give_the_same_exact_pass1_on_the_same_prompts(quick):
    # --quick evaluates the first 4 held-out prompts and probes the same 4; the probe's log-probs
    # are per-token means times lengths, rescored in another batch: they may differ by the probe
    # set's noise floor per token, over at most max_new_tokens (8) tokens
    run = experiment.run_dir(quick["out"], experiment.branch_shapes(experiment.QUICK)[0], 0)
    rows = experiment.read_metrics(run)
    floor = next(r["probe_noise_floor"] for r in rows if "probe_noise_floor" in r)
    probe = [r["coverage_held_out_correct_mass"] for r in rows
             if "coverage_held_out_correct_mass" in r]
    evals = [r["eval_coverage_correct_mass"] for r in rows if "eval_coverage_correct_mass" in r]
    assert probe == pytest.approx(evals, rel=math.expm1(8 * floor) + 1e-12)


def test_a_second_sitting_needs_resume_and_resume_continues_killed_runs_and_keeps_finished_ones(
        quick, capsys):
    out = quick["out"]
    # the first sitting's runs stopped at step 1; resumed, each continued from its checkpoint,
    # logging every eval once
    assert all(b["samples"] == [0, 32] for b in quick["first"]["branches"].values())
    for shape in experiment.branch_shapes(experiment.QUICK):
        rows = experiment.read_metrics(experiment.run_dir(out, shape, 0))
        assert [r["step"] for r in rows if "eval_pass1" in r] == [0, 1, 2]
    with pytest.raises(SystemExit, match="pass --resume"):
        experiment.main(quick["flags"])
    experiment.main([*quick["flags"], "--resume"])
    assert capsys.readouterr().out.count("finished earlier, kept") == 3
    assert json.loads((out / "results.json").read_text())["branches"] == (
        quick["results"]["branches"])
