"""experiments/revive.py and revive_report.py: the experiment's accounting and outputs (the
pipeline, not the science)."""

import dataclasses
import json
import math
import shutil
import sys
from types import SimpleNamespace

import pytest

from conftest import ROOT, run_script

sys.path.insert(0, str(ROOT / "experiments"))
import revive  # noqa: E402
import revive_report  # noqa: E402
from tasks import InputError  # noqa: E402

BRANCH_KEYS = {"n_rollouts", "compute", "eval_pass1", "final_eval_pass1", "eval_pass_at_k",
               "final_eval_pass_at_k", "pass_rate", "probe_improved_frac",
               "probe_worst_drop", "samples_per_s", "tokens_per_s", "correct_frac_hist", "seeds"}


def test_every_branch_generates_the_same_samples_and_lr_follows_the_chosen_rule():
    plan = dataclasses.replace(revive.Plan(), lr_scaling="sqrt")
    shapes = {s["name"]: s for s in revive.branch_shapes(plan, lr=1e-4)}
    assert set(shapes) == {"N16", "N64", "N256", "N512", "knapsack16", "knapsack16+history"}
    budget = plan.budget_steps * plan.stage1_n * plan.stage1_prompts
    assert all(s["steps"] * s["samples_per_step"] == budget for s in shapes.values())
    # the paper's two shapes, and the allocation at ProRL's: N=16 on average over 512 prompts
    assert (shapes["N16"]["prompts_per_step"], shapes["N512"]["prompts_per_step"]) == (512, 128)
    assert shapes["knapsack16"]["prompts_per_step"] == 512 and shapes["knapsack16"]["allocation"]
    assert shapes["knapsack16+history"]["history"] and not shapes["knapsack16"]["history"]
    assert shapes["N512"]["steps"] == plan.budget_steps // 8  # 8x ProRL's samples per step
    assert shapes["N512"]["lr"] == pytest.approx(1e-4 * math.sqrt(8))
    assert shapes["N64"]["lr"] == shapes["knapsack16"]["lr"] == 1e-4
    # the default: every branch at the lr it is given
    assert all(s["lr"] == 1e-4 for s in revive.branch_shapes(revive.Plan(), lr=1e-4))


def test_plateau_is_read_from_the_trend_of_the_last_evals_not_from_one_noisy_eval():
    steps = [0, 10, 20, 30, 40, 50, 60, 70, 80]
    # a slow, noisy rise: its last eval is not its best
    first_stage1 = [0.022, 0.035, 0.044, 0.052, 0.062, 0.084, 0.081, 0.101, 0.099]
    # +3.5 points over 40 steps
    assert not revive.plateaued(steps, first_stage1, window=5, problems_x_samples=1024)
    # noise of about one standard error
    flat = [0.40, 0.55, 0.60, 0.61, 0.59, 0.62, 0.60, 0.61, 0.60]
    assert revive.plateaued(steps, flat, window=5, problems_x_samples=1024)
    # too few evals to tell
    assert not revive.plateaued(steps[:4], flat[:4], window=5, problems_x_samples=1024)
    # the window holds the early rise
    assert not revive.plateaued(steps, flat, window=9, problems_x_samples=1024)


def write_evals(run_dir, pass1_by_step: dict[int, float]) -> None:
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "eval_pass1": p}) + "\n" for step, p in pass1_by_step.items()))


def test_a_resumed_stage1_judges_a_probe_by_its_own_steps_only(tmp_path, monkeypatch):
    # stage 1 flat at 0.70; the probe at lr/3 flat over its 40 steps, then (had it gone on as
    # stage 1) higher: resumed, the decision must be the one its own 40 steps give
    write_evals(tmp_path / "stage1", {step: 0.70 for step in range(0, 160, 10)})
    write_evals(tmp_path / "stage1_lr0.0001",
                {step: 0.70 if step <= 40 else 0.80 for step in range(0, 120, 10)})
    monkeypatch.setattr(revive, "run", lambda argv: pytest.fail("nothing is left to train"))
    monkeypatch.setattr(revive, "latest_checkpoint", lambda run_dir, say: run_dir / "step_x")
    monkeypatch.setattr(revive, "pass1_by_level", lambda run_dir: {})
    found = revive.stage1(revive.Plan(), "model", tmp_path, seed=0)
    assert found["saturated"] and found["lr"] == 3e-4
    assert found["probe"]["lift"] == pytest.approx(0.0)
    assert found["probe"]["eval_steps"] == [0, 10, 20, 30, 40]
    assert found["stretches"][0]["probe"] == found["probe"]
    # a probe that ends between two evals would be judged on older ones: refused
    with pytest.raises(InputError, match="multiple of eval_every"):
        revive.stage1(dataclasses.replace(revive.Plan(), probe_steps=45), "model", tmp_path, 0)


def fake_seed(final: float) -> dict:
    return {"compute": [0, 100], "compute_tokens": [0, 700], "eval_pass1": [0.5, final],
            "probe_compute": [0, 100],
            "probe_improved_frac": [0.0, 0.6], "probe_dropped_frac": [0.0, 0.3],
            "probe_worst_drop": [0.0, -0.2],
            "pass_rate": 0.7, "n_per_prompt_max": 512, "samples_per_s": 50.0,
            "tokens_per_s": 350.0,
            "correct_frac_hist": {b: 1 / 6 for b in revive_report.HIST_BINS},
            "final_pass1_by_level": {"0": final, "3": final / 2}}


def test_branch_summary_has_the_result_schema_and_the_plot_is_written(tmp_path):
    shape = revive.branch_shape(revive.Plan(), 512, lr=1e-4)
    branch = revive_report.branch_summary(shape, {0: fake_seed(0.6), 1: fake_seed(0.8)})
    assert BRANCH_KEYS <= set(branch)
    assert branch["final_eval_pass1"] == {"mean": pytest.approx(0.7), "std": pytest.approx(0.1),
                                          "per_seed": {"0": 0.6, "1": 0.8}}
    assert branch["eval_pass1"] == pytest.approx([0.5, 0.7])
    assert branch["final_pass1_by_level"] == {"0": pytest.approx(0.7), "3": pytest.approx(0.35)}
    revive_report.plot({"branches": {"N512": branch}}, tmp_path / "revive.png")
    assert (tmp_path / "revive.png").read_bytes().startswith(b"\x89PNG")


def test_the_frontier_is_the_best_pass1_reached_within_each_compute():
    branches = {"N16@lr1": {"compute": [0, 10, 20], "eval_pass1": [0.5, 0.6, 0.62]},
                "N512@lr1": {"compute": [0, 16], "eval_pass1": [0.5, 0.7]}}
    assert revive_report.frontier(branches) == [
        {"compute": 0, "pass1": 0.5, "branch": "N512@lr1"},
        {"compute": 10, "pass1": 0.6, "branch": "N16@lr1"},
        {"compute": 16, "pass1": 0.7, "branch": "N512@lr1"},
        {"compute": 20, "pass1": 0.7, "branch": "N512@lr1"}]


def test_the_frontier_compares_branches_over_the_seeds_they_all_have():
    shape = revive.branch_shape(revive.Plan(), 16, lr=1e-4)
    three = revive_report.branch_summary(shape, {0: fake_seed(0.6), 1: fake_seed(0.8),
                                                 2: fake_seed(0.1)})
    two = revive_report.branch_summary(shape, {0: fake_seed(0.5), 1: fake_seed(0.6)})
    seeds, curves = revive_report.shared_seed_curves({"N16@lr1": three, "N64@lr1": two})
    # seed 2's low run leaves N16's mean over its own seeds (0.5) below N64's (0.55)
    assert seeds == ["0", "1"] and three["eval_pass1"][-1] == pytest.approx(0.5)
    assert curves["N16@lr1"]["eval_pass1"] == pytest.approx([0.5, 0.7])
    assert revive_report.frontier(curves)[-1] == {"compute": 100, "pass1": pytest.approx(0.7),
                                           "branch": "N16@lr1"}


def test_a_branchs_seeds_are_its_run_folders_and_nothing_else(tmp_path):
    shape = revive.branch_shape(revive.Plan(), 16, lr=1e-4)
    for seed in (0, 2):
        revive_report.branch_dir(tmp_path, "plateau", shape, seed).mkdir(parents=True)
    # a copy set aside, and another branch whose name starts the same way
    (tmp_path / "branches" / "plateau" / "N16_lr0.0001_seed0.bak").mkdir()
    (tmp_path / "branches" / "plateau" / "N160_lr0.0001_seed1").mkdir()
    assert revive_report.branch_seeds(tmp_path, "plateau", shape) == [0, 2]
    assert revive_report.branch_seeds(tmp_path, "start", shape) == []


def test_merged_results_give_their_seeds_only_to_the_same_branch_from_the_same_model(tmp_path):
    plan = revive.Plan()
    shape = revive.branch_shape(plan, 512, lr=plan.lr)
    earlier = {"model": "warmed", "stage1": None, "starts": {"start": {"branches": {
        "N512@lr1": revive_report.branch_summary(shape, {0: fake_seed(0.6), 1: fake_seed(0.8)})}}}}
    results = revive.folder_results(plan, tmp_path, "warmed", None, earlier)
    branch = results["starts"]["start"]["branches"]["N512@lr1"]
    assert branch["final_eval_pass1"]["per_seed"] == {"0": 0.6, "1": 0.8}
    assert results["plan"]["seeds"] == [0, 1] and list(results["starts"]["start"]["branches"]) == [
        "N512@lr1"]
    # the same name at another budget is another branch
    with pytest.raises(InputError, match="N512@lr1 from the start differs .* in steps"):
        revive.folder_results(dataclasses.replace(plan, budget_steps=320), tmp_path, "warmed",
                              None, earlier)
    # the frontier compares the branches over the seeds they all have
    earlier["starts"]["start"]["branches"]["N16@lr1"] = revive_report.branch_summary(
        revive.branch_shape(plan, 16, lr=plan.lr), {0: fake_seed(0.7)})
    found = revive.folder_results(plan, tmp_path, "warmed", None, earlier)["starts"]["start"]
    assert found["frontier_seeds"] == ["0"] and found["frontier"][-1]["branch"] == "N16@lr1"
    # and none when no seed is shared
    earlier["starts"]["start"]["branches"]["N16@lr1"] = revive_report.branch_summary(
        revive.branch_shape(plan, 16, lr=plan.lr), {2: fake_seed(0.7)})
    found = revive.folder_results(plan, tmp_path, "warmed", None, earlier)["starts"]["start"]
    assert found["frontier_seeds"] == [] and found["frontier"] == []


def test_a_merge_is_of_the_same_experiment_or_refused_in_one_line():
    plan = revive.Plan()
    earlier = {"plan": json.loads(json.dumps(dataclasses.asdict(plan))), "stage1": None,
               "starts": {}, "model": "/home/a/.cache/brorl/tiny-arith-4a3164a05a6c"}
    # seeds, starts and lrs are each sitting's own; the model's folder may be elsewhere
    revive_report.check_merge({**earlier, "plan": {**earlier["plan"], "seeds": [2]}},
                       plan, "/root/.cache/brorl/tiny-arith-4a3164a05a6c")
    with pytest.raises(InputError, match="started from .*, this one from"):
        revive_report.check_merge(earlier, plan, "/root/.cache/brorl/tiny-arith-000000000000")
    with pytest.raises(InputError, match="plan differs from this one in advantage"):
        revive_report.check_merge(earlier, dataclasses.replace(plan, advantage="grpo"),
                                  earlier["model"])
    for malformed in ([], {"plan": {}, "model": "m"}):
        with pytest.raises(InputError, match="not a results.json of this experiment"):
            revive_report.check_merge(malformed, plan, earlier["model"])


def test_the_report_tables_every_branch_at_every_lr_with_its_seeds_and_the_frontier():
    plan = revive.Plan()
    branches = {}
    for multiplier, finals in ((1.0, (0.6, 0.8)), (3.0, (0.65, 0.65))):
        for n in (16, 512):
            shape = revive.branch_shape(plan, n, lr=1e-4 * multiplier)
            # ProRL 5 points below BroRL
            seeds = {seed: fake_seed(final - (0.05 if n == 16 else 0))
                     for seed, final in enumerate(finals)}
            branches[f"N{n}@lr{multiplier:g}"] = {**revive_report.branch_summary(shape, seeds),
                                                  "lr_multiplier": multiplier}
    probe = {"lr": 1e-4, "eval_steps": [0, 40], "eval_pass1": [0.55, 0.56], "lift": 0.005,
             "noise": 0.011}
    stretch = {"lr": 3e-4, "eval_steps": [0, 10], "eval_pass1": [0.5, 0.6], "level": 0.55,
               "plateaued": True, "probe": probe}
    results = {"plan": dataclasses.asdict(plan),
               "stage1": {"stretches": [stretch], "probe": probe, "saturated": True},
               "starts": {"plateau": {"lr": 1e-4, "branches": branches,
                                      "frontier": revive_report.frontier(branches),
                                      "frontier_seeds": ["0", "1"]}}}
    table = revive_report.report(results)
    assert "| 0.0003 | 10 | 0.500 0.600 | 0.550 | yes | 0.560 | +0.005 (±0.011) |" in table
    assert "The branch point: saturated" in table
    assert ("| N512 | 128 × 20 | 0.70 | 0.700 ± 0.100 (0.600 / 0.800) | "
            "0.650 ± 0.000 (0.650 / 0.650) |") in table
    # fake compute of 100 samples: 100 / (16 x 512) stage-1 steps' worth
    assert "| N16 | 512 × 160 | 0.70 | 0.650 ± 0.100 (0.550 / 0.750) |" in table
    # each branch against ProRL's N seed by seed: the paired difference, not the two spreads
    assert "| N512 | +0.050 (s0 +0.050 / s1 +0.050) | +0.050 (s0 +0.050 / s1 +0.050) |" in table
    assert f"| {100 / 8192:g} | 0.700 | N512@lr1 |" in table
    assert "by seed: s0 unrecorded; s1 unrecorded" in table


def test_a_run_is_continued_only_from_the_weights_and_cpu_it_began_with(tmp_path):
    plan, run_dir = revive.Plan(), tmp_path / "N16_lr0.0003_seed2"
    run_dir.mkdir()
    began = {"model_sha256": "0123456789ab", "cpu_capability": "AVX2"}
    (run_dir / "origin.json").write_text(json.dumps(began))
    shape = revive.branch_shape(plan, 16, lr=3e-4)
    with pytest.raises(InputError, match="began from .*0123456789ab.*finish it where"):
        revive.run_branch(plan, str(tmp_path), None, run_dir, shape, seed=2)
    # the report names the seeds whose runs did not all begin alike
    mixed = {"N16@lr1": revive_report.branch_summary(shape,
                                                     {2: {**fake_seed(0.6), "origin": began}}),
             "N64@lr1": revive_report.branch_summary(shape, {2: fake_seed(0.6)})}
    assert revive_report.origins(mixed) == "s2 MIXED 0123456789ab on AVX2 / unrecorded"
    # nor does a seed go on elsewhere, whether its other runs are merged or in the experiment folder
    elsewhere = {**began, "cpu_capability": "AVX512"}
    earlier = {"starts": {"start": {"branches": mixed}}}
    revive_report.check_seed_origin(earlier, tmp_path, "start", 2, began)
    revive_report.check_seed_origin(earlier, tmp_path, "start", 1, elsewhere)
    with pytest.raises(InputError, match="seed 2's N16@lr1 in --merge from the start began"):
        revive_report.check_seed_origin(earlier, tmp_path, "start", 2, elsewhere)
    other_run = revive_report.branch_dir(tmp_path, "start", revive.branch_shape(plan, 64, 3e-4), 1)
    other_run.mkdir(parents=True)
    (other_run / "origin.json").write_text(json.dumps(began))
    with pytest.raises(InputError, match="seed 1's .*N64_lr0.0003_seed1 from the start"):
        revive_report.check_seed_origin(None, tmp_path, "start", 1, elsewhere)


# ---- the pipeline: one real --quick sitting at its smallest, its bookkeeping on fake runs --------

@pytest.fixture(scope="module")
def quick_sitting(tmp_path_factory):
    """One real sitting of the --quick pipeline at its smallest: stage 1 (with its probe), then
    seed 0 of both branch shapes at one lr from the plateau. Its folder, model, flags and
    results.json as first written."""
    import tiny_model

    # the cached default model: fast to get
    out, model = tmp_path_factory.mktemp("revive") / "quick", str(tiny_model.ensure_tiny_model())
    flags = ["--quick", "--out", str(out), "--model", model, "--seeds", "0", "--starts", "plateau",
             "--lr-multipliers", "3"]
    run_script("experiments/revive.py", *flags)
    return SimpleNamespace(out=out, model=model, flags=flags,
                           results=json.loads((out / "results.json").read_text()))


def test_quick_runs_stage1_then_the_branches_and_writes_the_schema(
        quick_sitting):
    results, out = quick_sitting.results, quick_sitting.out
    stage1 = results["stage1"]
    # stage 1 ran, then a probe at a third of its lr decided whether it was saturated
    assert stage1["checkpoint"] and stage1["probe"]["lr"] == pytest.approx(stage1["lr"] / 3)
    assert list(results["starts"]) == ["plateau"] and results["plan"]["seeds"] == [0]
    # its report says first that a --quick sitting's numbers are no result
    assert results["quick"] and (out / "results.md").read_text().startswith("**`--quick`: ")
    plateau = results["starts"]["plateau"]
    assert set(plateau["branches"]) == {"N4@lr3", "knapsack4+history@lr3"}
    assert plateau["frontier"][-1]["compute"] == 128  # equal samples for every branch
    for branch in plateau["branches"].values():
        assert BRANCH_KEYS <= set(branch) and set(branch["final_eval_pass1"]["per_seed"]) == {"0"}
        assert branch["lr"] == pytest.approx(3 * stage1["lr"]) and branch["compute"][-1] == 128
        assert len(branch["probe_improved_frac"]) == len(branch["eval_pass1"])
        assert branch["seeds"]["0"]["origin"] == revive_report.run_origin(quick_sitting.model)
        # the trainer's evals log pass@k up to their samples per problem (2 in --quick)
        assert list(branch["final_eval_pass_at_k"]) == ["1", "2"]
    for figure in ("frontier.png", "revive_plateau_lr3.png"):
        assert (out / figure).read_bytes().startswith(b"\x89PNG")
    assert "## From the plateau" in (out / "results.md").read_text()
    assert "| pass@1 | pass@2 | pass@2 − N4 | pass@1 − N4 |" in (out / "results.md").read_text()


def test_a_second_sitting_in_an_experiment_folder_needs_resume_and_the_same_plan(quick_sitting):
    with pytest.raises(SystemExit, match="already holds an experiment: pass --resume"):
        revive.main(quick_sitting.flags)
    # its finished runs would be reported under the other estimator, or the full plan's sizes
    kept = (quick_sitting.out / "results.json").read_text()
    for other, differs in [(["--advantage", "grpo"], "advantage"),
                           (["--budget-steps", "3"], "budget_steps")]:
        for sitting in ("--resume", "--report-only"):
            with pytest.raises(SystemExit, match=rf"results.json \(pass the flags it was run "
                                                 rf"with\): its plan differs from this one in "
                                                 rf"{differs}$"):
                revive.main([*quick_sitting.flags, sitting, *other])
    assert (quick_sitting.out / "results.json").read_text() == kept


def test_resume_keeps_stage1_and_the_finished_runs(quick_sitting, capsys):
    revive.main([*quick_sitting.flags, "--resume"])
    resumed = capsys.readouterr().out
    assert resumed.count("finished earlier, kept") == 2 and "took" not in resumed
    assert "[revive] stage 1 (ProRL" not in resumed  # stage 1 trains no further step
    results = json.loads((quick_sitting.out / "results.json").read_text())
    assert results["starts"] == quick_sitting.results["starts"]


FAKE_STAGE1 = {"lr": 1e-4, "checkpoint": "stage1/checkpoints/step_4", "saturated": True,
               "stretches": [{"lr": 3e-4, "eval_steps": [0, 2, 4], "eval_pass1": [0.1, 0.3, 0.3],
                              "level": 0.3, "plateaued": True,
                              "probe": {"lr": 1e-4, "eval_steps": [0, 2], "eval_pass1": [0.3, 0.4],
                                        "lift": 0.1, "noise": 0.05}}]}


def write_finished_branch_run(run_dir, shape: dict, pass1: float,
                              pass_at_k: dict[int, float] | None = None) -> None:
    """What train_brorl.py leaves in a finished branch run: metrics.jsonl (a training row per step,
    an eval with the probe set's scores every eval_every steps), eval.json and the final eval's
    samples. With `pass_at_k`, every eval after step 0 logs it as the trainer does (its
    `eval_pass@k`, pass@1 among them), step 0's evals pass@k 0.25 for each k."""
    def evals(pass1: float, at_k: dict[int, float]) -> dict:
        return {"eval_pass1": pass1, **{f"eval_pass@{k}": v for k, v in at_k.items()}}

    rows = [{"step": 0, **evals(0.25, {k: 0.25 for k in pass_at_k or {}}),
             "probe_improved_frac": 0.0, "probe_dropped_frac": 0.0, "probe_worst_drop": 0.0}]
    for step in range(1, shape["steps"] + 1):
        rows.append({"step": step, "reward_mean": 0.5, "response_len": 6.0, "pass_rate": 0.4,
                     "samples_per_s": 100.0, "gen_tokens_per_s": 600.0,
                     **{f"correct_frac/{b}": 1 / 6 for b in revive_report.HIST_BINS}})
        if step % shape["eval_every"] == 0:
            rows.append({"step": step, **evals(pass1, pass_at_k or {}),
                         "probe_improved_frac": 0.5, "probe_dropped_frac": 0.1,
                         "probe_worst_drop": -0.2})
    run_dir.mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (run_dir / "eval.json").write_text(json.dumps({"pass1": pass1}))
    samples = [{"header": {}}, {"id": 0, "reward": 1.0}, {"id": 1, "reward": 0.0}]
    (run_dir / "eval.samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))


def test_pass_at_k_is_summarised_per_branch_like_pass1_and_tabled_beside_it_against_prorl(
        tmp_path):
    plan = revive.Plan()
    # BroRL 2 points below ProRL at pass@1 in both seeds, 3 and 5 points above it at pass@16
    finals = {16: {0: {1: 0.80, 2: 0.85, 4: 0.88, 8: 0.90, 16: 0.90},
                   1: {1: 0.84, 2: 0.88, 4: 0.90, 8: 0.91, 16: 0.92}},
              512: {0: {1: 0.78, 2: 0.84, 4: 0.89, 8: 0.92, 16: 0.95},
                    1: {1: 0.82, 2: 0.87, 4: 0.91, 8: 0.94, 16: 0.95}}}
    branches = {}
    for n, by_seed in finals.items():
        shape, per_seed = revive.branch_shape(plan, n, lr=1e-4), {}
        for seed, at_k in by_seed.items():
            run_dir = revive_report.branch_dir(tmp_path, "plateau", shape, seed)
            write_finished_branch_run(run_dir, shape, at_k[1], pass_at_k=at_k)
            per_seed[seed] = revive_report.seed_summary(run_dir, shape)
        branches[f"N{n}@lr1"] = {**revive_report.branch_summary(shape, per_seed),
                                 "lr_multiplier": 1.0}
    broad = branches["N512@lr1"]
    # by k in increasing order, each the mean over seeds of the curve and of the final eval
    assert list(broad["final_eval_pass_at_k"]) == ["1", "2", "4", "8", "16"]
    assert broad["final_eval_pass_at_k"]["16"] == {"mean": pytest.approx(0.95),
                                                   "std": pytest.approx(0.0),
                                                   "per_seed": {"0": 0.95, "1": 0.95}}
    assert broad["eval_pass_at_k"]["8"][0] == 0.25
    assert broad["eval_pass_at_k"]["8"][-1] == pytest.approx(0.93)
    assert broad["final_eval_pass_at_k"]["1"] == broad["final_eval_pass1"]
    results = {"plan": dataclasses.asdict(plan), "stage1": None, "starts": {"plateau": {
        "lr": 1e-4, "branches": branches, "frontier": [], "frontier_seeds": ["0", "1"]}}}
    table = revive_report.report(results)
    assert ("| branch | lr | pass@1 | pass@2 | pass@4 | pass@8 | pass@16 | pass@16 − N16 | "
            "pass@1 − N16 |") in table
    assert "| N16 | 1η | 0.820 | 0.865 | 0.890 | 0.905 | 0.910 |  |  |" in table
    assert ("| N512 | 1η | 0.800 | 0.855 | 0.900 | 0.930 | 0.950 | +0.040 (s0 +0.050 / s1 +0.030) "
            "| -0.020 (s0 -0.020 / s1 -0.020) |") in table
    # a seed summarised before pass@k was (another sitting's results.json) leaves its branch none:
    # a mean over some seeds would not compare with the others' means
    old_seed = {key: value for key, value in per_seed[0].items() if key != "eval_pass_at_k"}
    mixed = revive_report.branch_summary(shape, {0: old_seed, 1: per_seed[1]})
    assert mixed["final_eval_pass_at_k"] == {} and mixed["eval_pass_at_k"] == {}
    results["starts"]["plateau"]["branches"] = {"N512@lr1": {**mixed, "lr_multiplier": 1.0}}
    assert ("pass@k: not in these results (their runs' summaries hold pass@1 only)."
            in revive_report.report(results))


@pytest.fixture
def fake_training(monkeypatch):
    """revive.py with stage 1 and the branch runs replaced by fake finished ones, and the figures by
    empty files (revive.png's drawing has its own test): the pipeline's bookkeeping in a second.
    `runs` lists the branch runs made, (start, branch, seed) each; they reach pass@1 `pass1`."""
    fake = SimpleNamespace(runs=[], pass1=0.5)

    def stage1(plan, model, out, seed):
        (out / "stage1").mkdir(parents=True, exist_ok=True)
        return FAKE_STAGE1

    def run_branch(plan, model, checkpoint, run_dir, shape, seed):
        assert checkpoint == (FAKE_STAGE1["checkpoint"] if "plateau" in run_dir.parts else None)
        fake.runs.append((run_dir.parent.name, shape["name"], seed))
        write_finished_branch_run(run_dir, shape, fake.pass1)

    monkeypatch.setattr(revive, "stage1", stage1)
    monkeypatch.setattr(revive, "run_branch", run_branch)
    for plot in ("plot", "plot_frontier"):
        monkeypatch.setattr(revive_report, plot, lambda results, path: path.write_bytes(b""))
    return fake


def quick(out, *flags: str) -> dict:
    """One sitting of `revive.py --quick` in this process; its results.json."""
    revive.main(["--quick", "--out", str(out), "--model", "warmed", *flags])
    return json.loads((out / "results.json").read_text())


def test_a_sitting_runs_one_seed_of_every_branch_first_and_reports_each_start_and_lr(
        tmp_path, fake_training):
    results = quick(tmp_path)
    # seed by seed; within a seed, start by start, lr by lr
    assert [seed for *_, seed in fake_training.runs] == [0] * 8 + [1] * 8
    assert fake_training.runs[:4] == [("plateau", "N4", 0), ("plateau", "knapsack4+history", 0)] * 2
    assert list(results["starts"]) == ["plateau", "start"] and results["plan"]["seeds"] == [0, 1]
    for start in results["starts"].values():
        assert list(start["branches"]) == ["N4@lr1", "knapsack4+history@lr1", "N4@lr3",
                                           "knapsack4+history@lr3"]
        assert start["frontier_seeds"] == ["0", "1"] and start["frontier"][-1]["compute"] == 128
        for branch in start["branches"].values():
            assert BRANCH_KEYS <= set(branch) and list(branch["seeds"]) == ["0", "1"]
    assert results["starts"]["plateau"]["lr"] == FAKE_STAGE1["lr"]
    assert results["starts"]["start"]["lr"] == revive.QUICK.lr
    assert {path.name for path in tmp_path.glob("*.png")} == {
        "frontier.png", "revive_plateau_lr1.png", "revive_plateau_lr3.png", "revive_start_lr1.png",
        "revive_start_lr3.png"}
    assert "## From the start" in (tmp_path / "results.md").read_text()


def test_a_sitting_for_one_seed_and_start_keeps_every_other_finished_run_in_the_results(
        tmp_path, fake_training, capsys):
    results = quick(tmp_path)
    made = len(fake_training.runs)
    again = quick(tmp_path, "--resume", "--seeds", "1", "--starts", "plateau")
    assert capsys.readouterr().out.count("finished earlier, kept") == 4
    assert len(fake_training.runs) == made and again["starts"] == results["starts"]


def test_the_starts_branches_alone_need_no_stage1(tmp_path, fake_training):
    results = quick(tmp_path, "--seeds", "0", "--starts", "start")
    assert results["stage1"] is None and not (tmp_path / "stage1").exists()
    assert list(results["starts"]) == ["start"] and len(results["starts"]["start"]["branches"]) == 4
    assert "Not run: only the start's branches" in (tmp_path / "results.md").read_text()
    with pytest.raises(SystemExit, match="already holds an experiment: pass --resume"):
        quick(tmp_path, "--seeds", "1", "--starts", "start")


def test_merged_results_are_not_run_again_and_a_report_joins_them_with_this_sittings_runs(
        tmp_path, fake_training, capsys):
    earlier_dir, here = tmp_path / "earlier", tmp_path / "here"
    fake_training.pass1 = 0.6
    earlier = quick(earlier_dir)
    merge = ["--merge", str(earlier_dir / "results.json")]
    fake_training.pass1 = 0.8
    ours = quick(here, "--seeds", "0", "--starts", "start")
    made = len(fake_training.runs)
    # another sitting's results join in (its run folders may be gone): what it ran is not run again
    quick(here, "--seeds", "1", "--starts", "start", "--resume", *merge)
    assert capsys.readouterr().out.count("results.json, kept") == 4
    assert len(fake_training.runs) == made
    # a seed found in both comes from this sitting's runs
    (here / "results.json").unlink()
    joined = quick(here, "--report-only", *merge)
    assert joined["stage1"] == earlier["stage1"] and joined["plan"]["seeds"] == [0, 1]
    assert joined["starts"]["plateau"] == earlier["starts"]["plateau"]
    for key, branch in joined["starts"]["start"]["branches"].items():
        assert branch["seeds"]["0"] == ours["starts"]["start"]["branches"][key]["seeds"]["0"]
        assert branch["seeds"]["1"] == earlier["starts"]["start"]["branches"][key]["seeds"]["1"]
        assert branch["final_eval_pass1"]["per_seed"] == {"0": 0.8, "1": 0.6}
    # the other sitting's folder gone, a report without --merge keeps the seeds it brought
    shutil.rmtree(earlier_dir)
    again = quick(here, "--report-only")
    assert again["starts"] == joined["starts"] and again["plan"]["seeds"] == [0, 1]


def test_a_report_builds_no_model_it_only_names_the_default_one(tmp_path, fake_training,
                                                                monkeypatch):
    # a sitting from the default model (named here, not built), then its report
    monkeypatch.setattr(revive, "ensure_tiny_model", revive.tiny_model_path)
    revive.main(["--quick", "--out", str(tmp_path), "--seeds", "0", "--starts", "start",
                 "--lr-multipliers", "1"])
    monkeypatch.setattr(revive, "ensure_tiny_model", lambda **spec: pytest.fail("built a model"))
    revive.main(["--quick", "--out", str(tmp_path), "--report-only"])
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["model"] == str(revive.tiny_model_path(spec=revive.GRADED_WARMUP,
                                                          train_data=revive.TRAIN_DATA))
    assert len(results["starts"]["start"]["branches"]) == 2


def test_the_report_alone_draws_results_md_and_the_figures_from_a_results_json(
        tmp_path, fake_training):
    results = quick(tmp_path, "--seeds", "0", "--starts", "start", "--lr-multipliers", "1")
    (tmp_path / "results.md").unlink()
    run_script("experiments/revive_report.py", str(tmp_path))
    assert (tmp_path / "results.md").read_text() == revive_report.report(results)
    for figure in ("frontier.png", "revive_start_lr1.png"):
        assert (tmp_path / figure).read_bytes().startswith(b"\x89PNG")
    (tmp_path / "other.json").write_text(json.dumps({"plan": {}}))
    with pytest.raises(SystemExit) as refused:
        revive_report.main([str(tmp_path / "other.json")])
    assert str(refused.value) == (f"error: {tmp_path / 'other.json'} is not a results.json of "
                                  "this experiment (it needs plan, stage1 and starts)")


def write_fake_run(run_dir, n_rollouts: int, prompts_per_step: int) -> None:
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"n_rollouts": n_rollouts,
                                                     "prompts_per_step": prompts_per_step}))
    rows = [{"step": 0, "eval_pass1": 0.3}, {"step": 1, "reward_mean": 0.3, "pass_rate": 0.9},
            {"step": 2, "reward_mean": 0.4, "pass_rate": 0.8}, {"step": 2, "eval_pass1": 0.5}]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_plot_runs_draws_several_runs_against_samples_and_names_a_folder_that_is_not_a_run(
        tmp_path):
    write_fake_run(tmp_path / "n256", 256, 32)
    write_fake_run(tmp_path / "n16", 16, 512)
    out = tmp_path / "runs.png"
    run_script("experiments/plot_runs.py", str(tmp_path / "n256"), str(tmp_path / "n16"), "--out",
               str(out))
    assert out.read_bytes().startswith(b"\x89PNG")
    refused = run_script("experiments/plot_runs.py", str(tmp_path), "--out", str(out), check=False)
    assert refused.returncode == 1 and refused.stderr.strip().splitlines() == [
        f"error: {tmp_path} is not a train_brorl.py run folder: config.json is missing"]
