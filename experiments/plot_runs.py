"""Plot the curves of one or more train_brorl.py runs side by side, from their metrics.jsonl.

Three panels against rollout compute (samples generated so far): held-out pass@1 (the eval rows),
the mean reward of each step's samples, and the dynamic-sampling pass rate (the fraction of
groups with some but not all of their N rollouts correct, arXiv 2510.01180 Sec. 4.3). Each run is
labelled by its own config.json: N x prompts per step. Compute, not steps, is the x axis because
runs with different N x prompts spend different samples per step.

    python experiments/plot_runs.py runs/demo runs/demo-n16 --out docs/default_run.png
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tasks import InputError, read_jsonl  # noqa: E402


def read_run(run_dir: Path) -> tuple[str, list[dict], int]:
    """The run's label, its metrics rows and its samples per step."""
    config_path, metrics_path = run_dir / "config.json", run_dir / "metrics.jsonl"
    for path in (config_path, metrics_path):
        if not path.is_file():
            raise InputError(f"{run_dir} is not a train_brorl.py run folder: "
                             f"{path.name} is missing")
    config = json.loads(config_path.read_text())
    rows = [row for _, row in read_jsonl(metrics_path)]
    samples_per_step = config["n_rollouts"] * config["prompts_per_step"]
    return (f"N={config['n_rollouts']} x {config['prompts_per_step']} prompts", rows,
            samples_per_step)


def plot_runs(run_dirs: list[Path], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    panels = (("eval_pass1", "held-out pass@1"),
              ("reward_mean", "mean reward of the step's samples"),
              ("pass_rate", "dynamic-sampling pass rate"))
    for run_dir in run_dirs:
        label, rows, samples_per_step = read_run(run_dir)
        for ax, (key, title) in zip(axes, panels):
            points = [(row["step"] * samples_per_step, row[key]) for row in rows if key in row]
            ax.plot(*zip(*points), marker="o" if key == "eval_pass1" else None, label=label)
            ax.set(xlabel="samples generated", title=title)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path,
                        help="run folders (each with config.json and metrics.jsonl)")
    parser.add_argument("--out", type=Path, default=Path("runs.png"), help="the PNG to write")
    args = parser.parse_args()
    try:
        plot_runs(args.runs, args.out)
    except InputError as e:
        sys.exit(f"error: {e}")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
