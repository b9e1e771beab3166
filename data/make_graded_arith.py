"""Generate the graded-difficulty toy task for experiments/revive.py:
data/graded_{train,test}.jsonl.

Same schema and answer format as data/make_arith.py ({"prompt", "answer", "task": "arith"}, answered
as `\\boxed{N}`), but the problems come in four difficulty levels, in equal shares:

    level 0  2-digit + 1-digit        "47+5=" (either order)
    level 1  2-digit + 2-digit        "47+38="
    level 2  3-digit + 3-digit        "472+389="
    level 3  three 2-digit terms      "47+38+91="

Why graded (arXiv 2510.01180, Sec. 2-3): BroRL's argument is a mass balance over the correct tokens.
With N rollouts per prompt, prompts the policy solves almost always give groups that are all correct
(no signal, and under dynamic sampling dropped), and prompts it solves only rarely give groups that
are all wrong at small N: their rare correct answers are never sampled, so the update cannot push
them up and the unsampled correct mass may shrink. Large N samples those rare successes and turns
the group informative. The plain 2-digit task has almost no prompts in either tail (pass rate 99.7%
at N=256); this family keeps easy levels that a warmed-up policy saturates and hard levels (carries
across three digits, a third term) it solves at a low rate, which is the regime the paper describes.

    python data/make_graded_arith.py                     # rewrite the shipped files (deterministic)
    python data/make_graded_arith.py --train 4000 --test 256 --seed 1 --out-dir /tmp/graded
"""

import argparse
import random
from pathlib import Path

from make_arith import distinct_problems, write_jsonl  # data/, beside this script

# level 0 has 2 x 90 x 10 = 1,800 distinct problems; stay clear of exhausting it
MAX_PROBLEMS = 4 * 1600
LEVELS = ("2+1 digits", "2+2 digits", "3+3 digits", "2+2+2 digits")


def make_problem(level: int, rng: random.Random) -> dict:
    if level == 0:
        terms = [rng.randrange(10, 100), rng.randrange(10)]
        rng.shuffle(terms)
    elif level == 1:
        terms = [rng.randrange(10, 100), rng.randrange(10, 100)]
    elif level == 2:
        terms = [rng.randrange(100, 1000), rng.randrange(100, 1000)]
    else:
        terms = [rng.randrange(10, 100) for _ in range(3)]
    return {"prompt": "+".join(map(str, terms)) + "=", "answer": str(sum(terms)), "task": "arith",
            "level": level}


def make_problems(count: int, seed: int) -> list[dict]:
    """`count` distinct problems, levels in equal shares and interleaved, in a seeded order."""
    return distinct_problems(make_problem, len(LEVELS), count, seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=int, default=4096, help="number of training problems")
    parser.add_argument("--test", type=int, default=256, help="number of held-out test problems")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent,
                        help="output directory")
    args = parser.parse_args()
    if args.out_dir.exists() and not args.out_dir.is_dir():
        parser.error(f"--out-dir is a file, not a folder: {args.out_dir}")
    if not 0 < args.train + args.test <= MAX_PROBLEMS:
        parser.error(f"--train + --test must be in [1, {MAX_PROBLEMS}] (level 0 has 1,800 distinct "
                     "problems)")
    problems = make_problems(args.train + args.test, args.seed)
    test = problems[: args.test]
    write_jsonl(args.out_dir / "graded_test.jsonl", test)
    write_jsonl(args.out_dir / "graded_train.jsonl", problems[args.test:])
    print(f"wrote {len(test)} test and {args.train} train problems to {args.out_dir}")


if __name__ == "__main__":
    main()
