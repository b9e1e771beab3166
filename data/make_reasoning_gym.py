"""Generate Reasoning Gym tasks offline into data/rg_{train,test}.jsonl (reasoning-gym package,
seeded).

BroRL trains and evaluates on Reasoning Gym (arXiv 2510.01180, Sec. 5) but does not list its
tasks; this is a documented set of 17 tasks from 11 of the package's categories, chosen because they
generate quickly and their scorers grade exact answers:

    algebra      simple_equations, polynomial_multiplication
    algorithmic  word_sorting, spell_backward
    arc          arc_1d
    arithmetic   basic_arithmetic, gcd
    code         bf
    cognition    number_sequence
    games        countdown, mini_sudoku
    geometry     simple_geometry
    graphs       shortest_path, largest_island
    induction    list_functions
    logic        knights_knaves, syllogism

Left out: game_of_life_halting (its scorer rewards any non-empty answer; reward.py overrides it),
knight_swap (seconds per item to generate), propositional_logic (no gold answer: its scorer accepts
any formula the premises imply, so restating a premise scores 1.0; reward.py refuses it). Each line
is one task record:

    {"task": "reasoning_gym", "prompt": question + answer-format instruction,
     "answer": {"dataset": name, "entry": the package's entry}, "category": ...,
     "id": "name/split/index"}

The train and test splits use different seeds. Every entry is checked after its JSON round trip:
the gold answer must score 1 with the package's own scorer, and every entry must have one.

    # rewrite the shipped files (deterministic)
    python data/make_reasoning_gym.py
    python data/make_reasoning_gym.py --train 500 --test 100 --out-dir /tmp/rg
"""

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import REASONING_GYM_TASKS as TASKS  # noqa: E402  the one list of tasks

INSTRUCTION = ("\n\nThink step by step, then give only the final answer inside <answer></answer> "
               "tags, in the format the question asks for.")
SPLIT_SEEDS = {"train": 1, "test": 2}


def make_split(split: str, per_task: int) -> list[dict]:
    import reasoning_gym

    rows = []
    for name, category in TASKS.items():
        dataset = reasoning_gym.create_dataset(name, size=per_task, seed=SPLIT_SEEDS[split])
        for index, entry in enumerate(dataset):
            entry = json.loads(json.dumps(entry))  # what the jsonl will hold
            if entry["answer"] is None or dataset.score_answer(entry["answer"], entry) != 1.0:
                sys.exit(f"{name}: entry {index} has no gold answer, or it does not score 1 after "
                         "a JSON round trip")
            rows.append({"task": "reasoning_gym", "prompt": entry["question"] + INSTRUCTION,
                         "answer": {"dataset": name, "entry": entry}, "category": category,
                         "id": f"{name}/{split}/{index}"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=int, default=40, help="train items per task")
    parser.add_argument("--test", type=int, default=10, help="test items per task")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent,
                        help="where to write the jsonl files")
    args = parser.parse_args()
    for split, per_task in (("train", args.train), ("test", args.test)):
        rows = make_split(split, per_task)
        path = args.out_dir / f"rg_{split}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        print(f"{path}: {len(rows)} tasks")


if __name__ == "__main__":
    main()
