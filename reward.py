"""Verifiers: turn a model response into a reward, 1.0 for a correct final answer and 0.0 otherwise.

Self-contained (copy this file into another trainer): it imports nothing from this project.

    score(task, response, answer) -> float

`task` names the verifier:
- "arith": the toy task; the final answer must be the integer `answer`.
- "math": the final answer is compared with `answer` by math-verify (sympy-backed, so `\\frac{1}{2}`,
  `0.5` and `1/2` are the same answer).

The final answer is the content of the last `\\boxed{...}` (nested braces allowed: the paper's models
answer this way), or failing that the last explicit answer line ("Answer: ...", "final answer is
..."). A response with neither scores 0.

    python reward.py --task math --answer "\\frac{1}{2}" --response "so \\boxed{0.5}"
"""

import argparse
import re

ANSWER_LINE = re.compile(r"(?:final answer|answer)\s*(?:is|:|=)\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
INTEGER = re.compile(r"^[+-]?\d+$")


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None if there is none."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, begin = 1, i
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i]
        i += 1
    return None  # unclosed box: no answer


def extract_answer(response: str) -> str | None:
    """The final answer: the last box, else the last explicit answer line, else None."""
    boxed = last_boxed(response)
    if boxed is not None:
        return boxed.strip()
    lines = ANSWER_LINE.findall(response)
    return lines[-1].strip().rstrip(".") if lines else None


def check_arith(pred: str, answer: str) -> bool:
    pred = pred.replace(" ", "").replace(",", "")
    return bool(INTEGER.match(pred)) and int(pred) == int(answer)


def check_math(pred: str, answer: str) -> bool:
    from math_verify import parse, verify  # imported lazily: sympy is slow to import

    gold = parse(f"${answer}$")
    return bool(gold) and verify(gold, parse(f"${pred}$"))


CHECKERS = {"arith": check_arith, "math": check_math}


def score(task: str, response: str, answer: str) -> float:
    """Reward of one response: 1.0 if its final answer is correct for `task`, else 0.0."""
    if task not in CHECKERS:
        raise ValueError(f"unknown task '{task}' (known: {', '.join(sorted(CHECKERS))})")
    pred = extract_answer(response)
    return float(pred is not None and pred != "" and CHECKERS[task](pred, answer))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", required=True, choices=sorted(CHECKERS), help="verifier to use")
    parser.add_argument("--response", required=True, help="model response text")
    parser.add_argument("--answer", required=True, help="ground-truth answer")
    args = parser.parse_args()
    print(f"extracted: {extract_answer(args.response)!r}  reward: {score(args.task, args.response, args.answer)}")


if __name__ == "__main__":
    main()
