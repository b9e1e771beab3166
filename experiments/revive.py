"""When does broadening pay? The paper's central result at laptop scale: a saturated ProRL run,
continued with wider sampling, fixed or allocated per prompt, at equal compute.

Hu et al., "BroRL", arXiv 2510.01180, Sec. 4 and Fig. 1: a policy trained with few rollouts per
prompt (ProRL, N=16) plateaus; continued from that checkpoint with many (BroRL, N=512) it keeps
improving at equal rollout compute. This script runs that experiment on the graded toy task
(data/make_graded_arith.py) by calling train_brorl.py's own `parse_config` and `train` (no second
training loop):

  stage 1  ProRL settings (N=16 x 512 prompts, lr 3e-4, 2 mini-batches) from the tiny model warmed
           up on the graded task (GRADED_WARMUP), `eval_every` steps at a time, until held-out
           pass@1 plateaus: the least-squares line through the last `plateau_evals` evals rises
           across them by less than one eval's 95% interval (see `plateaued`). A plateau at one lr
           can be that lr's noise floor, not saturation, so stage 1 anneals: a probe of
           `probe_steps` at lr / `lr_decay` from the plateau; if it lifts pass@1 beyond the noise,
           stage 1 goes on at that lr (the probe is its start), else the plateau's checkpoint is
           the branch point and the probe is reported with it.
  stage 2  branches with --init-from (weights AND AdamW state: restarting the optimizer cost a
           large-N continuation 15-25 points in its first step): N=16, 64, 256, 512 and the
           per-prompt allocation (train_brorl.py --allocation knapsack at ProRL's shape, N=16 on
           average over 512 prompts; knapsack16+history adds --allocation-history), each at every
           lr of `lr_multipliers` x the branch point's lr, for every seed; and the same branches
           from the start (the warmed model, at multiples of η0).

Equal rollout compute: every branch generates the same number of samples (`budget_steps` ProRL
steps' worth, 4x the first experiment's 40), evaluated `evals_per_branch` times along the way, so
one run per branch gives pass@1 against samples and `frontier` the best pass@1 reached at each
compute. Responses here are at most 8 tokens and about equally long across N, so samples are the
generation cost; generated tokens are logged beside them (compute_tokens). Prompts per step: equal
samples per step (B0 = 16 x 512) while that leaves at least 128 prompts, then 128 prompts (the
paper's BroRL batch, N=512 x 128: 8x ProRL's samples per step, so 1/8 of its steps). Learning rate:
η x m for each multiplier m, the same for every N (`--lr-scaling sqrt` scales it by sqrt(B / B0),
the paper's rule, Sec. 4.2; m = 3 is about that rule's 2.8 for BroRL's 8x batch). The number of
PPO mini-batches per step stays 2 for every N, as the paper keeps it. The estimator is the paper's,
REINFORCE++-baseline (`--advantage grpo` was the first experiment's). Nothing else differs between
branches; seeds set data order and sampling, and branches with the same seed see the same prompt
order.

Where the paper is silent, sized for 2 CPU cores (measured while choosing): the paper's ProRL starts
from a distilled model that already solves much of its data, and a 300-step warm-up (the default
model's) left the graded task at pass@1 0.02, where 80 ProRL steps only reached 0.10, still rising;
600 steps start it at 0.26 (levels 0-3: 45/47/10/2%). Evals use 16 samples per problem so that the
plateau rule's interval (about +/-0.015) is below the gains it must see. The rule's window is 8
evals (70 steps): with 5 it fired at step 110 on a pause (0.566 0.579 0.583 0.577 0.585), after
which ProRL gained 5 more points in 40 steps.

Shrinkage is measured on one probe set drawn by stage 1 at its step 0 and copied into every branch
(train_brorl.py --probe-prompts, the analog of Fig. 3 (ii)/(iii)).

    # the full experiment -> runs/revive/{results.json,frontier.png,revive_START_lrM.png}
    python experiments/revive.py
    # continue it in another sitting; finished runs are kept (results are written after each)
    python experiments/revive.py --resume
    # one seed, from the plateau only
    python experiments/revive.py --seeds 0 --starts plateau
    # one seed from the start only: stage 1 is not run (one in --out is continued or read)
    python experiments/revive.py --seeds 2 --starts start --out runs/start-seed2
    # ... joined with another sitting's results (its run folders gone), skipping what it ran
    python experiments/revive.py --seeds 2 --starts start --out runs/start-seed2 \
        --merge docs/broaden/results.json
    # only the results, from the finished runs and --merge
    python experiments/revive.py --report-only --out runs/start-seed2 \
        --merge docs/broaden/results.json
    # the whole pipeline in a few minutes
    python experiments/revive.py --quick --out /tmp/revive-quick
"""

import argparse
import dataclasses
import hashlib
import json
import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import monitor  # noqa: E402
import train_brorl  # noqa: E402
import update  # noqa: E402
from run import latest_checkpoint  # noqa: E402
from tasks import InputError, read_jsonl  # noqa: E402
from tiny_model import TinySpec, ensure_tiny_model, tiny_model_path  # noqa: E402

TRAIN_DATA, TEST_DATA = ROOT / "data" / "graded_train.jsonl", ROOT / "data" / "graded_test.jsonl"
HIST_BINS = monitor.CORRECT_FRACTION_BINS  # the bins of monitor.correct_fraction_histogram
# The starting policy: the tiny model with a longer supervised warm-up on the graded task than the
# default model's (see the docstring), cached under its own key like every tiny-model build.
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
    from a policy trained at `lr` (see the docstring)."""
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


def read_metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [row for _, row in read_jsonl(path)] if path.is_file() else []


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
    evals averages their noise, so a slow steady rise is seen as a rise; the rule's first version
    (best recent eval against the best before) fired on one eval's noise while the policy still
    gained a point per 10 steps."""
    if len(pass1) < max(window, 2):
        return False
    x, y = steps[-window:], pass1[-window:]
    x_mean, y_mean = sum(x) / len(x), sum(y) / len(y)
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
    mean = lambda values: sum(values) / len(values)
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


def pass1_by_level(run_dir: Path) -> dict[str, float]:
    """The run's final eval, pass@1 per difficulty level of the graded task (from its audit file):
    where the gains and losses are, easy levels the policy has saturated or hard ones it solves
    rarely."""
    levels = [task["level"] for _, task in read_jsonl(TEST_DATA)]
    rewards: dict[str, list[float]] = {}
    for _, row in read_jsonl(run_dir / "eval.samples.jsonl"):
        if "header" not in row:
            rewards.setdefault(str(levels[int(row["id"])]), []).append(row["reward"])
    return {level: sum(values) / len(values) for level, values in sorted(rewards.items())}


def branch_finished(run_dir: Path, steps: int) -> bool:
    evals = [r["step"] for r in read_metrics(run_dir) if "eval_pass1" in r]
    return (run_dir / "eval.json").is_file() and bool(evals) and evals[-1] == steps


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


def check_seed_origin(earlier: dict | None, out: Path, start: str, seed: int,
                      origin: dict) -> None:
    """A seed's branches are compared with each other, so they must begin alike: no branch runs
    where the seed's other runs, merged or in `out`, began from other weights or CPU kernels."""
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
    mean = lambda values: sum(values) / len(values) if values else float("nan")
    return {
        "origin": read_origin(run_dir),
        "compute": [r["step"] * shape["samples_per_step"] for r in evals],
        "compute_tokens": [tokens_by_step.get(r["step"], float("nan")) for r in evals],
        "eval_pass1": [r["eval_pass1"] for r in evals],
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
    return [sum(c[i] for c in curves) / len(curves)
            for i in range(min(map(len, curves), default=0))]


def branch_summary(shape: dict, per_seed: dict[int, dict]) -> dict:
    """Mean over seeds, with every seed's values kept (the spread is the point of several seeds)."""
    seeds = list(per_seed.values())
    seed_mean = lambda key: sum(s[key] for s in seeds) / len(seeds)
    seed_mean_per_key = lambda key: {k: sum(s[key][k] for s in seeds) / len(seeds)
                                     for k in seeds[0][key]}
    mean_curve = lambda key: mean_of_curves([s[key] for s in seeds])
    finals = {str(seed): s["eval_pass1"][-1] for seed, s in per_seed.items()}
    final_mean = sum(finals.values()) / len(finals)
    return {
        **shape,
        "compute": seeds[0]["compute"],
        "eval_pass1": mean_curve("eval_pass1"),
        "final_eval_pass1": {"mean": final_mean, "per_seed": finals,
                             "std": math.sqrt(sum((v - final_mean) ** 2
                                                  for v in finals.values()) / len(finals))},
        "pass_rate": seed_mean("pass_rate"),
        "n_per_prompt_max": seed_mean("n_per_prompt_max"),
        "probe_compute": seeds[0]["probe_compute"],
        "probe_improved_frac": mean_curve("probe_improved_frac"),
        "probe_worst_drop": mean_curve("probe_worst_drop"),
        "samples_per_s": seed_mean("samples_per_s"),
        "tokens_per_s": seed_mean("tokens_per_s"),
        "correct_frac_hist": seed_mean_per_key("correct_frac_hist"),
        "final_pass1_by_level": seed_mean_per_key("final_pass1_by_level"),
        "seeds": {str(seed): s for seed, s in per_seed.items()},
    }


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


def report(results: dict) -> str:
    """results.md: stage 1's stretches and probe, then per start every branch's pass@1 at the
    budget (seed mean ± std, each seed) at each lr multiplier, each branch minus ProRL's N seed by
    seed, and the frontier."""
    plan, stage1_result = results["plan"], results["stage1"]
    steps_worth = plan["stage1_n"] * plan["stage1_prompts"]  # samples of one stage-1 step
    lines = ["## Stage 1 (ProRL)", ""]
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
        step0 = [b["eval_pass1"][0] for b in branches.values()]
        lines += ["", f"## From the {start} (lr η = {found['lr']:.3g}; pass@1 at step 0, mean "
                  f"over branches: {sum(step0) / len(step0):.3f})", "",
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
        reference = f"N{plan['stage1_n']}"  # ProRL's shape
        lines += ["", f"Each branch minus {reference} at the same lr, seed by seed (a seed's "
                  "branches see the same prompts): the mean over the seeds both finished (each "
                  "seed):", "",
                  "| branch | " + " | ".join(f"lr {m:g}η" for m in multipliers) + " |",
                  "| --- " * (1 + len(multipliers)) + "|"]
        for name in [n for n in names if n != reference]:
            cells = []
            for m in multipliers:
                pair = [branches.get(branch_key(n, m)) for n in (name, reference)]
                mine, theirs = ({} if b is None else b["final_eval_pass1"]["per_seed"]
                                for b in pair)
                differences = {seed: mine[seed] - theirs[seed] for seed in mine if seed in theirs}
                cells.append("" if not differences else
                             f"{sum(differences.values()) / len(differences):+.3f} (" + " / ".join(
                                 f"s{seed} {d:+.3f}" for seed, d in differences.items()) + ")")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines += ["", "Frontier: the best pass@1 reached within each compute, mean over the seeds "
                  f"every branch has ({', '.join(found['frontier_seeds']) or 'none'}):", "",
                  "| samples (stage-1 steps' worth) | pass@1 | branch |", "| --- | --- | --- |"]
        lines += [f"| {p['compute'] / steps_worth:g} | {p['pass1']:.3f} | {p['branch']} |"
                  for p in found["frontier"]]
    return "\n".join(lines) + "\n"


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


def start_point(plan: Plan, stage1_result: dict | None, start: str) -> tuple[float, str | None]:
    """A start's base lr and the checkpoint its branches continue (None: the model itself)."""
    if start == "plateau":
        return stage1_result["lr"], stage1_result["checkpoint"]
    return plan.lr, None


def summarise(plan: Plan, out: Path, model: str, stage1_result: dict | None,
              earlier: dict | None = None) -> dict:
    """results.json from every finished branch run in `out`, whichever invocation ran it, and the
    seeds of `earlier` (another sitting's results.json, --merge, checked by `check_merge`) that
    `out` does not hold. Its `plan` is this invocation's but for the seeds, which are those
    found."""
    results = {"plan": dataclasses.asdict(plan), "model": model, "stage1": stage1_result,
               "starts": {}}
    for start in STARTS if stage1_result else ("start",):
        base_lr, _ = start_point(plan, stage1_result, start)
        branches = {}
        for multiplier in plan.lr_multipliers:
            for shape in branch_shapes(plan, base_lr * multiplier):
                key = branch_key(shape["name"], multiplier)
                per_seed = merged_seeds(earlier, start, key, shape)
                per_seed.update({seed: seed_summary(run_dir, shape)
                                 for seed in branch_seeds(out, start, shape)
                                 if branch_finished(run_dir := branch_dir(out, start, shape, seed),
                                                    shape["steps"])})
                if per_seed:
                    branches[key] = {**branch_summary(shape, dict(sorted(per_seed.items()))),
                                     "lr_multiplier": multiplier}
        if branches:
            seeds, curves = shared_seed_curves(branches)
            results["starts"][start] = {"lr": base_lr, "branches": branches,
                                        "frontier": frontier(curves), "frontier_seeds": seeds}
    results["plan"]["seeds"] = sorted({int(seed) for found in results["starts"].values()
                                       for b in found["branches"].values() for seed in b["seeds"]})
    return results


def check_merge(earlier: object, plan: Plan, model: str) -> None:
    """Another sitting's results join this one's only if they are of the same experiment: the same
    warmed model (by its cache name: the spec and data it was built from) and the same plan but for
    what a sitting chooses to run (seeds, starts, lr multipliers)."""
    if not isinstance(earlier, dict) or not {"plan", "model", "stage1", "starts"} <= set(earlier):
        raise InputError("--merge: not a results.json of this experiment (it needs plan, model, "
                         "stage1 and starts)")
    if Path(earlier["model"]).name != Path(model).name:
        raise InputError(f"--merge: its runs started from {earlier['model']}, this one from "
                         f"{model}")
    ours = json.loads(json.dumps(dataclasses.asdict(plan)))
    differs = sorted(field for field, value in ours.items()
                     if field not in ("seeds", "starts", "lr_multipliers")
                     and earlier["plan"].get(field) != value)
    if differs:
        raise InputError(f"--merge: its plan differs from this one in {', '.join(differs)}")


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


def main() -> None:
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
    parser.add_argument("--advantage", choices=list(update.ADVANTAGES), help="Plan.advantage")
    parser.add_argument("--lr-scaling", choices=sorted(LR_SCALING), help="Plan.lr_scaling")
    parser.add_argument("--budget-steps", type=int, help="Plan.budget_steps")
    parser.add_argument("--max-decays", type=int, help="Plan.max_decays")
    parser.add_argument("--seeds", type=int, nargs="+", help="Plan.seeds")
    parser.add_argument("--starts", nargs="+", choices=STARTS, help="Plan.starts")
    parser.add_argument("--lr-multipliers", type=float, nargs="+", help="Plan.lr_multipliers")
    args = parser.parse_args()
    overrides = {field: getattr(args, field) for field in
                 ("advantage", "lr_scaling", "budget_steps", "max_decays", "seeds", "starts",
                  "lr_multipliers")
                 if getattr(args, field) is not None}
    overrides.update({field: tuple(overrides[field])
                      for field in ("seeds", "starts", "lr_multipliers") if field in overrides})
    plan = dataclasses.replace(QUICK if args.quick else Plan(), **overrides)
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
        start_time = time.time()
        # only the plateau's branches need stage 1 (about 40 minutes); one in --out is continued or
        # read, a merged one is taken as it is
        known_stage1 = earlier["stage1"] if earlier else None
        if known_stage1 and (args.out / "stage1").exists():
            raise InputError(f"--merge: both it and {args.out} hold a stage 1; branches from two "
                             "branch points are not one experiment")
        if args.report_only:
            args.out.mkdir(parents=True, exist_ok=True)
            stage1_result = known_stage1 or (read_results(args.out / "results.json")["stage1"]
                                             if (args.out / "results.json").is_file() else None)
        elif (args.out / "stage1").exists() or ("plateau" in plan.starts and not known_stage1):
            stage1_result = stage1(plan, model, args.out, seed=plan.stage1_seed)
        else:
            stage1_result = known_stage1
        # seed by seed: one seed of every branch first
        for seed in plan.seeds if not args.report_only else ():
            for start in plan.starts:
                base_lr, checkpoint = start_point(plan, stage1_result, start)
                for multiplier in plan.lr_multipliers:
                    for shape in branch_shapes(plan, base_lr * multiplier):
                        run_dir = branch_dir(args.out, start, shape, seed)
                        label = (f"from the {start}: {shape['name']} x "
                                 f"{shape['prompts_per_step']} prompts, {shape['steps']} steps, "
                                 f"lr {shape['lr']:.3g}, seed {seed}")
                        if branch_finished(run_dir, shape["steps"]):
                            print(f"[revive] {label}: finished earlier, kept")
                            continue
                        if seed in merged_seeds(earlier, start,
                                                branch_key(shape["name"], multiplier), shape):
                            print(f"[revive] {label}: in {args.merge}, kept")
                            continue
                        check_seed_origin(earlier, args.out, start, seed, run_origin(model))
                        print(f"[revive] {label}", flush=True)
                        branch_start = time.time()
                        run_branch(plan, model, checkpoint, run_dir, shape, seed)
                        print(f"[revive] {label}: took {time.time() - branch_start:.0f}s, pass@1 "
                              f"{seed_summary(run_dir, shape)['eval_pass1'][-1]:.3f}", flush=True)
                        write_results(summarise(plan, args.out, model, stage1_result, earlier),
                                      args.out)
        results = summarise(plan, args.out, model, stage1_result, earlier)
        results["wall_s"] = time.time() - start_time  # this invocation's
        write_results(results, args.out)
    except InputError as e:
        sys.exit(f"error: {e}")
    print(f"done in {results['wall_s']:.0f}s: {args.out / 'results.json'}, "
          f"{args.out / 'frontier.png'}")


def read_results(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(f"cannot read results from {path}: {e}") from None


def write_results(results: dict, out: Path) -> None:
    """results.json, results.md, frontier.png and, per start and lr, the branches'
    revive_START_lrM.png."""
    (out / "results.json").write_text(json.dumps(results, indent=2))
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


if __name__ == "__main__":
    main()
