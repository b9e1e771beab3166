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
import time
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
    if entry["metadata"].get("source_dataset") == "knights_knaves":
        forms["a name given both roles"] = both_roles(gold)
    return forms


def both_roles(gold: str) -> str:
    """`Zoey is a knight knave, ...`: the gold with its first name given the other role too."""
    from reasoning_gym.logic.knights_knaves import KNIGHT_KNAVE_PAIRS

    first_role = re.search(r" is an? (\w+)", gold)
    pair = next(pair for pair in KNIGHT_KNAVE_PAIRS if f"a {first_role[1]}" in pair
                or f"an {first_role[1]}" in pair)
    other = next(role.split()[1] for role in pair if role.split()[1] != first_role[1])
    return gold[:first_role.end()] + f" {other}" + gold[first_role.end():]


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
               frozenset({"tight commas", "double spaces"}), 1.0),
    Difference("knights and knaves: any punctuation between a name and its role",
               frozenset({"knights_knaves"}), frozenset({"name: role", "name - role"}), 1.0),
    Difference("word_sorting: the package's partial credit is 1.0 for the list plus more words",
               frozenset({"word_sorting"}), frozenset({"gold plus a list item"}), 0.0),
    Difference("polynomial_multiplication: `a or b` is Python's `or` to the package's parse_expr,"
               " which is a: a hedge scores 1.0 there", frozenset({"polynomial_multiplication"}),
               frozenset({"hedge"}), 0.0),
    Difference("knights and knaves: a name given two roles is refused (the package reads the "
               "first)", frozenset({"knights_knaves"}), frozenset({"a name given both roles"}),
               0.0),
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
    """Per dataset: how many responses agree, disagree on purpose (by Difference name) or not (by
    format, with the last such response)."""
    cases = []
    for dataset in benchmarks.REASONING_GYM_TASKS:
        for entry in rg_entries(dataset, entries_per_dataset, seed):
            gold = entry["answer"]
            forms = correct_forms(gold) | wrong_forms(gold, entry)
            for form, text in forms.items():
                cases.append((dataset, form, f"thinking...\n<answer>{text}</answer>", entry))
    # with a training step's budget (600 s), every check scored: at scale (~12,000 checks of 510
    # golds) a slow sympy gold's checks outrun its 1/510 share and run again in what is left
    stats = reward.VerifyStats()
    ours = reward.score_batch([("reasoning_gym", response, {"dataset": dataset, "entry": entry})
                               for dataset, _, response, entry in cases], workers=2,
                              stats=stats)
    assert stats.over_budget == 0
    outcomes: dict[str, Counter] = {}
    for (dataset, form, response, entry), our_reward in zip(cases, ours):
        theirs = official_reward(dataset, response, entry)
        difference = intended(dataset, form, our_reward)
        outcome = "agree" if our_reward == theirs else difference.name if difference else \
            f"UNEXPECTED: {form!r}, ours {our_reward}, theirs {theirs} (e.g. {response[-120:]!r})"
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
    """No disagreement outside INTENTIONAL_DIFFERENCES, and every one of those seen (a listed
    difference the verifier no longer makes is a stale entry)."""
    seen = {name for counts in outcomes.values() for name in counts}
    unexpected = sorted(name for name in seen if name.startswith("UNEXPECTED"))
    assert not unexpected, "\n".join(unexpected[:20]) + "\n" + report(outcomes)
    assert {difference.name for difference in INTENTIONAL_DIFFERENCES} <= seen, report(outcomes)


def test_reasoning_gym_verifier_agrees_with_the_package_except_where_intended():
    outcomes = compare_with_reasoning_gym(entries_per_dataset=2, seed=16)
    assert_only_intended_differences(outcomes)
    print(report(outcomes))


@pytest.mark.slow
def test_reasoning_gym_verifier_agrees_with_the_package_except_where_intended_at_scale():
    outcomes = compare_with_reasoning_gym(entries_per_dataset=30, seed=1000)
    assert_only_intended_differences(outcomes)
    print(report(outcomes))


# ---- answers the red team found scored wrongly --------------------------------------------------

def rg_reward(dataset: str, answer: str, entry: dict) -> float:
    return reward.score("reasoning_gym", f"<answer>{answer}</answer>",
                        {"dataset": dataset, "entry": entry})


COUNTDOWNS = rg_entries("countdown", size=4, seed=3)


@pytest.mark.parametrize("entry", COUNTDOWNS, ids=lambda entry: entry["answer"])
def test_countdown_refuses_the_sum_of_the_numbers_moved_to_the_target_by_unary_operators(entry):
    numbers, target = entry["metadata"]["numbers"], entry["metadata"]["target"]
    gap, total = target - sum(numbers), " + ".join(map(str, numbers))
    step = "-~" if gap > 0 else "~-"  # x + 1 and x - 1, no digit written
    assert rg_reward("countdown", step * abs(gap) + f"({total})", entry) == 0.0
    assert rg_reward("countdown", f"-(-({entry['answer']}))", entry) == 0.0
    assert rg_reward("countdown", f" {entry['answer']}\n", entry) == 1.0


@pytest.mark.parametrize("template, reward_", [
    ("{gold}", 1.0), ("({gold})", 1.0), ("{spaced}", 1.0), ("$ {gold} $", 1.0),
    ("+({gold})", 0.0), ("-(-({gold}))", 0.0), ("~~({gold})", 0.0),  # unary operators
    ("({gold})**1", 0.0), ("({gold})//1", 0.0), ("({gold}) % 99999", 0.0),  # other operators
    ("({gold}) + 0.0", 0.0), ("({gold}) # comment", 0.0), ("({gold}) + E - E", 0.0),
    ("({gold}) + x - x", 0.0), ("abs({gold})", 0.0), ("{gold} = {target}", 0.0),
    ("{target}", 0.0), ("({gold}) + {first} - {first}", 0.0),  # a number used twice
])
def test_countdown_scores_exactly_the_tasks_grammar(template, reward_):
    """+ - * / and brackets over the given numbers, each once (a literal may be negated, as the
    package's own answers write `-1 + ...`); nothing else."""
    for entry in COUNTDOWNS:
        gold, metadata = entry["answer"], entry["metadata"]
        answer = template.format(gold=gold, spaced=gold.replace(" ", ""), target=metadata["target"],
                                 first=metadata["numbers"][0])
        assert rg_reward("countdown", answer, entry) == reward_, answer


@pytest.mark.parametrize("entry", rg_entries("word_sorting", size=4, seed=3),
                         ids=lambda entry: entry["answer"][:30])
def test_word_sorting_gives_no_credit_to_the_sorted_list_plus_more_words(entry):
    gold = entry["answer"]
    assert rg_reward("word_sorting", f"{gold}, zebra", entry) == 0.0  # the package: 1.0
    assert rg_reward("word_sorting", f"{gold}, {gold}", entry) == 0.0
    assert rg_reward("word_sorting", gold.replace(", ", ","), entry) == 1.0


@pytest.mark.parametrize("dataset, written, gold", [
    ("syllogism", "yes", "Yes"), ("syllogism", "NO", "No"),
    ("simple_geometry", "116.0", "116"), ("simple_geometry", "$116$", "116"),
    ("basic_arithmetic", "-12.00", "-12"), ("gcd", "**6**", "6"),
    ("basic_arithmetic", "\u221212", "-12"), ("basic_arithmetic", "1{,}085", "1085"),
    ("basic_arithmetic", "\\mathbf 7", "7"), ("gcd", "\\displaystyle 6", "6"),
    ("knights_knaves", "Zoey: knight, Riley: knave", "Zoey is a knight, and Riley is a knave."),
    ("knights_knaves", "**Zoey** - knave; **Riley** - knave",
     "Zoey is a knave, and Riley is a knave."),
    ("list_functions", "[1,2, 3]", "[1, 2, 3]"), ("arc_1d", "0  1\t0", "0 1 0"),
    ("shortest_path", "Up Right", "up right"),
])
def test_reasoning_gym_answers_in_the_formats_models_write_score_one(dataset, written, gold):
    entry = {"question": "?", "answer": gold, "metadata": {}}
    assert rg_reward(dataset, written, entry) == 1.0


@pytest.mark.parametrize("dataset, written, gold", [
    ("syllogism", "yes no", "Yes"), ("simple_geometry", "116.5", "116"),
    ("simple_geometry", "1160", "116"), ("gcd", "6 or 7", "6"),
    ("basic_arithmetic", "0,065", "65"), ("gcd", "0,065", "65"),
    ("knights_knaves", "Zoey: knave, Riley: knave", "Zoey is a knight, and Riley is a knave."),
    ("knights_knaves", "Zoey is a knight knave, and Riley is a knave",
     "Zoey is a knight, and Riley is a knave."),
    ("knights_knaves", "Zoey: knight/knave, Riley: knave",
     "Zoey is a knight, and Riley is a knave."),
    ("list_functions", "[1, 2]", "[1, 2, 3]"), ("shortest_path", "up", "up right"),
])
def test_reasoning_gym_formats_do_not_make_wrong_answers_right(dataset, written, gold):
    entry = {"question": "?", "answer": gold, "metadata": {}}
    assert rg_reward(dataset, written, entry) == 0.0


def arith_responses(value: int) -> dict[str, tuple[str, float]]:
    """A response per format: (response, its reward for the gold `value`)."""
    return {"box": (f"\\boxed{{{value}}}", 1.0), "bold answer lead": (f"**Answer:** {value}", 1.0),
            "answer lead in dollars": (f"The answer is ${value}$.", 1.0),
            "bold number": (f"Answer: **{value}**", 1.0), "float": (f"\\boxed{{{value}.0}}", 1.0),
            "boxed in dollars": (f"so $\\boxed{{{value}}}$", 1.0),
            "text in a box": (f"\\boxed{{\\text{{{value}}}}}", 1.0),
            "thousands": (f"\\boxed{{{value:,}}}", 1.0),
            "off by one": (f"**Answer:** {value + 1}", 0.0),
            "half": (f"The answer is ${value}.5$.", 0.0),
            "hedge": (f"The answer is ${value}$ or ${value + 1}$", 0.0),
            "two boxes": (f"\\boxed{{{value}}} \\boxed{{{value - 1}}}", 0.0),
            "no answer": (f"{value}", 0.0)}


@pytest.mark.parametrize("value", [0, 7, -12, 65, 1085, 10**20 + 3])
def test_arith_reads_the_formats_models_write(value):
    responses = arith_responses(value)
    rewards = reward.score_batch([("arith", response, str(value))
                                  for response, _ in responses.values()])
    assert dict(zip(responses, rewards)) == {form: r for form, (_, r) in responses.items()}


@pytest.mark.parametrize("gold", ["Paris", "Co", "New York", "x^2"])
def test_exact_reads_the_formats_models_write_and_keeps_case(gold):
    right = [f"\\boxed{{{gold}}}", f"\\boxed{{\\text{{{gold}}}}}", f"<answer>**{gold}**</answer>",
             f"<answer>The answer is {gold}.</answer>", f"<answer>${gold}$</answer>",
             f"\\boxed{{\\textbf{{{gold}}}}}"]
    wrong = [f"\\boxed{{\\text{{{gold.swapcase()}}}}}", f"<answer>**{gold}** or Lyon</answer>",
             f"\\boxed{{\\text{{{gold}}} \\text{{Lyon}}}}", f"<answer>${gold}$ and $Lyon$</answer>"]
    rewards = reward.score_batch([("exact", response, gold) for response in right + wrong])
    assert rewards == [1.0] * len(right) + [0.0] * len(wrong)


WRAPPINGS = ["{}", " {} ", "**{}**", "*{}*", "`{}`", "${}$", "$${}$$", "\\({}\\)", "\\[{}\\]",
             "\\text{{{}}}", "\\textbf{{{}}}", "\\boxed{{{}}}", "The answer is {}.",
             "The final answer is: {}", "**Answer:** {}", "Answer: **{}**", "**Answer: {}**",
             "$\\boxed{{\\text{{{}}}}}$."]


@pytest.mark.parametrize("content", ["65", "-1.5", "Paris", "New York", "_potage_, viva_",
                                     "x^{2}", "\\frac{1}{2}", "[1, 2]", "0 0 7\n1 2 3"])
def test_unwrap_answer_removes_the_formatting_around_an_answer_and_nothing_of_it(content):
    for wrapping in WRAPPINGS:
        assert reward.unwrap_answer(wrapping.format(content)) == content, wrapping
    for hedge in ["${0}$ or $1$", "\\text{{{0}}} \\text{{1}}", "**{0}** or **1**"]:
        assert reward.unwrap_answer(hedge.format(content)) != content


@pytest.mark.parametrize("answer", ["\\text{" * 40_000 + "}" * 40_000, "$" * 250_000,
                                    "*" * 250_000 + "x", "The " + " " * 250_000 + "answer",
                                    "1" + ",000" * 60_000 + "x", "**Answer:**" * 20_000])
def test_unwrapping_a_hostile_answer_costs_a_few_linear_passes(answer):
    start = time.perf_counter()
    reward.score_batch([("arith", f"\\boxed{{{answer}}}", "5"),
                        ("exact", f"<answer>{answer}</answer>", "5")])
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize("written", ["1, 2", "16,7", "1 6 7", "1,6,7", "1,000,0", "0,065"])
def test_arith_does_not_read_a_list_or_a_decimal_comma_as_one_integer(written):
    gold = written.replace(",", "").replace(" ", "")
    assert reward.score("arith", f"\\boxed{{{written}}}", gold) == 0.0


@pytest.mark.parametrize("written, gold", [("1{,}085", "1085"), ("\u221212", "-12"),
                                           ("\\mathbf 7", "7"), ("\\displaystyle 7", "7"),
                                           ("\\textbf 7", "7")])
def test_arith_reads_separators_minus_signs_and_font_macros_as_math_verify_does(written, gold):
    assert reward.score("arith", f"\\boxed{{{written}}}", gold) == 1.0
    assert reward.score("arith", f"The answer is ${written}$.", gold) == 1.0


def test_arith_reads_a_unit_after_the_number_as_math_verify_does_and_nothing_else():
    assert reward.score("arith", "\\boxed{167 \\text{ apples}}", "167") == 1.0
    assert reward.score("arith", "\\boxed{1,670}", "1670") == 1.0
    assert reward.score("arith", "\\boxed{167 \\text{ or } 168}", "167") == 0.0


def test_a_quoted_exact_answer_and_a_word_list_ending_in_its_separator_score_one():
    assert reward.score("exact", '<answer>"Paris"</answer>', "Paris") == 1.0
    assert reward.score("exact", "<answer>\u201cParis\u201d</answer>", "Paris") == 1.0
    entry = rg_entries("word_sorting", size=1, seed=5)[0]
    assert reward.score("reasoning_gym", f"<answer>{entry['answer']},</answer>",
                        {"dataset": "word_sorting", "entry": entry}) == 1.0
