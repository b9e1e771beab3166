"""The revive experiment's results (experiments/revive.py runs the experiment and calls this): each
finished run's metrics.jsonl -> its seed's curves (pass@1, and pass@k where the evals logged it) ->
each branch's mean over seeds -> the compute frontier -> results.json, results.md and the figures,
rewritten in the experiment folder after every finished run. Also the folder's bookkeeping: where
each branch run lives, the origin each run recorded (the warmed model's weights and the CPU
kernels), and another sitting's results.json joined in with --merge.

    # results.md and the figures again from an experiment folder's results.json, e.g. after
    # changing this file
    python experiments/revive_report.py runs/revive
    python experiments/revive_report.py docs/broaden/results.json --out /tmp/revive-report

Results from the finished runs of an experiment folder need its plan (which branches, of which
shapes), which is the experiment's: `python experiments/revive.py --report-only --out DIR` (with
`--merge RESULTS` to join another sitting's) writes them without running anything.
"""

import argparse
import dataclasses
import hashlib
import json
import math
import re
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import monitor  # noqa: E402
from tasks import InputError, read_jsonl  # noqa: E402

# the graded task's held-out problems, every run's eval set; their levels split pass@1 by difficulty
TEST_DATA = ROOT / "data" / "graded_test.jsonl"
HIST_BINS = monitor.CORRECT_FRACTION_BINS  # the bins of monitor.correct_fraction_histogram
PASS_AT_K = re.compile(r"eval_pass@(\d+)")  # the in-training eval's pass@k keys (eval.py)


def mean(values: list[float]) -> float:
    """The arithmetic mean (nan for no values: a run with no training rows)."""
    return sum(values) / len(values) if values else float("nan")


# ---- the experiment folder: OUT/stage1*, OUT/branches/START/NAME_lrLR_seedSEED -------------------

def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [row for _, row in read_jsonl(path)] if path.is_file() else []


def pass1_by_level(run_dir: Path) -> dict[str, float]:
    """The run's final eval, pass@1 per difficulty level of the graded task (from its audit file):
    where the gains and losses are, easy levels the policy has saturated or hard ones it solves
    rarely."""
    levels = [task["level"] for _, task in read_jsonl(TEST_DATA)]
    rewards: dict[str, list[float]] = {}
    for _, row in read_jsonl(run_dir / "eval.samples.jsonl"):
        if "header" not in row:
            rewards.setdefault(str(levels[int(row["id"])]), []).append(row["reward"])
    return {level: mean(values) for level, values in sorted(rewards.items())}


def branch_key(name: str, multiplier: float) -> str:
    """A branch's key in results.json: its name and its lr multiplier."""
    return f"{name}@lr{multiplier:g}"


def branch_dir(out: Path, start: str, shape: dict, seed: int) -> Path:
    return out / "branches" / start / f"{seed_prefix(shape)}{seed}"


def seed_prefix(shape: dict) -> str:
    """A branch's run folder name, but for its seed."""
    return f"{shape['name']}_lr{shape['lr']:.3g}_seed"


def branch_seeds(out: Path, start: str, shape: dict) -> list[int]:
    """The seeds with a run folder of this branch in `out` (other names there are ignored)."""
    prefix = seed_prefix(shape)
    found = (re.fullmatch(re.escape(prefix) + r"(\d+)", run_dir.name)
             for run_dir in (out / "branches" / start).glob(prefix + "*"))
    return sorted(int(match[1]) for match in found if match)


def branch_finished(run_dir: Path, steps: int) -> bool:
    evals = [r["step"] for r in read_metrics(run_dir) if "eval_pass1" in r]
    return (run_dir / "eval.json").is_file() and bool(evals) and evals[-1] == steps


# ---- origins: a seed's branches are compared with each other, so they must begin alike -----------

def read_origin(run_dir: Path) -> dict | None:
    """The origin a run recorded when it began (None: not recorded)."""
    path = run_dir / "origin.json"
    return json.loads(path.read_text()) if path.is_file() else None


def run_origin(model: str) -> dict:
    """What a run depends on beyond its seed and flags: the warmed model's weights (the tiny model
    is built on each machine, and its floating point differs between CPUs) and the CPU kernels."""
    weights = Path(model) / "model.safetensors"
    return {"model_sha256": (hashlib.sha256(weights.read_bytes()).hexdigest()[:12]
                             if weights.is_file() else None),
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def check_seed_origin(earlier: dict | None, out: Path, start: str, seed: int,
                      origin: dict) -> None:
    """No branch runs where the seed's other runs, merged or in `out`, began from other weights or
    CPU kernels."""
    branches = (earlier or {}).get("starts", {}).get(start, {}).get("branches", {})
    found = {f"{key} in --merge": b["seeds"].get(str(seed), {}).get("origin")
             for key, b in branches.items()}
    found.update({str(run_dir): read_origin(run_dir)
                  for run_dir in (out / "branches" / start).glob(f"*_seed{seed}")})
    for where, theirs in found.items():
        if theirs is not None and theirs != origin:
            raise InputError(f"seed {seed}'s {where} from the {start} began from "
                             f"{json.dumps(theirs)}, this machine has {json.dumps(origin)}: run "
                             "its other branches where it ran, or another seed")


def origins(branches: dict) -> str:
    """Each seed's run origins over the branches; a seed's paired differences are like for like
    only where all its runs share one."""
    found: dict[str, set] = {}
    for b in branches.values():
        for seed, summary in b["seeds"].items():
            origin = summary.get("origin")
            found.setdefault(seed, set()).add(
                "unrecorded" if origin is None else
                f"{origin['model_sha256']} on {origin['cpu_capability']}")
    return "; ".join(f"s{seed} " + (" / ".join(sorted(kinds)) if len(kinds) == 1 else
                                   "MIXED " + " / ".join(sorted(kinds)))
                     for seed, kinds in sorted(found.items()))


# ---- --merge: another sitting's results.json, its run folders possibly gone ----------------------

def check_merge(earlier: object, plan, model: str, source: str = "--merge") -> None:
    """Another sitting's results (`source`: --merge, or the results.json of the experiment resumed)
    join this one's (`plan`, the experiment's Plan) only if they are of the same experiment: the
    same warmed model (by its cache name: the spec and data it was built from) and the same plan
    but for what a sitting chooses to run (seeds, starts, lr multipliers)."""
    if (not isinstance(earlier, dict) or not {"plan", "model", "stage1", "starts"} <= set(earlier)
            or not isinstance(earlier["plan"], dict) or not isinstance(earlier["model"], str)):
        raise InputError(f"{source}: not a results.json of this experiment (it needs plan, model, "
                         "stage1 and starts)")
    if Path(earlier["model"]).name != Path(model).name:
        raise InputError(f"{source}: its runs started from {earlier['model']}, this one from "
                         f"{model}")
    ours = json.loads(json.dumps(dataclasses.asdict(plan)))
    differs = sorted(field for field, value in ours.items()
                     if field not in ("seeds", "starts", "lr_multipliers")
                     and earlier["plan"].get(field) != value)
    if differs:
        raise InputError(f"{source}: its plan differs from this one in {', '.join(differs)}")


def merged_seeds(earlier: dict | None, start: str, key: str, shape: dict) -> dict[int, dict]:
    """One branch's per-seed summaries in an earlier sitting's results.json (its run folders may
    be gone), checked to be the same branch."""
    branch = (earlier or {}).get("starts", {}).get(start, {}).get("branches", {}).get(key)
    if branch is None:
        return {}
    differs = [field for field in ("n_rollouts", "prompts_per_step", "steps", "lr", "allocation",
                                   "history") if not math.isclose(branch[field], shape[field])]
    if differs:
        raise InputError(f"--merge: its {key} from the {start} differs from this plan's in "
                         f"{', '.join(differs)}")
    return {int(seed): summary for seed, summary in branch["seeds"].items()}


# ---- summaries: a run's curves, a branch's mean over seeds, the frontier -------------------------

def pass_at_k_curves(evals: list[dict]) -> dict[str, list[float]]:
    """Each k's pass@k over a run's evals, for every k all of them logged (the in-training eval's
    `eval_pass@k`: eval.py's unbiased estimator at powers of two up to the samples per problem);
    by k in increasing order."""
    logged = [{m[1] for key in row if (m := PASS_AT_K.fullmatch(key))} for row in evals]
    ks = sorted(set.intersection(*logged) if logged else (), key=int)
    return {k: [row[f"eval_pass@{k}"] for row in evals] for k in ks}


def seed_summary(run_dir: Path, shape: dict) -> dict:
    """One branch run's curves from its metrics.jsonl: x = samples generated since the branch
    point."""
    rows = read_metrics(run_dir)
    train_rows = [r for r in rows if "reward_mean" in r]
    tokens, tokens_by_step = 0.0, {0: 0.0}
    for r in train_rows:
        tokens += r["response_len"] * shape["samples_per_step"]
        tokens_by_step[r["step"]] = tokens
    evals = [r for r in rows if "eval_pass1" in r]
    probes = [r for r in rows if "probe_improved_frac" in r]
    return {
        "origin": read_origin(run_dir),
        "compute": [r["step"] * shape["samples_per_step"] for r in evals],
        "compute_tokens": [tokens_by_step.get(r["step"], float("nan")) for r in evals],
        "eval_pass1": [r["eval_pass1"] for r in evals],
        "eval_pass_at_k": pass_at_k_curves(evals),
        "probe_compute": [r["step"] * shape["samples_per_step"] for r in probes],
        "probe_improved_frac": [r["probe_improved_frac"] for r in probes],
        "probe_dropped_frac": [r["probe_dropped_frac"] for r in probes],
        "probe_worst_drop": [r["probe_worst_drop"] for r in probes],
        "pass_rate": mean([r["pass_rate"] for r in train_rows]),
        "n_per_prompt_max": mean([r.get("n_per_prompt/max", shape["n_rollouts"])
                                  for r in train_rows]),
        "samples_per_s": mean([r["samples_per_s"] for r in train_rows]),
        "tokens_per_s": mean([r["gen_tokens_per_s"] for r in train_rows]),
        "correct_frac_hist": {b: mean([r[f"correct_frac/{b}"] for r in train_rows])
                              for b in HIST_BINS}, "final_pass1_by_level": pass1_by_level(run_dir),
    }


def mean_of_curves(curves: list[list[float]]) -> list[float]:
    """Point by point over the curves, as far as the shortest goes (none: empty)."""
    return [mean([c[i] for c in curves]) for i in range(min(map(len, curves), default=0))]


def seed_spread(per_seed: dict[str, float]) -> dict:
    """Seed mean, population std (÷ seeds) and every seed's value."""
    seed_mean = mean(list(per_seed.values()))
    return {"mean": seed_mean, "per_seed": per_seed,
            "std": math.sqrt(sum((v - seed_mean) ** 2 for v in per_seed.values()) / len(per_seed))}


def branch_summary(shape: dict, per_seed: dict[int, dict]) -> dict:
    """Mean over seeds, with every seed's values kept (the spread is the point of several seeds).
    pass@k for the k every seed has (a merged summary may predate pass@k: then none)."""
    seeds = list(per_seed.values())
    ks = sorted(set.intersection(*(set(s.get("eval_pass_at_k", {})) for s in seeds)), key=int)
    return {
        **shape,
        "compute": seeds[0]["compute"],
        "eval_pass1": mean_of_curves([s["eval_pass1"] for s in seeds]),
        "final_eval_pass1": seed_spread({str(seed): s["eval_pass1"][-1]
                                         for seed, s in per_seed.items()}),
        "eval_pass_at_k": {k: mean_of_curves([s["eval_pass_at_k"][k] for s in seeds])
                           for k in ks},
        "final_eval_pass_at_k": {k: seed_spread({str(seed): s["eval_pass_at_k"][k][-1]
                                                 for seed, s in per_seed.items()}) for k in ks},
        "pass_rate": mean([s["pass_rate"] for s in seeds]),
        "n_per_prompt_max": mean([s["n_per_prompt_max"] for s in seeds]),
        "probe_compute": seeds[0]["probe_compute"],
        "probe_improved_frac": mean_of_curves([s["probe_improved_frac"] for s in seeds]),
        "probe_worst_drop": mean_of_curves([s["probe_worst_drop"] for s in seeds]),
        "samples_per_s": mean([s["samples_per_s"] for s in seeds]),
        "tokens_per_s": mean([s["tokens_per_s"] for s in seeds]),
        "correct_frac_hist": {k: mean([s["correct_frac_hist"][k] for s in seeds])
                              for k in seeds[0]["correct_frac_hist"]},
        "final_pass1_by_level": {k: mean([s["final_pass1_by_level"][k] for s in seeds])
                                 for k in seeds[0]["final_pass1_by_level"]},
        "seeds": {str(seed): s for seed, s in per_seed.items()},
    }


def shared_seed_curves(branches: dict) -> tuple[list[str], dict]:
    """The seeds every branch has, and each branch's pass@1 curve averaged over them: branches
    compared over different seeds would differ by their seeds."""
    seeds = sorted(set.intersection(*(set(b["seeds"]) for b in branches.values()))
                   if branches else (), key=int)
    return seeds, {key: {"compute": b["compute"], "eval_pass1": mean_of_curves(
        [b["seeds"][seed]["eval_pass1"] for seed in seeds])} for key, b in branches.items()}


def frontier(branches: dict) -> list[dict]:
    """The compute frontier: at each eval's sample count, the best seed-mean pass@1 any branch (at
    any lr) reached with at most that many samples, and which one."""
    points = sorted({c for b in branches.values() for c in b["compute"]})
    best = []
    for c in points:
        reached = [(max(p for x, p in zip(b["compute"], b["eval_pass1"]) if x <= c), key)
                   for key, b in branches.items() if b["eval_pass1"]]
        if not reached:  # no seed shared by every branch: no curve to compare
            return []
        pass1, key = max(reached)
        best.append({"compute": c, "pass1": pass1, "branch": key})
    return best


def summarise(plan, branches: list[dict], out: Path, model: str, stage1_result: dict | None,
              earlier: dict | None = None) -> dict:
    """results.json from every finished run in `out` of `branches` (each with its start, the
    start's lr, lr_multiplier and shape, in results.json's order), whichever invocation ran it, and
    the seeds of `earlier` (another sitting's results.json, --merge, checked by `check_merge`) that
    `out` does not hold. Its `plan` is this invocation's (the experiment's Plan) but for the seeds,
    which are those found."""
    results = {"plan": dataclasses.asdict(plan), "model": model, "stage1": stage1_result,
               "starts": {}}
    for branch in branches:
        start, shape = branch["start"], branch["shape"]
        key = branch_key(shape["name"], branch["lr_multiplier"])
        per_seed = merged_seeds(earlier, start, key, shape)
        per_seed.update({seed: seed_summary(run_dir, shape)
                         for seed in branch_seeds(out, start, shape)
                         if branch_finished(run_dir := branch_dir(out, start, shape, seed),
                                            shape["steps"])})
        if per_seed:
            found = results["starts"].setdefault(start, {"lr": branch["start_lr"], "branches": {}})
            found["branches"][key] = {**branch_summary(shape, dict(sorted(per_seed.items()))),
                                      "lr_multiplier": branch["lr_multiplier"]}
    for found in results["starts"].values():
        seeds, curves = shared_seed_curves(found["branches"])
        found.update(frontier=frontier(curves), frontier_seeds=seeds)
    results["plan"]["seeds"] = sorted({int(seed) for start in results["starts"].values()
                                       for b in start["branches"].values() for seed in b["seeds"]})
    return results


# ---- results.md and the figures ------------------------------------------------------------------

def finals(branch: dict | None, k: str) -> dict[str, float]:
    """A branch's pass@k at the budget, seed by seed (k "1": pass@1; none: no such branch, or a
    summary without that k)."""
    if branch is None:
        return {}
    found = branch["final_eval_pass1"] if k == "1" else branch.get("final_eval_pass_at_k",
                                                                   {}).get(k)
    return found["per_seed"] if found else {}


def paired_difference(mine: dict[str, float], theirs: dict[str, float]) -> str:
    """A table cell: one branch's per-seed values minus another's, the mean over the seeds both
    have (each seed); empty where none is shared."""
    differences = {seed: value - theirs[seed] for seed, value in mine.items() if seed in theirs}
    return "" if not differences else (
        f"{mean(list(differences.values())):+.3f} ("
        + " / ".join(f"s{seed} {d:+.3f}" for seed, d in differences.items()) + ")")


def pass_at_k_table(branches: dict, names: list[str], multipliers: list[float],
                    reference: str) -> list[str]:
    """results.md's pass@k at the budget per branch and lr, and how far the largest k and pass@1
    each moved against `reference` (ProRL) seed by seed: does a branch gain coverage (pass@k at
    large k) that pass@1 does not show?"""
    ks = sorted({k for b in branches.values() for k in b.get("final_eval_pass_at_k", {})}, key=int)
    if not ks:
        return ["", "pass@k: not in these results (their runs' summaries hold pass@1 only)."]
    top = ks[-1]
    lines = ["", "pass@k at the budget (the final eval, eval.py's unbiased estimator over each "
             f"problem's samples), mean over seeds; then pass@{top} and pass@1 minus {reference}'s "
             "at the same lr, the mean over the seeds both finished (each seed):", "",
             "| branch | lr | " + " | ".join(f"pass@{k}" for k in ks)
             + f" | pass@{top} − {reference} | pass@1 − {reference} |",
             "| --- " * (4 + len(ks)) + "|"]
    for name in names:
        for m in multipliers:
            b = branches.get(branch_key(name, m))
            if b is None:
                continue
            at_k = b.get("final_eval_pass_at_k", {})
            ours = [finals(b, k) for k in (top, "1")]
            theirs = [finals(branches.get(branch_key(reference, m)), k) for k in (top, "1")]
            differences = (["", ""] if name == reference else
                           [paired_difference(*pair) for pair in zip(ours, theirs)])
            lines.append(f"| {name} | {m:g}η | " + " | ".join(
                f"{at_k[k]['mean']:.3f}" if k in at_k else "" for k in ks)
                + " | " + " | ".join(differences) + " |")
    return lines


def report(results: dict) -> str:
    """results.md: stage 1's stretches and probe, then per start every branch's pass@1 at the
    budget (seed mean ± std, each seed) at each lr multiplier, each branch minus ProRL's N seed by
    seed, pass@k (`pass_at_k_table`), and the frontier."""
    plan, stage1_result = results["plan"], results["stage1"]
    steps_worth = plan["stage1_n"] * plan["stage1_prompts"]  # samples of one stage-1 step
    lines = ["## Stage 1 (ProRL)", ""]
    if results.get("quick"):
        lines = ["**`--quick`: the pipeline at toy sizes, a test that it runs; no number here is a "
                 "result.**", ""] + lines
    if stage1_result is None:
        lines.append("Not run: only the start's branches were asked for.")
    else:
        lines += ["| lr | steps | last evals | level | plateaued | probe at lr/3: its evals | "
                  "lift (noise) |", "| --- " * 7 + "|"]
        for s in stage1_result["stretches"]:
            probe = s["probe"]
            lines.append(f"| {s['lr']:.3g} | {s['eval_steps'][-1]} | "
                         f"{' '.join(f'{p:.3f}' for p in s['eval_pass1'][-plan['plateau_evals']:])}"
                         f" | {s['level']:.3f} | {'yes' if s['plateaued'] else 'no'} | "
                         f"{' '.join(f'{p:.3f}' for p in probe['eval_pass1'][1:])} | "
                         f"{probe['lift']:+.3f} (±{probe['noise']:.3f}) |")
        lines += ["", "The branch point: " + ("saturated (the last probe stayed within the noise)."
                                              if stage1_result["saturated"] else
                                              "NOT saturated (a lower lr still lifted it).")]
    for start, found in results["starts"].items():
        branches = found["branches"]
        multipliers = sorted({b["lr_multiplier"] for b in branches.values()})
        names = list(dict.fromkeys(b["name"] for b in branches.values()))
        reference = f"N{plan['stage1_n']}"  # ProRL's shape
        step0 = [b["eval_pass1"][0] for b in branches.values()]
        lines += ["", f"## From the {start} (lr η = {found['lr']:.3g}; pass@1 at step 0, mean "
                  f"over branches: {mean(step0):.3f})", "",
                  "Runs' origin (the warmed model's sha256 on a CPU's kernels), by seed: "
                  + origins(branches), "",
                  "pass@1 at the budget, mean ± std over seeds (population std, ÷ seeds; each "
                  "seed); pass rate at the lowest lr:", "",
                  "| branch | prompts × steps | pass rate | "
                  + " | ".join(f"lr {m:g}η" for m in multipliers) + " |",
                  "| --- " * (3 + len(multipliers)) + "|"]
        for name in names:
            cells, shape = [], None
            for m in multipliers:
                b = branches.get(branch_key(name, m))
                shape = shape or b
                final = b and b["final_eval_pass1"]
                cells.append("" if not b else
                             f"{final['mean']:.3f} ± {final['std']:.3f} "
                             f"({' / '.join(f'{v:.3f}' for v in final['per_seed'].values())})")
            lines.append(f"| {name} | {shape['prompts_per_step']} × {shape['steps']} | "
                         f"{shape['pass_rate']:.2f} | " + " | ".join(cells) + " |")
        lines += ["", f"Each branch minus {reference} at the same lr, seed by seed (a seed's "
                  "branches see the same prompts): the mean over the seeds both finished (each "
                  "seed):", "",
                  "| branch | " + " | ".join(f"lr {m:g}η" for m in multipliers) + " |",
                  "| --- " * (1 + len(multipliers)) + "|"]
        for name in [n for n in names if n != reference]:
            lines.append(f"| {name} | " + " | ".join(
                paired_difference(*(finals(branches.get(branch_key(n, m)), "1")
                                    for n in (name, reference))) for m in multipliers) + " |")
        lines += pass_at_k_table(branches, names, multipliers, reference)
        lines += ["", "Frontier: the best pass@1 reached within each compute, mean over the seeds "
                  f"every branch has ({', '.join(found['frontier_seeds']) or 'none'}):", "",
                  "| samples (stage-1 steps' worth) | pass@1 | branch |", "| --- | --- | --- |"]
        lines += [f"| {p['compute'] / steps_worth:g} | {p['pass1']:.3f} | {p['branch']} |"
                  for p in found["frontier"]]
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    """revive.png: pass@1 vs rollout compute (Fig. 1's analog, seed spread shaded), the probe set's
    improved fraction and worst drop (Fig. 3 (ii)/(iii)), pass rate, throughput, per-prompt
    histograms."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    branches = results["branches"]
    fig, axes = plt.subplots(2, 3, figsize=(16, 9))
    ax = axes[0, 0]
    for name, b in branches.items():
        curves = [s["eval_pass1"] for s in b["seeds"].values()]
        width = min(map(len, curves))
        lo = [min(c[i] for c in curves) for i in range(width)]
        hi = [max(c[i] for c in curves) for i in range(width)]
        ax.plot(b["compute"][:width], b["eval_pass1"][:width], marker="o",
                label=f"{b['name']} x {b['prompts_per_step']}")
        ax.fill_between(b["compute"][:width], lo, hi, alpha=0.2)
    ax.set(xlabel="samples generated since the branch point", ylabel="held-out pass@1",
           title="pass@1 vs rollout compute")
    ax.legend()
    for ax, key, title in ((axes[0, 1], "probe_improved_frac",
                            "probes improved since step 0 (fraction)"),
                           (axes[0, 2], "probe_worst_drop", "worst probe drop (nats/token)")):
        for b in branches.values():
            ax.plot(b["probe_compute"][: len(b[key])], b[key], marker="o",
                    label=b["name"])
        ax.set(xlabel="samples generated since the branch point", title=title)
        ax.legend()
    names = list(branches)
    labels = [branches[n]["name"] for n in names]  # one lr per figure
    axes[1, 0].bar(labels, [branches[n]["pass_rate"] for n in names])
    axes[1, 0].set(title="dynamic-sampling pass rate (informative groups)")
    axes[1, 1].bar(labels, [branches[n]["samples_per_s"] for n in names])
    axes[1, 1].set(title="samples / s (whole step)")
    for ax in axes[1, :2]:
        ax.tick_params(axis="x", labelrotation=20)
    ax = axes[1, 2]
    width = 0.8 / max(len(names), 1)
    for i, n in enumerate(names):
        ax.bar([j + i * width for j in range(len(HIST_BINS))],
               [branches[n]["correct_frac_hist"][b] for b in HIST_BINS], width, label=labels[i])
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(HIST_BINS))], HIST_BINS)
    ax.set(xlabel="a prompt's correct fraction among its N samples", ylabel="share of prompts",
           title="per-prompt histogram")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_frontier(results: dict, path: Path) -> None:
    """frontier.png: per start, every branch's pass@1 against samples (mean over the seeds every
    branch has; solid at the lower lr, dashed at the higher) and the frontier."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    starts = results["starts"]
    fig, axes = plt.subplots(1, len(starts), figsize=(8 * len(starts), 5.5), squeeze=False)
    for ax, (start, found) in zip(axes[0], starts.items()):
        colors, multipliers = {}, sorted({b["lr_multiplier"] for b in found["branches"].values()})
        seeds, curves = shared_seed_curves(found["branches"])
        for key, b in found["branches"].items():
            color = colors.setdefault(b["name"], f"C{len(colors)}")
            style = "-" if b["lr_multiplier"] == multipliers[0] else "--"
            curve = curves[key]["eval_pass1"]
            ax.plot(b["compute"][: len(curve)], curve, style, color=color, marker=".",
                    label=f"{b['name']} lr {b['lr']:.2g}")
        edge = found["frontier"]
        ax.step([p["compute"] for p in edge], [p["pass1"] for p in edge], "k:", where="post",
                lw=2, label="frontier")
        ax.set(xlabel="samples generated",
               ylabel=f"held-out pass@1 (mean over seeds {', '.join(seeds)})",
               title=f"from the {start}" + (" (saturated ProRL)" if start == "plateau" else
                                            " (the warmed model before stage 1)"))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def read_results(path: Path) -> dict:
    try:
        results = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as e:  # ValueError: not JSON, or not UTF-8
        raise InputError(f"cannot read results from {path}: "
                         f"{'nested too deep' if isinstance(e, RecursionError) else e}") from None
    if not isinstance(results, dict):
        raise InputError(f"cannot read results from {path}: not a JSON object")
    return results


def write_results(results: dict, out: Path) -> None:
    """results.json and its report."""
    (out / "results.json").write_text(json.dumps(results, indent=2))
    write_report(results, out)


def write_report(results: dict, out: Path) -> None:
    """results.md, frontier.png and, per start and lr, the branches' revive_START_lrM.png."""
    (out / "results.md").write_text(report(results))
    if not results["starts"]:
        return
    plot_frontier(results, out / "frontier.png")
    for start, found in results["starts"].items():
        for multiplier in results["plan"]["lr_multipliers"]:
            branches = {key: b for key, b in found["branches"].items()
                        if b["lr_multiplier"] == multiplier}
            if branches:
                plot({"branches": branches}, out / f"revive_{start}_lr{multiplier:g}.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path,
                        help="a results.json of the revive experiment, or the folder holding it")
    parser.add_argument("--out", type=Path,
                        help="folder for results.md and the figures (default: RESULTS' own)")
    args = parser.parse_args(argv)
    path = args.results / "results.json" if args.results.is_dir() else args.results
    out = args.out or path.parent
    try:
        results = read_results(path)
        if not isinstance(results, dict) or not {"plan", "stage1", "starts"} <= set(results):
            raise InputError(f"{path} is not a results.json of this experiment (it needs plan, "
                             "stage1 and starts)")
        out.mkdir(parents=True, exist_ok=True)
        write_report(results, out)
    except InputError as e:
        sys.exit(f"error: {e}")
    print(f"written: {out / 'results.md'} and the figures")


if __name__ == "__main__":
    main()
