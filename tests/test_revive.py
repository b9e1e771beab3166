"""experiments/revive.py and revive_report.py: the experiment's accounting and outputs (the
pipeline, not the science)."""

import dataclasses
import json
import math
import sys

import pytest

from conftest import ROOT, run_script

sys.path.insert(0, str(ROOT / "experiments"))
import revive  # noqa: E402
import revive_report  # noqa: E402
from tasks import InputError  # noqa: E402

BRANCH_KEYS = {"n_rollouts", "compute", "eval_pass1", "final_eval_pass1", "pass_rate",
               "probe_improved_frac",
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


def test_quick_runs_the_whole_pipeline_writes_the_schema_and_resume_keeps_finished_runs(
        tmp_path):
    import tiny_model

    # the cached default model: fast to get
    out, model = tmp_path / "revive", str(tiny_model.ensure_tiny_model())
    run_script("experiments/revive.py", "--quick", "--out", str(out), "--model", model)
    results = json.loads((out / "results.json").read_text())
    stage1 = results["stage1"]
    # stage 1 ran, then a probe at a third of its lr decided whether it was saturated
    assert stage1["checkpoint"] and stage1["probe"]["lr"] == pytest.approx(stage1["lr"] / 3)
    assert set(results["starts"]) == {"plateau", "start"}
    for start in results["starts"].values():
        branches = start["branches"]
        assert set(branches) == {"N4@lr1", "N4@lr3", "knapsack4+history@lr1",
                                 "knapsack4+history@lr3"}
        assert start["frontier"][-1]["compute"] == 128  # equal samples for every branch
        for branch in branches.values():
            assert (BRANCH_KEYS <= set(branch)
                    and set(branch["final_eval_pass1"]["per_seed"]) == {"0", "1"})
            assert branch["compute"][-1] == 128
            assert len(branch["probe_improved_frac"]) == len(branch["eval_pass1"])
            assert all(s["origin"] == revive_report.run_origin(model)
                       for s in branch["seeds"].values())
    assert (out / "frontier.png").is_file() and (out / "revive_plateau_lr3.png").is_file()
    assert "## From the start" in (out / "results.md").read_text()
    refused = run_script("experiments/revive.py", "--quick", "--out", str(out), "--model", model,
                         check=False)
    assert refused.returncode != 0 and "pass --resume" in refused.stderr
    # a sitting that continues one seed from one start keeps the others in the results
    resumed = run_script("experiments/revive.py", "--quick", "--out", str(out), "--model", model,
                         "--resume", "--seeds", "1", "--starts", "plateau")
    assert resumed.stdout.count("finished earlier, kept") == 4
    assert json.loads((out / "results.json").read_text())["starts"] == results["starts"]
    # the start's branches alone need no stage 1
    start_only = tmp_path / "start-only"
    run_script("experiments/revive.py", "--quick", "--out", str(start_only), "--model", model,
               "--seeds", "0", "--starts", "start")
    results = json.loads((start_only / "results.json").read_text())
    assert results["stage1"] is None and not (start_only / "stage1").exists()
    assert set(results["starts"]) == {"start"} and len(results["starts"]["start"]["branches"]) == 4
    assert "Not run: only the start's branches" in (start_only / "results.md").read_text()
    refused = run_script("experiments/revive.py", "--quick", "--out", str(start_only), "--model",
                         model, "--seeds", "1", "--starts", "start", check=False)
    assert refused.returncode != 0 and "pass --resume" in refused.stderr
    # another sitting's results join in (its run folders may be gone): what it ran is not run
    # again, and a seed found in both comes from this sitting's runs
    merged = run_script("experiments/revive.py", "--quick", "--out", str(start_only), "--model",
                        model, "--seeds", "1", "--starts", "start", "--resume", "--merge",
                        str(out / "results.json"))
    assert merged.stdout.count("results.json, kept") == 4 and "took" not in merged.stdout
    (start_only / "results.json").unlink()
    run_script("experiments/revive.py", "--quick", "--out", str(start_only), "--model", model,
               "--report-only", "--merge", str(out / "results.json"))
    joined = json.loads((start_only / "results.json").read_text())
    earlier = json.loads((out / "results.json").read_text())
    assert joined["stage1"] == earlier["stage1"] and joined["plan"]["seeds"] == [0, 1]
    assert joined["starts"]["plateau"] == earlier["starts"]["plateau"]
    for key, branch in joined["starts"]["start"]["branches"].items():
        assert branch["seeds"]["0"] == results["starts"]["start"]["branches"][key]["seeds"]["0"]
        assert branch["seeds"]["1"] == earlier["starts"]["start"]["branches"][key]["seeds"]["1"]
    # a report builds no model: the default one is only named
    cache = tmp_path / "empty-cache"
    reported = run_script("experiments/revive.py", "--quick", "--out", str(start_only),
                          "--report-only", env={"BRORL_CACHE": str(cache)})
    assert "building" not in reported.stdout and not cache.exists()
    assert json.loads((start_only / "results.json").read_text())["starts"]["start"]["branches"]


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
