"""Build the paper-style RL training mix (math, code, Reasoning Gym) in the project's jsonl schema.

BroRL continues ProRLv2's RL on its training blend (paper Sec. 3; ProRL v1 lists DeepScaleR for
math, Eurus-2-RL for code, SCP-116K for science, Reasoning Gym and Llama-Nemotron IFEval). This
script converts the three families reward.py verifies; science and IFEval need verifiers this
project does not have, and are left out (the closing table says so). Sources:

    math            agentica-org/DeepScaleR-Preview-Dataset (train): problem, answer, solution
    code            PRIME-RL/Eurus-2-RL-Data (train), verl's layout: prompt (chat messages),
                    ability ("math" | "code"), reward_model.ground_truth (for code, a JSON string
                    {"inputs": [...], "outputs": [...], optional "fn_name"}), data_source
    reasoning_gym   generated offline with fixed seeds (data/make_reasoning_gym.py's task set)

Each comes from the Hugging Face hub when online, or from a local jsonl in the source's own layout
(--math-file, --code-file). Rows whose ground truth reward.py cannot check are dropped and counted.
The mix is shuffled with a fixed seed and split into paper_mix_train.jsonl and paper_mix_val.jsonl
(the presets' --train-data / --test-data).

    python data/make_paper_mix.py   # from the hub
    python data/make_paper_mix.py --math-file deepscaler.jsonl --code-file eurus2.jsonl \\
        --rg-per-task 200
"""

import argparse
import random
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import benchmarks  # noqa: E402
import reward  # noqa: E402
import sandbox  # noqa: E402
from tasks import InputError, json_loads, read_jsonl  # noqa: E402
from make_reasoning_gym import make_split  # noqa: E402

MATH_HUB = ("agentica-org/DeepScaleR-Preview-Dataset", None, "train")
CODE_HUB = ("PRIME-RL/Eurus-2-RL-Data", None, "train")


def verl_code_record(row: dict, index: int) -> dict | None:
    """A verl-layout code row (Eurus-2-RL): the user turn as the question, tests from
    ground_truth."""
    if row.get("ability") != "code":
        return None
    question = next((m["content"] for m in row["prompt"] if m["role"] == "user"), None)
    try:
        tests = json_loads(row["reward_model"]["ground_truth"])
    except (ValueError, TypeError, KeyError):  # ValueError: not JSON, or an integer too long
        return None
    if question is None or not isinstance(tests, dict) or not tests.get("inputs"):
        return None
    return benchmarks.apps_record({"question": question, "input_output": sandbox.json_text(tests),
                                   "problem_id": f"{row.get('data_source', 'eurus')}/{index}"},
                                   index)


def rows_of(path: Path | None, hub: tuple) -> tuple[list[dict], str]:
    if path is not None:
        if not path.is_file():
            raise InputError(f"file not found: {path}")
        return [row for _, row in read_jsonl(path)], str(path)
    if not benchmarks.hub_reachable():
        raise InputError("no local file given and the Hugging Face hub is not reachable for "
                         f"{hub[0]}")
    return benchmarks.hub_rows(hub), hub[0]


def convert(rows: list[dict], to_record, family: str, dropped: Counter) -> list[dict]:
    records = []
    for index, row in enumerate(rows):
        try:
            record = to_record(row, index)
            if record is not None:
                reward.validate_answer(record["task"], record["answer"])
        except (KeyError, TypeError, ValueError):
            record = None
        if record is None:
            dropped[family] += 1
            continue
        records.append({**record, "id": f"{family}/{record['id']}", "source": family})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--math-file", type=Path,
                        help="DeepScaleR-layout jsonl (default: the hub dataset)")
    parser.add_argument("--code-file", type=Path,
                        help="Eurus-2-RL-layout (verl) jsonl (default: the hub dataset)")
    parser.add_argument("--rg-per-task", type=int, default=400,
                        help="Reasoning Gym items per task (17 tasks)")
    parser.add_argument("--max-per-family", type=int, default=0,
                        help="keep at most this many rows per family (0: all)")
    parser.add_argument("--val-size", type=int, default=512,
                        help="rows held out for paper_mix_val.jsonl")
    parser.add_argument("--seed", type=int, default=0, help="shuffle seed")
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).parent,
                        help="where to write the two files")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    dropped: Counter = Counter()
    try:
        math_rows, math_from = rows_of(args.math_file, MATH_HUB)
        code_rows, code_from = rows_of(args.code_file, CODE_HUB)
    except InputError as e:
        sys.exit(f"error: {e}")
    families = {
        "math": (convert(math_rows, benchmarks.math_record("problem", "answer"), "math", dropped),
                 math_from),
        "code": (convert(code_rows, verl_code_record, "code", dropped), code_from),
        "reasoning_gym": ([{**r, "source": "reasoning_gym"}
                           for r in make_split("train", args.rg_per_task)],
                          "reasoning-gym (seeded)"),
    }
    mix = []
    for family, (records, origin) in families.items():
        rng.shuffle(records)
        kept = records[: args.max_per_family] if args.max_per_family else records
        mix += kept
        print(f"{family:14s} {len(kept):7d} rows from {origin} ({dropped[family]} dropped: no "
              "checkable answer)")
    rng.shuffle(mix)
    val, train = mix[: args.val_size], mix[args.val_size:]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for name, rows in (("paper_mix_train.jsonl", train), ("paper_mix_val.jsonl", val)):
        (args.out_dir / name).write_text("".join(sandbox.json_text(row) + "\n" for row in rows))
        print(f"{args.out_dir / name}: {len(rows)} tasks")


if __name__ == "__main__":
    main()
