"""reward.py: answer extraction and checking, as the training loop calls it."""

import pytest

from reward import extract_answer, score


@pytest.mark.parametrize("response, expected", [
    ("so the sum is \\boxed{85}", "85"),
    ("\\boxed{1} then again \\boxed{2}", "2"),  # the last box wins
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # nested braces
    ("\\boxed{ {a}+{b} } done", "{a}+{b}"),
    ("\\fbox{7}", "7"),
    ("\\boxed{}", ""),
    ("\\boxed{12", None),  # unclosed box: no answer
    ("no answer here", None),
    ("work...\nAnswer: 42.", "42"),
    ("The final answer is 3/4", "3/4"),
    ("answer: 1\n\\boxed{2}", "2"),  # a box beats an answer line
])
def test_extract_answer_edge_cases(response, expected):
    assert extract_answer(response) == expected


@pytest.mark.parametrize("response, answer, reward", [
    ("\\boxed{85}", "85", 1.0),
    ("\\boxed{ 85 }", "85", 1.0),
    ("\\boxed{-12}", "-12", 1.0),
    ("\\boxed{84}", "85", 0.0),
    ("\\boxed{85.5}", "85", 0.0),
    ("\\boxed{}", "85", 0.0),
    ("\\boxed{1,085}", "1085", 1.0),
    ("85", "85", 0.0),  # no box and no answer line: no answer
])
def test_arith_rewards(response, answer, reward):
    assert score("arith", response, answer) == reward


@pytest.mark.parametrize("response, answer, reward", [
    ("\\boxed{0.5}", "\\frac{1}{2}", 1.0),
    ("\\boxed{1/2}", "\\frac{1}{2}", 1.0),
    ("\\boxed{\\frac{\\sqrt{3}}{2}}", "\\sqrt{3}/2", 1.0),
    ("\\boxed{x=3}", "3", 1.0),
    ("\\boxed{0.6}", "\\frac{1}{2}", 0.0),
    ("no box", "1", 0.0),
])
def test_math_rewards_use_math_verify_equivalence(response, answer, reward):
    assert score("math", response, answer) == reward


def test_unknown_task_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown task 'chess'"):
        score("chess", "\\boxed{1}", "1")
