"""Generate the many-answers task: prompts with many correct answers each, all of them listed, and a
skewed prior over them: data/many_answers_{train,test}.jsonl.

Each line is one task record in the project's schema, with the verifier kind "any_of" (reward.py):

    {"prompt": "6|71..244=", "answer": {"any_of": ["72", "78", ..., "240"]}, "task": "any_of",
     "tier": 1, "prior": {"156": 0.050484, "234": 0.025242, ..., "179": 0.266667}}

`d|lo..hi=` asks for a number from lo to hi that d divides (lo two digits, 12 to 32 correct
answers), answered as `\\boxed{63}` like the arithmetic toy (the same characters, so the tiny
model's tokenizer reads it). The answer lists every correct answer, so coverage.py can sum the
policy's probability over them exactly.

`prior` is a starting policy's distribution over answers, the skew a warm-up on samples of it
gives a model: a share q of the mass on the correct answers, Zipf weights 1/(r+1) over them in a
seeded order (the model knows some answers well and most barely), and the rest on DISTRACTORS
near misses (numbers in the range that d does not divide). q sets the difficulty tier, and each
tier has divisors of its own, so that a model can tell a hard prompt from an easy one (a warm-up on
the prior then reaches it per tier, not only per prompt: docs/theory.md):

    tier 0  d in 3, 4, 5     q = 0.5      pass@16 about 1 from the start
    tier 1  d in 6, 7        q = 0.2
    tier 2  d in 8, 9        q = 0.05     pass@16 0.56
    tier 3  d in 11, 12, 13  q = 0.005    pass@64 0.27, pass@256 0.72: pass@64-256 can move

Why many answers (arXiv 2510.01180, Sec. 2): Theorem 1 and Fig. 3 (ii)/(iii) are about correct
outcomes a group of N samples misses. With one correct answer per prompt (the arithmetic toy) all
the correct mass sits on one string; under this prior a group of 16 misses answers holding 50% of
a prompt's correct mass in tier 0 and 99% in tier 3 (Σ p·(1−p)^16 over the correct answers, over
their mass), and answer diversity (expected distinct correct answers in k samples) can shrink
while pass@1 rises. Tiers are in equal shares and interleaved; the train and test prompts are
disjoint, and the prior covers both (what a model knows before RL; RL trains on the train split).

    python data/make_many_answers.py                     # rewrite the shipped files (deterministic)
    python data/make_many_answers.py --train 64 --test 16 --seed 1 --out-dir /tmp/many
"""

import argparse
import random
import re
from pathlib import Path

from make_arith import distinct_problems, write_jsonl  # data/, beside this script

TIER_CORRECT_SHARE = (0.5, 0.2, 0.05, 0.005)
# from 3, so that a correct answer's neighbours a ± 1 are near misses
TIER_DIVISORS = ((3, 4, 5), (6, 7), (8, 9), (11, 12, 13))
ANSWERS_PER_PROMPT = (12, 32)  # fewest and most correct answers of a prompt
DISTRACTORS = 3
# tiers 1 and 2 have 2 divisors x 90 starts x 21 counts = 3,780 distinct prompts each; stay clear
MAX_PROBLEMS = 4000
PROMPT = re.compile(r"([0-9]+)\|([0-9]+)\.\.([0-9]+)=\Z")


def correct_answers(prompt: str) -> list[int]:
    """Every number from lo to hi that d divides, for the prompt `d|lo..hi=`."""
    d, lo, hi = map(int, PROMPT.match(prompt).groups())
    return list(range(-(-lo // d) * d, hi + 1, d))


def make_problem(tier: int, rng: random.Random) -> dict:
    d, count = rng.choice(TIER_DIVISORS[tier]), rng.randint(*ANSWERS_PER_PROMPT)
    lo = rng.randint(10, 99)
    prompt = f"{d}|{lo}..{lo + d * count - 1}="  # d·count consecutive numbers: count multiples
    answers = correct_answers(prompt)
    preference = rng.sample(answers, len(answers))  # the prior's order, most likely first
    zipf = [1 / (rank + 1) for rank in range(len(answers))]
    share = TIER_CORRECT_SHARE[tier]
    prior = {str(a): share * w / sum(zipf) for a, w in zip(preference, zipf)}
    near_misses = [a + step for a in answers for step in (-1, 1)
                   if answers[0] <= a + step <= answers[-1]]
    for wrong in rng.sample(near_misses, DISTRACTORS):
        prior[str(wrong)] = (1 - share) / DISTRACTORS
    return {"prompt": prompt, "answer": {"any_of": [str(a) for a in answers]}, "task": "any_of",
            "tier": tier, "prior": {a: float(f"{p:.6g}") for a, p in prior.items()}}


def make_problems(count: int, seed: int) -> list[dict]:
    """`count` distinct problems, tiers in equal shares and interleaved, in a seeded order."""
    return distinct_problems(make_problem, len(TIER_CORRECT_SHARE), count, seed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=int, default=192, help="number of training prompts")
    parser.add_argument("--test", type=int, default=64, help="number of held-out test prompts")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent,
                        help="output directory")
    args = parser.parse_args()
    if args.out_dir.exists() and not args.out_dir.is_dir():
        parser.error(f"--out-dir is a file, not a folder: {args.out_dir}")
    if not (args.train >= 0 and args.test >= 0 and 0 < args.train + args.test <= MAX_PROBLEMS):
        parser.error(f"--train and --test must be >= 0, their sum in [1, {MAX_PROBLEMS}]")
    problems = make_problems(args.train + args.test, args.seed)
    write_jsonl(args.out_dir / "many_answers_test.jsonl", problems[: args.test])
    write_jsonl(args.out_dir / "many_answers_train.jsonl", problems[args.test:])
    print(f"wrote {args.test} test and {args.train} train prompts to {args.out_dir}")


if __name__ == "__main__":
    main()
