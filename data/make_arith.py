"""Generate the toy verifiable task: integer arithmetic, written to data/arith_{train,test}.jsonl.

Each line is one task record in the project's schema, {"prompt", "answer", "task"}:

    {"prompt": "47+38=", "answer": "85", "task": "arith"}

The policy answers in the paper's format, `\\boxed{85}`, and reward.py checks the boxed integer.
Problems are a+b with a, b in [0, 99]; the train and test splits are disjoint. The task is
chosen so that a ~1M-parameter model learns it on a CPU in minutes: a short supervised warm-up gets
it part of the way (the analog of a saturated ProRL checkpoint) and RL has to do the rest.

    python data/make_arith.py                      # rewrite the shipped files (deterministic)
    python data/make_arith.py --train 2000 --seed 1 --out-dir /tmp/arith
"""

import argparse
import json
import random
from pathlib import Path


def make_problems(seed: int) -> list[dict]:
    """Every a+b problem with a, b in [0, 99], in a seeded random order."""
    problems = [{"prompt": f"{a}+{b}=", "answer": str(a + b), "task": "arith"} for a in range(100)
                for b in range(100)]
    random.Random(seed).shuffle(problems)
    return problems


def distinct_problems(make_problem, kinds: int, count: int, seed: int) -> list[dict]:
    """`count` problems of distinct prompts from `make_problem(kind, rng)`, the kinds (levels,
    tiers) in equal shares and interleaved, in a seeded order."""
    rng, seen, problems = random.Random(seed), set(), []
    while len(problems) < count:
        problem = make_problem(len(problems) % kinds, rng)
        if problem["prompt"] not in seen:  # distinct, so the train and test splits are disjoint
            seen.add(problem["prompt"])
            problems.append(problem)
    return problems


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=int, default=9744, help="number of training problems")
    parser.add_argument("--test", type=int, default=256, help="number of held-out test problems")
    parser.add_argument("--seed", type=int, default=0, help="shuffle seed")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent,
                        help="output directory")
    args = parser.parse_args()
    if args.out_dir.exists() and not args.out_dir.is_dir():
        parser.error(f"--out-dir is a file, not a folder: {args.out_dir}")
    problems = make_problems(args.seed)
    if not (1 <= args.train and 1 <= args.test and args.train + args.test <= len(problems)):
        parser.error(f"--train and --test must be >= 1, and at most {len(problems)} together")
    write_jsonl(args.out_dir / "arith_test.jsonl", problems[: args.test])
    write_jsonl(args.out_dir / "arith_train.jsonl", problems[args.test : args.test + args.train])
    print(f"wrote {args.test} test and {args.train} train problems to {args.out_dir}")


if __name__ == "__main__":
    main()
