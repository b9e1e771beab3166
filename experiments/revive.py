"""When does broadening pay? The paper's central result at laptop scale (Hu et al., "BroRL", arXiv
2510.01180, Sec. 4 and Fig. 1): a policy trained with few rollouts per prompt (ProRL, N=16)
plateaus; continued from that checkpoint with many (BroRL, N=512) it keeps improving at equal
rollout compute. This script runs that experiment on the graded toy task (data/make_graded_arith.py)
by calling train_brorl.py's own `parse_config` and `train` (no second training loop):

  stage 1  ProRL (N=16 x 512 prompts) from the tiny model warmed up on the graded task, until
           held-out pass@1 plateaus (`plateaued`). A plateau at one lr can be that lr's noise
           floor, so stage 1 anneals (`stage1`): a probe at a lower lr that lifts pass@1 beyond the
           noise goes on as stage 1; one that does not confirms the plateau, whose checkpoint is
           the branch point.
  stage 2  branches continued from it with --init-from (weights and AdamW state): N=16, 64, 256,
           512 and the per-prompt allocation (train_brorl.py --allocation knapsack at ProRL's
           shape, with and without --allocation-history), each at every lr of `lr_multipliers` x
           the branch point's lr, for every seed; and the same branches from the start (the
           warmed model before stage 1, at multiples of η0).

Every branch generates the same number of samples (`branch_shape`) and is evaluated along the way,
so pass@1 against samples gives the frontier: the best pass@1 reached at each compute, and by which
branch. Branches with the same seed see the same prompt order, and shrinkage is measured on one
probe set drawn by stage 1 at its step 0 and copied into every branch (--probe-prompts, the analog
of Fig. 3 (ii)/(iii)). docs/revive.md has the design, how its sizes were chosen, and the results.

    # the full experiment -> runs/revive/{results.json,results.md,frontier.png,revive_START_lrM.png}
    python experiments/revive.py
    # continue it in another sitting; finished runs are kept (results are written after each)
    python experiments/revive.py --resume
    # one seed, from the plateau only
    python experiments/revive.py --seeds 0 --starts plateau
    # one seed from the start only: stage 1 is not run (one in --out is continued or read)
    python experiments/revive.py --seeds 2 --starts start --out runs/start-seed2
    # ... joined with another sitting's results (its run folders gone), skipping what it ran
    python experiments/revive.py --seeds 2 --starts start --out runs/start-seed2 \\
        --merge docs/broaden/results.json
    # only the results, from the finished runs and --merge
    python experiments/revive.py --report-only --out runs/start-seed2 \\
        --merge docs/broaden/results.json
    # the whole pipeline in a few minutes
    python experiments/revive.py --quick --out /tmp/revive-quick

The results (summaries, frontier, tables and figures, --merge, the runs' origins) are
experiments/revive_report.py's.
"""

import argparse
import dataclasses
import functools
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import train_brorl  # noqa: E402
import update  # noqa: E402
from revive_report import (TEST_DATA, branch_dir, branch_finished, branch_key,  # noqa: E402
                           check_merge, check_seed_origin, mean, merged_seeds, pass1_by_level,
                           read_metrics, read_origin, read_results, run_origin, seed_summary,
                           summarise, write_results)
from checkpoints import latest_checkpoint  # noqa: E402
from tasks import InputError  # noqa: E402
from tiny_model import TinySpec, ensure_tiny_model, tiny_model_path  # noqa: E402

TRAIN_DATA = ROOT / "data" / "graded_train.jsonl"  # the graded task; TEST_DATA holds its test set
# The starting policy: the tiny model with a longer supervised warm-up on the graded task than the
# default model's (docs/revive.md has why), cached under its own key like every tiny-model build.
GRADED_WARMUP = TinySpec(warmup_steps=600)


# a branch's learning rate is η x LR_SCALING[rule](B / B0), B its samples per step
LR_SCALING = {"sqrt": math.sqrt, "constant": lambda ratio: 1.0}


STARTS = ("plateau", "start")  # the saturated branch point; the model before stage 1


@dataclass
class Plan:
    """The experiment's sizes; the defaults are the full run, QUICK the pipeline check."""

    stage1_n: int = 16
    stage1_prompts: int = 512
    lr: float = 3e-4  # η0, at stage 1's B0 = stage1_n x stage1_prompts samples per step
    eval_every: int = 10
    stage1_max_steps: int = 320  # per learning rate of stage 1
    stage1_seed: int = 0  # one stage 1, shared by every seed's branches
    plateau_evals: int = 8
    # stage 1 anneals: at a plateau, a probe at lr / lr_decay for probe_steps; if it lifts pass@1,
    # stage 1 goes on at that lr (at most max_decays times), else the plateau is the branch point
    lr_decay: float = 3.0
    max_decays: int = 3
    probe_steps: int = 40
    branch_ns: tuple[int, ...] = (16, 64, 256, 512)
    # the allocation branches: stage 1's shape (allocation_n mean rollouts x stage1_prompts) with
    # --allocation knapsack (0: none), for each of allocation_history: without, with
    # --allocation-history (the previous visit's rollouts as evidence beside the screening)
    allocation_n: int = 16
    allocation_history: tuple[bool, ...] = (False, True)
    screen_rollouts: int = 4
    allocation_cap: int = 512
    seeds: tuple[int, ...] = (0, 1, 2)
    budget_steps: int = 160  # samples per branch: this many stage-1 steps' worth
    min_prompts: int = 128
    evals_per_branch: int = 8
    eval_samples: int = 16
    eval_max_problems: int = 0
    probe_prompts: int = 64
    # a branch's lr: "sqrt" η·sqrt(B/B0), the paper's rule; "constant" η for every N
    lr_scaling: str = "constant"
    # the lr axis: every branch at η x m for each m; η is stage 1's last lr (from the plateau) or
    # η0 (from the start)
    lr_multipliers: tuple[float, ...] = (1.0, 3.0)
    starts: tuple[str, ...] = STARTS
    advantage: str = "reinforce_pp_baseline"  # the paper's estimator (ProRLv2/BroRL, Sec. 3)


QUICK = Plan(stage1_n=4, stage1_prompts=16, eval_every=2, stage1_max_steps=4, plateau_evals=2,
             max_decays=1, probe_steps=2, branch_ns=(4,), allocation_n=4, screen_rollouts=2,
             allocation_cap=16, allocation_history=(True,), seeds=(0, 1), budget_steps=2,
             min_prompts=8, evals_per_branch=2, eval_samples=2, eval_max_problems=16,
             probe_prompts=8)


def branch_shape(plan: Plan, n: int, lr: float, allocation: bool = False,
                 history: bool = False) -> dict:
    """Prompts per step, steps, learning rate and eval interval of the branch with N = n (the mean
    N with `allocation`, whose evidence includes each prompt's previous visit with `history`)
    from a policy trained at `lr`. Equal rollout compute: every branch generates budget_steps
    stage-1 steps' worth of samples (responses are at most 8 tokens and about equally long across
    N, so samples are the generation cost; tokens are summarised beside them). Prompts per step:
    as many as keep stage 1's B0 = stage1_n x stage1_prompts samples per step while that leaves at
    least min_prompts, then min_prompts (the paper's BroRL batch, N=512 x 128: 8x ProRL's samples
    per step, so 1/8 of its steps); the allocation keeps ProRL's prompts. The lr: `lr` for every N
    with "constant", times sqrt(B / B0) with "sqrt" (the paper's rule, Sec. 4.2; an lr multiplier
    of 3 is about its 2.8 for BroRL's 8x batch). Every N keeps 2 PPO mini-batches per step, as the
    paper does."""
    assert allocation or not history, "history is evidence for the allocation"
    base = plan.stage1_n * plan.stage1_prompts
    prompts = plan.stage1_prompts if allocation else max(plan.min_prompts, base // n)
    steps = max(1, round(plan.budget_steps * base / (n * prompts)))
    name = (f"knapsack{n}" + ("+history" if history else "")) if allocation else f"N{n}"
    return {"name": name, "n_rollouts": n, "prompts_per_step": prompts, "steps": steps,
            "samples_per_step": n * prompts,
            "lr": lr * LR_SCALING[plan.lr_scaling](n * prompts / base),
            "allocation": allocation, "history": history,
            "eval_every": max(1, steps // plan.evals_per_branch)}


def branch_shapes(plan: Plan, lr: float) -> list[dict]:
    """Every branch at one lr: each fixed N, then the per-prompt allocations."""
    shapes = [branch_shape(plan, n, lr) for n in plan.branch_ns]
    if plan.allocation_n:
        shapes += [branch_shape(plan, plan.allocation_n, lr, allocation=True, history=history)
                   for history in plan.allocation_history]
    return shapes


def common_flags(plan: Plan, model: str) -> list[str]:
    return ["--model", model, "--train-data", str(TRAIN_DATA), "--test-data", str(TEST_DATA),
            "--advantage", plan.advantage,
            "--minibatches", "2", "--eval-samples", str(plan.eval_samples), "--eval-max-problems",
            str(plan.eval_max_problems), "--probe-prompts", str(plan.probe_prompts),
            "--keep-checkpoints", "1"]


def run(argv: list[str]) -> Path:
    """One train_brorl.py run, in this process, through its own config parser (so every check
    applies)."""
    return train_brorl.train(train_brorl.parse_config(argv))


def eval_interval(level: float, problems_x_samples: int) -> float:
    """One eval's 95% interval at pass@1 `level` (binomial, over problems x samples)."""
    return 1.96 * math.sqrt(max(level * (1 - level), 1e-4) / problems_x_samples)


def eval_draws(plan: Plan) -> int:
    """Samples behind one eval: test problems x eval_samples."""
    problems = (sum(1 for _ in open(TEST_DATA)) if not plan.eval_max_problems
                else plan.eval_max_problems)
    return problems * plan.eval_samples


def plateaued(steps: list[int], pass1: list[float], window: int, problems_x_samples: int) -> bool:
    """The least-squares line through the last `window` evals rises, across them, by less than one
    eval's 95% interval (1.96 x the binomial standard error over problems x samples at their mean
    pass@1; on a fixed test set that bounds the sampling noise from above). A line through several
    evals averages their noise: a slow steady rise is seen as a rise, one noisy eval is not."""
    if len(pass1) < max(window, 2):
        return False
    x, y = steps[-window:], pass1[-window:]
    x_mean, y_mean = mean(x), mean(y)
    slope = (sum((a - x_mean) * (b - y_mean) for a, b in zip(x, y))
             / sum((a - x_mean) ** 2 for a in x))
    return slope * (x[-1] - x[0]) < eval_interval(y_mean, problems_x_samples)


def stage1_run(plan: Plan, model: str, run_dir: Path, seed: int, lr: float,
               init_from: Path | None, max_steps: int, until_plateau: bool
               ) -> tuple[list[dict], bool]:
    """ProRL at `lr`, eval_every steps at a time, until max_steps or (until_plateau) the plateau
    rule holds; its evals, and whether they plateaued."""
    while True:
        evals = [r for r in read_metrics(run_dir) if "eval_pass1" in r]
        steps = evals[-1]["step"] if evals else 0
        flat = plateaued([r["step"] for r in evals], [r["eval_pass1"] for r in evals],
                         plan.plateau_evals, eval_draws(plan))
        if (until_plateau and flat) or steps >= max_steps:
            return evals, flat
        print(f"[revive] stage 1 (ProRL N={plan.stage1_n} x {plan.stage1_prompts}, lr {lr:.3g}): "
              f"steps {steps} -> {steps + plan.eval_every}, pass@1 so far "
              f"{[round(r['eval_pass1'], 3) for r in evals]}", flush=True)
        run(common_flags(plan, model) + [
            "--output-dir", str(run_dir), "--resume", "--seed", str(seed), "--n-rollouts",
            str(plan.stage1_n), "--prompts-per-step", str(plan.stage1_prompts), "--lr", repr(lr),
            "--total-steps", str(steps + plan.eval_every), "--eval-every", str(plan.eval_every),
            "--save-every", str(plan.eval_every)]
            + (["--init-from", str(init_from)] if init_from else []))


def stage1(plan: Plan, model: str, out: Path, seed: int) -> dict:
    """ProRL until it is saturated: at each lr until the plateau rule holds, then a probe of
    probe_steps at lr / lr_decay from there; a probe that lifts pass@1 beyond the noise (its last
    two evals against the plateau's last plateau_evals) becomes the next stretch of stage 1, one
    that does not confirms the plateau, whose checkpoint is the branch point. Returns every stretch,
    the probe and the branch point."""
    if plan.probe_steps % plan.eval_every:
        raise InputError(f"probe_steps ({plan.probe_steps}) must be a multiple of eval_every "
                         f"({plan.eval_every}): a probe is judged by its last two evals")
    start, lr, run_dir, init_from, stretches = time.time(), plan.lr, out / "stage1", None, []
    while True:
        evals, flat = stage1_run(plan, model, run_dir, seed, lr, init_from,
                                 plan.stage1_max_steps, until_plateau=True)
        level = mean([r["eval_pass1"] for r in evals[-plan.plateau_evals:]])
        checkpoint = latest_checkpoint(run_dir, say=lambda message: None)
        if checkpoint is None:
            raise InputError(f"stage 1 in {run_dir} left no checkpoint (stage1_max_steps must be "
                             ">= eval_every)")
        stretches.append({"lr": lr, "run": str(run_dir), "eval_steps": [r["step"] for r in evals],
                          "eval_pass1": [r["eval_pass1"] for r in evals], "level": level,
                          "plateaued": flat, "checkpoint": str(checkpoint)})
        probe_lr, probe_dir = lr / plan.lr_decay, out / f"stage1_lr{lr / plan.lr_decay:.3g}"
        probe_evals, _ = stage1_run(plan, model, probe_dir, seed, probe_lr, checkpoint,
                                    plan.probe_steps, until_plateau=False)
        # the probe's own steps (a probe that went on as stage 1 has more when resumed)
        probe_evals = [r for r in probe_evals if r["step"] <= plan.probe_steps]
        lift = mean([r["eval_pass1"] for r in probe_evals[-2:]]) - level
        # the difference of a two-eval mean and a plateau_evals mean
        noise = eval_interval(level, eval_draws(plan)) * math.sqrt(1 / 2 + 1 / plan.plateau_evals)
        probe = {"lr": probe_lr, "run": str(probe_dir),
                 "eval_steps": [r["step"] for r in probe_evals],
                 "eval_pass1": [r["eval_pass1"] for r in probe_evals], "lift": lift,
                 "noise": noise}
        stretches[-1]["probe"] = probe
        print(f"[revive] stage 1 at lr {lr:.3g}: plateau {level:.3f}; a probe at lr "
              f"{probe_lr:.3g} moved it {lift:+.3f} (noise ±{noise:.3f})", flush=True)
        if lift <= noise or len(stretches) > plan.max_decays:
            break
        lr, run_dir, init_from = probe_lr, probe_dir, checkpoint  # the probe goes on as stage 1
    saturated = lift <= noise
    print(f"[revive] stage 1 done: pass@1 {level:.3f} at lr {lr:.3g}, "
          f"{'saturated' if saturated else 'a lower lr still lifts it, NOT saturated'}; branching "
          f"from {checkpoint}")
    return {"stretches": stretches, "probe": probe, "saturated": saturated, "lr": lr,
            "eval_pass1": [p for s in stretches for p in s["eval_pass1"]],
            "checkpoint": str(checkpoint), "final_pass1_by_level": pass1_by_level(run_dir),
            "wall_s": time.time() - start}


def run_branch(plan: Plan, model: str, checkpoint: str | None, run_dir: Path, shape: dict,
               seed: int) -> None:
    """One branch run from `checkpoint` (weights and AdamW state), or from `model` when None."""
    origin, began = run_origin(model), read_origin(run_dir)
    if began is not None and began != origin:
        raise InputError(f"{run_dir} began from {json.dumps(began)}, this machine has "
                         f"{json.dumps(origin)}: finish it where it began, or delete it")
    if not (run_dir / "metrics.jsonl").is_file():  # a run begun unrecorded stays so
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "origin.json").write_text(json.dumps(origin))
    allocation = (["--allocation", "knapsack", "--screen-rollouts", str(plan.screen_rollouts),
                   "--allocation-cap", str(plan.allocation_cap)] if shape["allocation"] else [])
    allocation += ["--allocation-history"] if shape["history"] else []
    run(common_flags(plan, model) + allocation + [
        "--output-dir", str(run_dir), "--resume", "--seed", str(seed),
        "--n-rollouts", str(shape["n_rollouts"]), "--prompts-per-step",
        str(shape["prompts_per_step"]),
        "--lr", repr(shape["lr"]), "--total-steps", str(shape["steps"]), "--eval-every",
        str(shape["eval_every"]), "--save-every", str(shape["eval_every"])]
        + (["--init-from", checkpoint] if checkpoint else []))


def start_point(plan: Plan, stage1_result: dict | None, start: str) -> tuple[float, str | None]:
    """A start's base lr and the checkpoint its branches continue (None: the model itself)."""
    if start == "plateau":
        return stage1_result["lr"], stage1_result["checkpoint"]
    return plan.lr, None


def branches(plan: Plan, stage1_result: dict | None, starts: tuple[str, ...]) -> list[dict]:
    """Every branch from `starts`, lr multiplier by multiplier: its start, the start's lr and
    checkpoint, its lr multiplier and shape (in summarise's order, results.json's)."""
    found = []
    for start in starts:
        start_lr, checkpoint = start_point(plan, stage1_result, start)
        found += [{"start": start, "start_lr": start_lr, "checkpoint": checkpoint,
                   "lr_multiplier": multiplier, "shape": shape}
                  for multiplier in plan.lr_multipliers
                  for shape in branch_shapes(plan, start_lr * multiplier)]
    return found


def folder_results(plan: Plan, out: Path, model: str, stage1_result: dict | None,
                   earlier: dict | None = None, quick: bool = False) -> dict:
    """results.json of every branch `out` may hold, whichever sitting ran it, with the seeds of
    `earlier` (--merge, or out's own results.json) it does not hold (see summarise); `quick`: a
    --quick plan's, which its report says is a test of the pipeline."""
    starts = STARTS if stage1_result else ("start",)
    return {**summarise(plan, branches(plan, stage1_result, starts), out, model, stage1_result,
                        earlier), "quick": quick}


def branch_jobs(plan: Plan, out: Path, stage1_result: dict | None, earlier: dict | None,
                merged_from: Path | None) -> list[dict]:
    """This sitting's branch runs, seed by seed (one seed of every branch first): each a branch
    with its seed, run folder and why it is skipped (None: it runs): finished in `out` by an
    earlier sitting, or in the merged results."""
    jobs = []
    for seed in plan.seeds:
        for branch in branches(plan, stage1_result, plan.starts):
            start, shape = branch["start"], branch["shape"]
            run_dir = branch_dir(out, start, shape, seed)
            key = branch_key(shape["name"], branch["lr_multiplier"])
            skip = ("finished earlier, kept" if branch_finished(run_dir, shape["steps"]) else
                    f"in {merged_from}, kept" if seed in merged_seeds(earlier, start, key, shape)
                    else None)
            jobs.append({**branch, "seed": seed, "run_dir": run_dir, "skip": skip})
    return jobs


def branch_point(plan: Plan, out: Path, model: str, earlier: dict | None,
                 report_only: bool) -> dict | None:
    """Stage 1's result (None: not run). Only the plateau's branches need stage 1 (about 40
    minutes): one in `out` is continued (for a report, read from out's results.json), a merged one
    is taken as it is."""
    merged = earlier["stage1"] if earlier else None
    if merged and (out / "stage1").exists():
        raise InputError(f"--merge: both it and {out} hold a stage 1; branches from two branch "
                         "points are not one experiment")
    if report_only:
        return merged or (read_results(out / "results.json")["stage1"]
                          if (out / "results.json").is_file() else None)
    if (out / "stage1").exists() or ("plateau" in plan.starts and not merged):
        return stage1(plan, model, out, seed=plan.stage1_seed)
    return merged


def plan_defaults(full, quick, field: str) -> str:
    """A plan field's defaults as --help shows them: the full plan's, and the --quick plan's where
    it differs (this script's plans, and coverage_experiment.py's)."""
    def show(value) -> str:
        return " ".join(map(str, value)) if isinstance(value, tuple) else str(value)

    full, quick = getattr(full, field), getattr(quick, field)
    return f"(default: {show(full)}" + (f"; --quick: {show(quick)})" if quick != full else ")")


def count_in(low: int, high: int):
    """An argparse type: an integer in [low, high]."""
    def count(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not in [{low}, {high}]")
        return value
    return count


def lr_multiplier(text: str) -> float:
    """An argparse type: a learning-rate multiplier, in (0, 1000]."""
    value = float(text)
    if not 0 < value <= 1000:
        raise argparse.ArgumentTypeError(f"{text} is not in (0, 1000]")
    return value


def parse_args(argv: list[str] | None) -> tuple[argparse.Namespace, Plan]:
    plan_default = functools.partial(plan_defaults, Plan(), QUICK)
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "revive",
                        help="experiment folder")
    parser.add_argument("--quick", action="store_true",
                        help="the whole pipeline at toy sizes, in a few minutes")
    parser.add_argument("--resume", action="store_true",
                        help="continue an experiment in --out; finished runs are kept")
    parser.add_argument("--merge", type=Path,
                        help="another sitting's results.json (its run folders may be gone): its "
                             "seeds join the results, and its finished branches are not run again")
    parser.add_argument("--report-only", action="store_true",
                        help="write the results from finished runs (and --merge) without running "
                             "anything")
    parser.add_argument("--model",
                        help="starting policy (default: the tiny model warmed up on the graded "
                             "task)")
    # Plan fields a flag may override (default: the plan's, full or --quick)
    parser.add_argument("--advantage", choices=list(update.ADVANTAGES),
                        help="advantage estimator of every run, stage 1 and branches "
                             + plan_default("advantage"))
    parser.add_argument("--lr-scaling", choices=sorted(LR_SCALING),
                        help="a branch's lr at N: constant, the start's lr at every N; sqrt, "
                             "times sqrt(B / B0), the paper's rule " + plan_default("lr_scaling"))
    parser.add_argument("--budget-steps", type=count_in(1, 10**6),
                        help="samples every branch generates, in stage-1 steps' worth "
                             + plan_default("budget_steps"))
    parser.add_argument("--max-decays", type=count_in(0, 100),
                        help="most times stage 1 goes on at a lower lr after a probe at it lifts "
                             "the plateau " + plan_default("max_decays"))
    parser.add_argument("--seeds", type=int, nargs="+",
                        help="seeds of the branches, each branch run once per seed (stage 1 is "
                             "run once) " + plan_default("seeds"))
    parser.add_argument("--starts", nargs="+", choices=STARTS,
                        help="where the branches start: plateau, stage 1's branch point (runs "
                             "stage 1); start, the warmed model before it "
                             + plan_default("starts"))
    parser.add_argument("--lr-multipliers", type=lr_multiplier, nargs="+",
                        help="every branch runs at each lr m x η: η is stage 1's last lr (from the "
                             "plateau) or η0, stage 1's first (from the start) "
                             + plan_default("lr_multipliers"))
    args = parser.parse_args(argv)
    overrides = {field: getattr(args, field) for field in
                 ("advantage", "lr_scaling", "budget_steps", "max_decays", "seeds", "starts",
                  "lr_multipliers")
                 if getattr(args, field) is not None}
    overrides.update({field: tuple(overrides[field])
                      for field in ("seeds", "starts", "lr_multipliers") if field in overrides})
    return args, dataclasses.replace(QUICK if args.quick else Plan(), **overrides)


def main(argv: list[str] | None = None) -> None:
    """Stage 1 if a start needs it, then this sitting's branch runs, then the results (rewritten
    after each finished run too)."""
    args, plan = parse_args(argv)
    try:
        holds_runs = any((args.out / name).exists() for name in ("stage1", "branches"))
        if holds_runs and not (args.resume or args.report_only):
            raise InputError(f"{args.out} already holds an experiment: pass --resume to continue "
                             "it, or another --out")
        # a report only needs the warmed model's name (what --merge compares), not its weights
        warmed = tiny_model_path if args.report_only else ensure_tiny_model
        model = args.model or str(warmed(spec=GRADED_WARMUP, train_data=TRAIN_DATA))
        earlier = read_results(args.merge) if args.merge else None
        if earlier is not None:
            check_merge(earlier, plan, model)
        ours, kept = args.out / "results.json", None
        if holds_runs and ours.is_file():  # its finished runs would be reported under this plan
            kept = read_results(ours)
            check_merge(kept, plan, model, source=f"{ours} (pass the flags it was run with)")
        # seeds an earlier sitting merged in, their folders elsewhere or gone, stay in the results
        reported = earlier or kept
        start_time = time.time()
        stage1_result = branch_point(plan, args.out, model, earlier, args.report_only)
        args.out.mkdir(parents=True, exist_ok=True)
        jobs = [] if args.report_only else branch_jobs(plan, args.out, stage1_result, earlier,
                                                       args.merge)
        for job in jobs:
            shape, seed = job["shape"], job["seed"]
            label = (f"from the {job['start']}: {shape['name']} x {shape['prompts_per_step']} "
                     f"prompts, {shape['steps']} steps, lr {shape['lr']:.3g}, seed {seed}")
            if job["skip"]:
                print(f"[revive] {label}: {job['skip']}")
                continue
            check_seed_origin(earlier, args.out, job["start"], seed, run_origin(model))
            print(f"[revive] {label}", flush=True)
            began = time.time()
            run_branch(plan, model, job["checkpoint"], job["run_dir"], shape, seed)
            print(f"[revive] {label}: took {time.time() - began:.0f}s, pass@1 "
                  f"{seed_summary(job['run_dir'], shape)['eval_pass1'][-1]:.3f}", flush=True)
            write_results(folder_results(plan, args.out, model, stage1_result, reported,
                                         args.quick), args.out)
        results = folder_results(plan, args.out, model, stage1_result, reported, args.quick)
        results["wall_s"] = time.time() - start_time  # this invocation's
        write_results(results, args.out)
    except InputError as e:
        sys.exit(f"error: {e}")
    print(f"done in {results['wall_s']:.0f}s: {args.out / 'results.json'}, "
          f"{args.out / 'frontier.png'}")


if __name__ == "__main__":
    main()
