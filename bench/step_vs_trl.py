"""A whole RL step (generate + score + update) at N=512, brorl vs TRL's GRPOTrainer, side by side.

Same model (the embedded tiny model), same precision (fp32 weights and compute: TRL's GRPOConfig
defaults to bf16=True, autocast even on a CPU, so it is turned off), same prompts, same response
length limit, same number of samples per step, same temperature and top-p, same clip range, no KL,
one optimizer step per RL step, no activation checkpointing, CPU; every setting is printed with the
result. brorl's step time is read from its own `metrics.jsonl` (`step_time`: generation, scoring,
the update and the shrinkage monitor); TRL's is the time between its `on_step_end` callbacks. The
first step of each is a warm-up and is dropped; the median of the rest is reported.

TRL is needed for this benchmark only (it is not a project dependency):

    pip install trl datasets
    python bench/step_vs_trl.py --steps 6
"""

# Both trainers, side by side; each row is passed to both (brorl flags, GRPOConfig fields) below.
SHARED_SETTINGS = {
    "precision": "fp32 weights, fp32 compute (TRL: bf16=False, fp16=False)",
    "temperature / top-p": "1.0 / 1.0",
    "clip ε_low / ε_high": "0.2 / 0.28",
    "KL β": "0",
    "learning rate": "1e-4, constant",
    "optimizer steps per RL step": "1",
    "activation checkpointing": "off",
}

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import reward  # noqa: E402
import train_brorl  # noqa: E402
from tasks import load_tasks  # noqa: E402
from tiny_model import ensure_tiny_model  # noqa: E402


def brorl_step_times(args, workdir: Path) -> list[float]:
    cfg = train_brorl.parse_config([
        "--n-rollouts", str(args.n), "--prompts-per-step", str(args.prompts),
        "--total-steps", str(args.steps),
        "--max-new-tokens", str(args.max_new_tokens), "--minibatches", "1",
        "--eval-every", "100000",
        "--mixed-precision", "no", "--temperature", "1.0", "--top-p", "1.0", "--eps-low", "0.2",
        "--eps-high", "0.28", "--kl-coef", "0", "--lr", "1e-4", "--no-gradient-checkpointing",
        "--eval-max-problems", "1", "--eval-samples", "1", "--output-dir", str(workdir / "brorl"),
    ])
    train_brorl.train(cfg)
    rows = [json.loads(line)
            for line in (workdir / "brorl" / "metrics.jsonl").read_text().splitlines()]
    return [r["step_time"] for r in rows if "step_time" in r]


def trl_step_times(args, workdir: Path) -> list[float]:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    path = str(ensure_tiny_model())
    tasks = load_tasks(Path(__file__).parent.parent / "data" / "arith_train.jsonl")[
        : args.prompts * args.steps]
    dataset = Dataset.from_list([{"prompt": t["prompt"], "answer": t["answer"]} for t in tasks])

    def arith_reward(prompts, completions, answer, **_):
        return [reward.score("arith", c, a) for c, a in zip(completions, answer)]

    stamps = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *_, **__):
            if not stamps:
                stamps.append(time.time())

        def on_step_end(self, *_, **__):
            stamps.append(time.time())

    config = GRPOConfig(
        output_dir=str(workdir / "trl"), use_cpu=True, report_to="none", save_strategy="no",
        logging_steps=1, max_steps=args.steps, num_generations=args.n,
        per_device_train_batch_size=args.n * args.prompts,
        steps_per_generation=1, gradient_accumulation_steps=1,
        max_completion_length=args.max_new_tokens,
        temperature=1.0, top_p=1.0, learning_rate=1e-4, lr_scheduler_type="constant", beta=0.0,
        epsilon=0.2, epsilon_high=0.28, shuffle_dataset=False, seed=0,
        # TRL defaults to bf16=True (autocast, also on CPU); brorl runs fp32
        bf16=False, fp16=False,
        gradient_checkpointing=False,  # TRL turns it on by default; brorl's default is off
    )
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=arith_reward, args=config,
                          train_dataset=dataset,
                          processing_class=AutoTokenizer.from_pretrained(path),
                          callbacks=[StepTimer()])
    trainer.train()
    return [b - a for a, b in zip(stamps, stamps[1:])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=512, help="rollouts per prompt")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--steps", type=int, default=6,
                        help="RL steps per trainer (the first is dropped)")
    parser.add_argument("--max-new-tokens", type=int, default=8, help="response length limit")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        times = {"brorl": brorl_step_times(args, Path(tmp)),
                 "TRL GRPOTrainer": trl_step_times(args, Path(tmp))}
    samples = args.n * args.prompts
    print(f"whole RL step, N={args.n} x {args.prompts} prompts = {samples} samples/step, "
          f"tiny model, CPU, {torch.get_num_threads()} threads, median of steps 2..{args.steps}")
    print("| setting (both trainers) | value |\n| --- | --- |")
    for name, value in {"rollouts N x prompts": f"{args.n} x {args.prompts}",
                        "max new tokens": str(args.max_new_tokens), **SHARED_SETTINGS}.items():
        print(f"| {name} | {value} |")
    print("| trainer | s/step | samples/s |\n| --- | --- | --- |")
    rates = {}
    for name, steps in times.items():
        median = statistics.median(steps[1:])
        rates[name] = samples / median
        print(f"| {name} | {median:.2f} | {rates[name]:.0f} |")
    print(f"brorl / TRL samples/s: {rates['brorl'] / rates['TRL GRPOTrainer']:.2f}x")


if __name__ == "__main__":
    main()
