"""Does broadening keep coverage? ProRL's and BroRL's shapes (Hu et al., "BroRL", arXiv 2510.01180,
Sec. 3: N=16 x 512 prompts against N=512 x 128) and F-GRPO's focal weight (Plyusov et al., arXiv
2602.06717) on the many-answers task (data/make_many_answers.py), compared at matched pass@1.

Theorem 1 says a larger N leaves fewer correct answers unsampled, so fewer lose probability
(Fig. 3 (ii)/(iii)); F-GRPO says the same loss comes from the expected gradient on groups the policy
nearly always solves, and damps those groups instead. On a task that lists every correct answer,
coverage.py measures both exactly. Three branches, all from the tiny model warmed on the task's
prior, every one generating the same samples per step for the same steps (equal samples):

  prorl_N16   N=16 x P prompts, GRPO
  brorl_N512  N=512 x 16P/512 prompts, GRPO
  focal_N16   N=16 x P prompts, focal_grpo (GRPO x (1 - group success rate))

each for every seed, by train_brorl.py's own `parse_config` and `train`, with the probe set on every
held-out prompt and as many training prompts (--probe-prompts): it logs coverage_{train,held_out}_*
against step 0 (pass@k, distinct@k, share above start, worst drop, retained mass), and every eval
logs eval_coverage_*. A branch that reaches a pass@1 sooner has moved further, and moving further
concentrates mass whatever the method, so the results compare coverage against pass@1 (the probe's
correct mass, which is pass@1 exactly), not against samples or steps: the final values, and each
metric interpolated at pass@1 levels every run reaches. docs/theory.md has the design, the sizes and
the results.

    # the full experiment (3 branches x 3 seeds) -> runs/coverage/{results.json,results.md,
    # coverage.png}
    python experiments/coverage_experiment.py
    # continue it after a kill: finished runs are kept, a killed run resumes from its checkpoint
    python experiments/coverage_experiment.py --resume
    # the results again from the finished runs, running nothing
    python experiments/coverage_experiment.py --report-only
    # the sitting without the stop-properly penalty (docs/theory.md: why the penalty is on)
    python experiments/coverage_experiment.py --keep-truncated-reward --out runs/coverage-no-stop
    # the whole pipeline: a few steps, one seed
    python experiments/coverage_experiment.py --quick --out /tmp/coverage-quick
"""

import argparse
import dataclasses
import functools
import json
import math
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments"))
sys.path.insert(0, str(ROOT))  # ahead of experiments/: the project's modules first

from revive import plan_defaults, run  # noqa: E402
from revive_report import (mean, mean_of_curves, read_metrics, read_origin,  # noqa: E402
                           run_origin, seed_spread)
from tasks import InputError  # noqa: E402
from tiny_model import TinySpec, ensure_tiny_model, tiny_model_path  # noqa: E402

TRAIN_DATA = ROOT / "data" / "many_answers_train.jsonl"
TEST_DATA = ROOT / "data" / "many_answers_test.jsonl"
SPLITS = {"train": "training prompts", "held_out": "held-out prompts"}  # the probe's two sets
# the table's columns: coverage.report()'s names (correct_mass is pass@1)
COLUMNS = {"correct_mass": "pass@1", "pass@16": "pass@16", "pass@64": "pass@64",
           "pass@256": "pass@256", "distinct@256": "distinct@256",
           "above_start_frac": "share above start", "worst_drop": "worst drop (log p)",
           "retained_mass": "retained mass"}
PLOTTED = ("pass@256", "distinct@256", "retained_mass")  # against pass@1, in the figure


@dataclass
class Plan:
    """The experiment's sizes; the defaults are the full run, QUICK the pipeline check."""

    prorl_n: int = 16
    prorl_prompts: int = 64  # P: ProRL's shape is prorl_n x P samples per step, every branch's too
    brorl_n: int = 512  # BroRL's shape: brorl_n x prorl_n * P / brorl_n prompts
    steps: int = 64
    lr: float = 4e-4
    advantage: str = "grpo"  # ProRL's and BroRL's estimator; focal_grpo is it times a weight
    evals: int = 16  # evals per run (and checkpoints: a killed run loses less than one interval)
    eval_samples: int = 4  # sampled pass@1 beside the exact metrics (which need no samples)
    eval_max_problems: int = 0
    probe_prompts: int = 64  # the probe set: this many held-out and as many training prompts
    seeds: tuple[int, ...] = (0, 1, 2)
    warmup_steps: int = 1600  # the warmed model's (docs/theory.md, the many-answers task)
    # a response cut at max_new_tokens earns 0 (ProRLv2's stop-properly penalty): without it a run
    # can learn to write `\boxed{a}` then more tokens, still rewarded, and the exact metrics, which
    # read `\boxed{a}` then EOS, see none of its correct mass (`format_gap`)
    zero_truncated_reward: bool = True


QUICK = Plan(prorl_n=4, prorl_prompts=8, brorl_n=16, steps=2, evals=2, eval_samples=2,
             eval_max_problems=4, probe_prompts=4, seeds=(0,))


def branch_shapes(plan: Plan) -> list[dict]:
    """ProRL's shape, BroRL's and focal_grpo at ProRL's: the same samples per step and steps."""
    samples = plan.prorl_n * plan.prorl_prompts
    if samples % plan.brorl_n:
        raise InputError(f"BroRL's N ({plan.brorl_n}) must divide ProRL's samples per step "
                         f"({plan.prorl_n} x {plan.prorl_prompts} = {samples})")

    def shape(name: str, n: int, advantage: str) -> dict:
        return {"name": f"{name}_N{n}", "n_rollouts": n, "prompts_per_step": samples // n,
                "advantage": advantage, "steps": plan.steps, "samples_per_step": samples,
                "lr": plan.lr, "eval_every": max(1, plan.steps // plan.evals)}

    return [shape("prorl", plan.prorl_n, plan.advantage),
            shape("brorl", plan.brorl_n, plan.advantage),
            shape("focal", plan.prorl_n, "focal_grpo")]


def run_dir(out: Path, shape: dict, seed: int) -> Path:
    return out / "runs" / f"{shape['name']}_seed{seed}"


def finished(folder: Path, shape: dict) -> bool:
    evals = [r["step"] for r in read_metrics(folder) if "eval_pass1" in r]
    return (folder / "eval.json").is_file() and bool(evals) and evals[-1] == shape["steps"]


def warmed_model(plan: Plan, build: bool) -> Path:
    """The tiny model warmed on the task's prior (both splits' records: the prior is what the model
    knows before RL), cached like every tiny model; its path only, unless `build`."""
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "many_answers_warmup.jsonl"
        data.write_bytes(TRAIN_DATA.read_bytes() + TEST_DATA.read_bytes())
        get = ensure_tiny_model if build else tiny_model_path
        return get(spec=TinySpec(warmup_steps=plan.warmup_steps), train_data=data)


def run_branch(plan: Plan, model: str, folder: Path, shape: dict, seed: int) -> None:
    """One run, or the rest of a killed one (train_brorl.py --resume from its checkpoint)."""
    origin, began = run_origin(model), read_origin(folder)
    if began is not None and began != origin:
        raise InputError(f"{folder} began from {json.dumps(began)}, this machine has "
                         f"{json.dumps(origin)}: finish it where it began, or delete it")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "origin.json").write_text(json.dumps(origin))
    run(["--model", model, "--train-data", str(TRAIN_DATA), "--test-data", str(TEST_DATA),
         "--output-dir", str(folder), "--resume", "--seed", str(seed),
         "--advantage", shape["advantage"], "--n-rollouts", str(shape["n_rollouts"]),
         "--prompts-per-step", str(shape["prompts_per_step"]), "--lr", repr(shape["lr"]),
         "--total-steps", str(shape["steps"]), "--eval-every", str(shape["eval_every"]),
         "--save-every", str(shape["eval_every"]), "--keep-checkpoints", "1",
         "--eval-samples", str(plan.eval_samples), "--eval-max-problems",
         str(plan.eval_max_problems), "--probe-prompts", str(plan.probe_prompts),
         "--shrink-monitor-samples", "0"]
        + (["--zero-truncated-reward"] if plan.zero_truncated_reward else []))


# ---- summaries: a run's curves, a branch's seed means, matched pass@1 ---------------------------

def seed_summary(folder: Path, shape: dict) -> dict:
    """One run's curves, eval by eval: samples generated, and per probe split every coverage
    metric (coverage_SPLIT_METRIC); the sampled eval_pass1 and the exact eval_coverage_* beside."""
    rows = read_metrics(folder)
    probes = [r for r in rows if "coverage_held_out_correct_mass" in r]
    evals = [r for r in rows if "eval_pass1" in r]
    curves = {split: {key[len(f"coverage_{split}_"):]: [r[key] for r in probes]
                      for key in probes[0] if key.startswith(f"coverage_{split}_")}
              for split in SPLITS} if probes else {}
    return {"origin": read_origin(folder),
            "steps": [r["step"] for r in probes],
            "samples": [r["step"] * shape["samples_per_step"] for r in probes],
            "coverage": curves,
            "eval_pass1": [r["eval_pass1"] for r in evals],
            "eval_coverage": {key[len("eval_coverage_"):]: [r[key] for r in evals]
                              for key in evals[0] if key.startswith("eval_coverage_")},
            "pass_rate": mean([r["pass_rate"] for r in rows if "pass_rate" in r])}


def format_gap(summary: dict) -> float:
    """The last eval's sampled pass@1 minus its exact correct mass, on the same held-out prompts:
    the correct mass the policy puts on other ways of writing a correct answer than
    `\\boxed{a}` then EOS, which the exact metrics do not see (0 but for sampling error)."""
    return summary["eval_pass1"][-1] - summary["eval_coverage"]["correct_mass"][-1]


def at_pass1(pass1: list[float], values: list[float], level: float) -> float:
    """A metric where the run's pass@1 first reaches `level`, linear between the two evals around
    it (nan if it never does).

    >>> at_pass1([0.2, 0.4, 0.8], [10.0, 8.0, 4.0], 0.6)
    6.0
    """
    for i, p in enumerate(pass1):
        if p >= level:
            if i == 0:
                return values[0]
            share = (level - pass1[i - 1]) / (p - pass1[i - 1])
            return values[i - 1] + share * (values[i] - values[i - 1])
    return float("nan")


def matched_levels(branches: dict, split: str, count: int = 3) -> list[float]:
    """`count` pass@1 levels that every run of every branch reaches on `split`: evenly spaced from
    the start to the highest such level, rounded down to 0.01 (none: no run rose)."""
    runs = [s["coverage"][split]["correct_mass"] for b in branches.values()
            for s in b["seeds"].values()]
    start, top = max(r[0] for r in runs), min(max(r) for r in runs)
    if top <= start:
        return []
    return [math.floor(100 * (start + (top - start) * (i + 1) / count) + 1e-9) / 100
            for i in range(count)]


def branch_summary(shape: dict, per_seed: dict[int, dict]) -> dict:
    """The seed mean of every curve (as far as the shortest run goes), each metric at the end
    and at matched pass@1 with its seed spread (filled by `summarise`), every seed's curves."""
    seeds = list(per_seed.values())
    return {**shape,
            "samples": seeds[0]["samples"],
            "coverage": {split: {metric: mean_of_curves([s["coverage"][split][metric]
                                                         for s in seeds])
                                 for metric in seeds[0]["coverage"][split]} for split in SPLITS},
            "final": {split: {metric: seed_spread({str(seed): s["coverage"][split][metric][-1]
                                                   for seed, s in per_seed.items()})
                              for metric in seeds[0]["coverage"][split]} for split in SPLITS},
            "format_gap": seed_spread({str(seed): format_gap(s) for seed, s in per_seed.items()}),
            "pass_rate": mean([s["pass_rate"] for s in seeds]),
            "seeds": {str(seed): s for seed, s in per_seed.items()}}


def summarise(plan: Plan, out: Path, model: str) -> dict:
    """results.json from every finished run in `out`: per branch its seed summaries and means,
    and per split each metric at the pass@1 levels every finished run reaches."""
    results = {"plan": dataclasses.asdict(plan), "model": model, "branches": {}}
    for shape in branch_shapes(plan):
        per_seed = {seed: seed_summary(run_dir(out, shape, seed), shape) for seed in plan.seeds
                    if finished(run_dir(out, shape, seed), shape)}
        if per_seed:
            results["branches"][shape["name"]] = branch_summary(shape, per_seed)
    branches = results["branches"]
    results["matched"] = {split: {"levels": matched_levels(branches, split)} for split in SPLITS
                          } if branches else {}
    for split, found in results["matched"].items():
        for name, b in branches.items():
            found[name] = {metric: [seed_spread({seed: at_pass1(
                s["coverage"][split]["correct_mass"], s["coverage"][split][metric], level)
                for seed, s in b["seeds"].items()}) for level in found["levels"]]
                for metric in COLUMNS if metric != "correct_mass"}
    return results


# ---- results.md and the figure -------------------------------------------------------------------

def cell(spread: dict, digits: int = 3) -> str:
    """Seed mean ± std (population, ÷ seeds)."""
    return f"{spread['mean']:.{digits}f} ± {spread['std']:.{digits}f}"


def paired(mine: dict, theirs: dict) -> str:
    """A table cell: one branch's per-seed values minus another's, over the seeds both have."""
    differences = seed_spread({seed: value - theirs["per_seed"][seed]
                               for seed, value in mine["per_seed"].items()
                               if seed in theirs["per_seed"]})
    return (f"{differences['mean']:+.3f} ± {differences['std']:.3f} ("
            + " / ".join(f"{d:+.3f}" for d in differences["per_seed"].values()) + ")")


def report(results: dict) -> str:
    """results.md: per split, each branch at the end (seed mean ± std, then each seed), and each
    metric at matched pass@1."""
    branches, lines = results["branches"], []
    for split, title in SPLITS.items():
        lines += [f"## {title[0].upper()}{title[1:]}", "",
                  "At the end (the last eval), seed mean ± std (population, ÷ seeds), then each "
                  "seed:", "",
                  "| branch | seed | samples | " + " | ".join(COLUMNS.values()) + " |",
                  "| --- " * (3 + len(COLUMNS)) + "|"]
        for name, b in branches.items():
            final = b["final"][split]
            samples = b["samples"][-1]
            lines.append(f"| {name} | mean | {samples} | "
                         + " | ".join(cell(final[m]) for m in COLUMNS) + " |")
            for seed in b["seeds"]:
                lines.append(f"| {name} | {seed} | {samples} | "
                             + " | ".join(f"{final[m]['per_seed'][seed]:.3f}" for m in COLUMNS)
                             + " |")
        if split == "held_out":
            lines += ["", "Format gap: the last eval's sampled pass@1 minus the exact correct mass "
                      "on the same prompts, the correct answers written other than `\\boxed{a}` "
                      "then EOS, which the metrics above do not count (0 but for sampling error, "
                      "about ±0.06 at 4 samples x 64 prompts):", "",
                      "| branch | mean ± std | each seed |", "| --- | --- | --- |"]
            lines += [f"| {name} | {cell(b['format_gap'])} | "
                      + " / ".join(f"{v:.3f}" for v in b["format_gap"]["per_seed"].values()) + " |"
                      for name, b in branches.items()]
        matched = results["matched"].get(split, {})
        if not matched.get("levels"):
            lines += ["", "No pass@1 level above the start is reached by every run.", ""]
            continue
        metrics = [m for m in COLUMNS if m != "correct_mass"]
        lines += ["", "At matched pass@1 (each run interpolated where its pass@1 first reaches "
                  "the level; seed mean ± std):", "",
                  "| pass@1 | branch | " + " | ".join(COLUMNS[m] for m in metrics) + " |",
                  "| --- " * (2 + len(metrics)) + "|"]
        for i, level in enumerate(matched["levels"]):
            lines += [f"| {level:.2f} | {name} | "
                      + " | ".join(cell(matched[name][m][i]) for m in metrics) + " |"
                      for name in branches]
        reference, others = next(iter(branches)), list(branches)[1:]
        lines += ["", f"At matched pass@1, each branch minus {reference}, seed by seed (seed mean "
                  "± std of the differences; each seed):", "",
                  "| pass@1 | branch | " + " | ".join(COLUMNS[m] for m in PLOTTED) + " |",
                  "| --- " * (2 + len(PLOTTED)) + "|"]
        for i, level in enumerate(matched["levels"]):
            lines += [f"| {level:.2f} | {name} | " + " | ".join(
                paired(matched[name][m][i], matched[reference][m][i]) for m in PLOTTED) + " |"
                for name in others]
        lines.append("")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: Path) -> None:
    """coverage.png: per split (rows), pass@256, distinct@256 and retained mass against pass@1,
    one curve per branch (seed mean, each seed faint), and pass@1 against samples."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    branches = results["branches"]
    fig, axes = plt.subplots(len(SPLITS), len(PLOTTED) + 1, figsize=(18, 8.5), squeeze=False)
    for row, (split, title) in zip(axes, SPLITS.items()):
        for i, (name, b) in enumerate(branches.items()):
            color = f"C{i}"
            for ax, metric in zip(row, PLOTTED):
                for s in b["seeds"].values():
                    ax.plot(s["coverage"][split]["correct_mass"], s["coverage"][split][metric],
                            color=color, alpha=0.25, lw=0.8)
                ax.plot(b["coverage"][split]["correct_mass"], b["coverage"][split][metric],
                        color=color, marker="o", ms=3, label=f"{name} x {b['prompts_per_step']}")
                ax.set(xlabel="pass@1 (correct mass)", ylabel=metric,
                       title=f"{metric} vs pass@1, {title}")
            row[-1].plot(b["samples"][: len(b["coverage"][split]["correct_mass"])],
                         b["coverage"][split]["correct_mass"], color=color, marker="o", ms=3,
                         label=name)
            row[-1].set(xlabel="samples generated", ylabel="pass@1 (correct mass)",
                        title=f"pass@1 vs samples, {title}")
        for ax in row:
            ax.legend(fontsize=7)
    seeds = sorted({int(seed) for b in branches.values() for seed in b["seeds"]})
    fig.suptitle(f"seed mean (faint: each seed), seeds {', '.join(map(str, seeds))}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def write_results(results: dict, out: Path) -> None:
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "results.md").write_text(report(results))
    if results["branches"]:
        plot(results, out / "coverage.png")


# ---- the command ---------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Plan]:
    plan_default = functools.partial(plan_defaults, Plan(), QUICK)
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "coverage",
                        help="experiment folder")
    parser.add_argument("--quick", action="store_true", help="a few steps, one seed")
    parser.add_argument("--resume", action="store_true",
                        help="continue the experiment in --out: finished runs are kept, a killed "
                             "one continues from its checkpoint")
    parser.add_argument("--report-only", action="store_true",
                        help="write the results from the finished runs, running nothing")
    parser.add_argument("--model", help="starting policy (default: the tiny model warmed on the "
                                        "many-answers task's prior)")
    parser.add_argument("--seeds", type=int, nargs="+",
                        help="seeds, each branch run once per seed " + plan_default("seeds"))
    parser.add_argument("--steps", type=int,
                        help="RL steps of every branch (all three at the same samples per step) "
                             + plan_default("steps"))
    parser.add_argument("--keep-truncated-reward", action="store_true",
                        help="a response cut at the token limit keeps its reward (default: it "
                             "earns 0, ProRLv2's stop-properly penalty)")
    args = parser.parse_args(argv)
    overrides = {"seeds": tuple(args.seeds)} if args.seeds else {}
    overrides.update({"steps": args.steps} if args.steps else {})
    overrides.update({"zero_truncated_reward": False} if args.keep_truncated_reward else {})
    return args, dataclasses.replace(QUICK if args.quick else Plan(), **overrides)


def main(argv: list[str] | None = None) -> None:
    """Every branch's seed-0 run first, then seed 1's, ...; the results after each run."""
    args, plan = parse_args(argv)
    try:
        shapes = branch_shapes(plan)
        if (args.out / "runs").exists() and not (args.resume or args.report_only):
            raise InputError(f"{args.out} already holds an experiment: pass --resume to continue "
                             "it, or another --out")
        model = args.model or str(warmed_model(plan, build=not args.report_only))
        args.out.mkdir(parents=True, exist_ok=True)
        start = time.time()
        for seed in [] if args.report_only else plan.seeds:
            for shape in shapes:
                folder = run_dir(args.out, shape, seed)
                label = (f"{shape['name']} x {shape['prompts_per_step']} prompts, "
                         f"{shape['steps']} steps, seed {seed}")
                if finished(folder, shape):
                    print(f"[coverage] {label}: finished earlier, kept", flush=True)
                    continue
                print(f"[coverage] {label}", flush=True)
                began = time.time()
                run_branch(plan, model, folder, shape, seed)
                print(f"[coverage] {label}: took {time.time() - began:.0f}s", flush=True)
                write_results(summarise(plan, args.out, model), args.out)
        results = summarise(plan, args.out, model)
        if not args.report_only:
            results["wall_s"] = time.time() - start  # this invocation's
        write_results(results, args.out)
    except InputError as e:
        sys.exit(f"error: {e}")
    print(f"done in {time.time() - start:.0f}s: {args.out / 'results.md'}, "
          f"{args.out / 'coverage.png'}")


if __name__ == "__main__":
    main()
