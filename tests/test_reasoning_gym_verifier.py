"""Reasoning Gym, arith and exact: answers as models write them, and agreement with reasoning-gym's
own graders.

The differential test generates entries with reasoning-gym itself (seeded), writes each gold answer
in the formats models use and a set of wrong answers built from it, and scores every response with
this project's verifier (reward.score_batch) and with the package's pipeline (its `extract_answer`
on the response, then the dataset's `score_answer`, a reward of 1 at exactly 1.0). Any disagreement
must be one of INTENTIONAL_DIFFERENCES, the list docs/verifiers.md gives ("Where the verifiers
differ from the official graders, on purpose").
"""

import json
import re
from collections import Counter
from dataclasses import dataclass

import pytest

import benchmarks
import reward


# ---- the differential test -----------------------------------------------------------------------

def correct_forms(gold: str) -> dict[str, str]:
    """The gold answer as models write it: format name -> the text inside <answer></answer>."""
    forms = {"gold": gold, "spaces around": f"  {gold} \n", "bold": f"**{gold}**",
             "dollars": f"${gold}$", "boxed": f"\\boxed{{{gold}}}", "text macro":
             f"\\text{{{gold}}}", "answer lead": f"The answer is {gold}.",
             "bold answer lead": f"**Answer:** {gold}", "lower case": gold.lower(),
             "upper case": gold.upper(), "capitalised": gold.capitalize(),
             "double spaces": gold.replace(" ", "  "), "tight commas": gold.replace(", ", ","),
             "lines as spaces": gold.replace("\n", " ")}
    if re.fullmatch(r"-?[0-9]+", gold):
        forms |= {"float": f"{gold}.0", "plus sign": f"+{gold}" if gold[0] != "-" else gold}
    roles = re.findall(r"(\w+) is an? (\w+)", gold)
    if roles:  # knights and knaves
        forms |= {"name: role": ", ".join(f"{name}: {role}" for name, role in roles),
                  "name - role": "; ".join(f"{name} - {role}" for name, role in roles)}
    return forms


def wrong_forms(gold: str, entry: dict) -> dict[str, str]:
    """Wrong answers built from the gold: perturbed, padded, hedged, empty."""
    digits = [i for i, c in enumerate(gold) if c.isdigit()]
    letters = [i for i, c in enumerate(gold) if c.isalpha()]
    forms = {"empty": "", "junk": "banana", "gold plus a word": f"{gold} extra",
             "gold plus a list item": f"{gold}, extra", "gold twice": f"{gold} {gold}",
             "truncated": gold[:-1]}
    if digits:
        i = digits[-1]
        forms["last digit changed"] = gold[:i] + str((int(gold[i]) + 1) % 10) + gold[i + 1:]
    if letters:
        i = letters[-1]
        forms["last letter changed"] = gold[:i] + ("b" if gold[i] in "aA" else "a") + gold[i + 1:]
    tokens = re.split(r"(\s+|,\s*)", gold)
    if len(set(tokens[::2])) > 1:
        forms["tokens reversed"] = "".join(tokens[::-1])
    changed = forms.get("last digit changed") or forms.get("last letter changed")
    if changed:
        forms["hedge"] = f"{gold} or {changed}"
    if entry["metadata"].get("source_dataset") == "countdown":
        forms |= countdown_attacks(entry)
    return forms


def countdown_attacks(entry: dict) -> dict[str, str]:
    """Answers to a Countdown task that reach the target without solving it."""
    numbers, target = entry["metadata"]["numbers"], entry["metadata"]["target"]
    gap, total = target - sum(numbers), " + ".join(map(str, numbers))
    step = "-~" if gap > 0 else "~-"  # -~x is x + 1 and ~-x is x - 1: a 1 written with no digit
    return {"sum moved by unary operators": step * abs(gap) + f"({total})",
            "gold with a double minus": f"-(-({entry['answer']}))",
            "gold with a unary plus": f"+({entry['answer']})",
            "gold to a power that uses a number twice":
                f"({entry['answer']})**({numbers[0]}/{numbers[0]})",
            "gold with an equals sign": f"{entry['answer']} = {target}"}


@dataclass(frozen=True)
class Difference:
    """A disagreement with the package's grader that is intended: on `datasets` (None: all), for
    answers written in one of `formats`, this project's reward is `reward`."""

    name: str
    datasets: frozenset | None
    formats: frozenset
    reward: float


WRAPPERS = frozenset({"spaces around", "bold", "dollars", "boxed", "text macro", "answer lead",
                      "bold answer lead"})
INTENTIONAL_DIFFERENCES = [
    Difference("formatting around the whole answer is not part of it (unwrap_answer)", None,
               WRAPPERS, 1.0),
    Difference("numbers are compared by value", frozenset({
        "basic_arithmetic", "gcd", "simple_equations", "simple_geometry", "largest_island",
        "number_sequence"}), frozenset({"float", "plus sign"}), 1.0),
    Difference("yes/no and directions in any case", frozenset({"syllogism", "shortest_path"}),
               frozenset({"lower case", "upper case", "capitalised"}), 1.0),
    Difference("any spacing between the tokens of a line", frozenset({
        "arc_1d", "shortest_path", "mini_sudoku"}), frozenset({"double spaces"}), 1.0),
    Difference("a list of integers spaced any way", frozenset({"list_functions"}),
               frozenset({"tight commas"}), 1.0),
    Difference("knights and knaves: any punctuation between a name and its role",
               frozenset({"knights_knaves"}), frozenset({"name: role", "name - role"}), 1.0),
    Difference("word_sorting: the package's partial credit is 1.0 for the list plus more words",
               frozenset({"word_sorting"}), frozenset({"gold plus a list item"}), 0.0),
    Difference("polynomial_multiplication: `a or b` is Python's `or` to the package's parse_expr,"
               " which is a: a hedge scores 1.0 there", frozenset({"polynomial_multiplication"}),
               frozenset({"hedge"}), 0.0),
    Difference("countdown: the task's grammar only (+ - * /, brackets, the given numbers)",
               frozenset({"countdown"}), frozenset({
                   "sum moved by unary operators", "gold with a double minus",
                   "gold with a unary plus"}), 0.0),
]


def intended(dataset: str, form: str, our_reward: float) -> Difference | None:
    for difference in INTENTIONAL_DIFFERENCES:
        if (difference.datasets is None or dataset in difference.datasets) and \
                form in difference.formats and difference.reward == our_reward:
            return difference
    return None


def rg_entries(dataset: str, size: int, seed: int) -> list[dict]:
    import reasoning_gym

    return [json.loads(json.dumps(entry))  # as the task files hold them
            for entry in reasoning_gym.create_dataset(dataset, size=size, seed=seed)]


def official_reward(dataset: str, response: str, entry: dict) -> float:
    from reasoning_gym import get_score_answer_fn
    from reasoning_gym.utils import extract_answer

    score = get_score_answer_fn(dataset)(extract_answer(response), entry)
    return float(score == 1.0)


def compare_with_reasoning_gym(entries_per_dataset: int, seed: int) -> dict[str, Counter]:
    """Per dataset: how many responses agree, disagree on purpose (by Difference name) or not."""
    cases = []
    for dataset in benchmarks.REASONING_GYM_TASKS:
        for entry in rg_entries(dataset, entries_per_dataset, seed):
            gold = entry["answer"]
            forms = correct_forms(gold) | wrong_forms(gold, entry)
            for form, text in forms.items():
                cases.append((dataset, form, f"thinking...\n<answer>{text}</answer>", entry))
    ours = reward.score_batch([("reasoning_gym", response, {"dataset": dataset, "entry": entry})
                               for dataset, _, response, entry in cases], workers=2)
    outcomes: dict[str, Counter] = {}
    for (dataset, form, response, entry), our_reward in zip(cases, ours):
        theirs = official_reward(dataset, response, entry)
        difference = intended(dataset, form, our_reward)
        outcome = "agree" if our_reward == theirs else \
            difference.name if difference else f"UNEXPECTED: {form!r} ours {our_reward} " \
                                               f"theirs {theirs}: {response[-200:]!r}"
        outcomes.setdefault(dataset, Counter())[outcome] += 1
    return outcomes


def report(outcomes: dict[str, Counter]) -> str:
    lines = []
    for dataset, counts in outcomes.items():
        total = sum(counts.values())
        lines.append(f"{dataset}: {counts['agree']}/{total} agree; "
                     + "; ".join(f"{n} {name}" for name, n in counts.items() if name != "agree"))
    return "\n".join(lines)


def assert_only_intended_differences(outcomes: dict[str, Counter]) -> None:
    unexpected = [name for counts in outcomes.values() for name in counts
                  if name.startswith("UNEXPECTED")]
    assert not unexpected, "\n".join(unexpected[:20]) + "\n" + report(outcomes)


def test_reasoning_gym_verifier_agrees_with_the_package_except_where_intended():
    outcomes = compare_with_reasoning_gym(entries_per_dataset=2, seed=11)
    assert_only_intended_differences(outcomes)
    print(report(outcomes))


@pytest.mark.slow
def test_reasoning_gym_verifier_agrees_with_the_package_except_where_intended_at_scale():
    outcomes = compare_with_reasoning_gym(entries_per_dataset=30, seed=12)
    assert_only_intended_differences(outcomes)
    print(report(outcomes))
