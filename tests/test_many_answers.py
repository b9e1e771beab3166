"""The many-answers task (data/make_many_answers.py) and its verifier kind, any_of (reward.py)."""

import json
import math
import random
import sys
from collections import Counter

import pytest

import reward
import tiny_model
from conftest import ROOT, run_script
from reward import score
from tasks import check_answers, load_tasks

sys.path.insert(0, str(ROOT / "data"))
import make_many_answers  # noqa: E402

SHIPPED = {split: ROOT / "data" / f"many_answers_{split}.jsonl" for split in ("train", "test")}


def divisible_in_range(prompt: str) -> list[str]:
    """The correct answers of `d|lo..hi=` by brute force: every number from lo to hi, tried."""
    d, span = prompt.rstrip("=").split("|")
    lo, hi = map(int, span.split(".."))
    return [str(n) for n in range(lo, hi + 1) if n % int(d) == 0]


# ---- the generator -------------------------------------------------------------------------------


def test_the_generator_is_deterministic_and_the_shipped_files_are_its_output(tmp_path):
    assert make_many_answers.make_problems(40, seed=3) == make_many_answers.make_problems(40, 3)
    assert make_many_answers.make_problems(40, 3) != make_many_answers.make_problems(40, 4)
    run_script("data/make_many_answers.py", "--out-dir", str(tmp_path))
    for split, path in SHIPPED.items():
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), split


def test_shipped_tasks_load_verify_and_keep_train_and_test_apart():
    train, test = (load_tasks(SHIPPED[split]) for split in ("train", "test"))
    check_answers(train + test, "many_answers")  # what the trainer asks of every record
    assert (len(train), len(test)) == (192, 64)
    assert not {t["prompt"] for t in train} & {t["prompt"] for t in test}
    for tasks in (train, test):  # the four tiers in equal shares
        assert [sum(t["tier"] == tier for t in tasks) for tier in range(4)] == [len(tasks) // 4] * 4


def test_every_listed_answer_is_correct_and_every_correct_answer_is_listed():
    for task in load_tasks(SHIPPED["train"]) + load_tasks(SHIPPED["test"]):
        listed = task["answer"]["any_of"]
        assert listed == divisible_in_range(task["prompt"])
        assert 12 <= len(listed) <= 32
        assert all(score("any_of", f"\\boxed{{{a}}}", task["answer"]) == 1.0 for a in listed)


def test_near_misses_and_the_priors_distractors_score_zero():
    for task in load_tasks(SHIPPED["test"]):
        d = int(task["prompt"].split("|")[0])
        listed = [int(a) for a in task["answer"]["any_of"]]
        distractors = [a for a in task["prior"] if a not in task["answer"]["any_of"]]
        # each answer's neighbours, and the multiples of d just outside the range
        near = [a + step for a in listed for step in (-1, 1)] + [listed[0] - d, listed[-1] + d]
        for wrong in [*map(str, near), *distractors]:
            assert score("any_of", f"\\boxed{{{wrong}}}", task["answer"]) == 0.0, (task, wrong)


def test_the_prior_is_skewed_and_its_correct_share_sets_the_tier():
    for task in load_tasks(SHIPPED["train"]):
        listed = set(task["answer"]["any_of"])
        # a tier's prompts are told apart by their divisors
        assert int(task["prompt"].split("|")[0]) in make_many_answers.TIER_DIVISORS[task["tier"]]
        correct = sorted((p for a, p in task["prior"].items() if a in listed), reverse=True)
        # 6 significant digits per entry: the sums are exact to well under 1e-5
        assert sum(task["prior"].values()) == pytest.approx(1.0, abs=1e-5)
        assert sum(correct) == pytest.approx(make_many_answers.TIER_CORRECT_SHARE[task["tier"]],
                                             rel=1e-5)
        assert len(correct) == len(listed)  # every correct answer has some mass
        # Zipf weights 1/(r+1): the favourite holds r_max+1 times the least likely answer's mass
        assert correct[0] / correct[-1] == pytest.approx(len(correct), rel=1e-4)
        assert len(task["prior"]) - len(listed) == make_many_answers.DISTRACTORS


def test_the_generator_refuses_sizes_it_cannot_make(tmp_path):
    result = run_script("data/make_many_answers.py", "--train", "-1", "--out-dir", str(tmp_path),
                        check=False)
    assert result.returncode == 2 and "--train and --test must be >= 0" in result.stderr


def test_the_warm_up_draws_targets_from_the_prior_and_leaves_other_tasks_alone():
    task = load_tasks(SHIPPED["train"])[0]
    rng = random.Random(0)
    draws = 20000
    targets = Counter(tiny_model.warmup_row(task, rng)["answer"] for _ in range(draws))
    for answer, p in task["prior"].items():
        # each draw is answer a or not: off by more than 5 binomial standard deviations with
        # probability < 6e-7
        assert abs(targets[answer] / draws - p) <= 5 * math.sqrt(p * (1 - p) / draws), answer
    arith = {"prompt": "1+2=", "answer": "3", "task": "arith"}
    state = rng.getstate()
    assert tiny_model.warmup_row(arith, rng) is arith
    assert rng.getstate() == state  # the default model's warm-up draws what it always drew


# ---- the any_of verifier -------------------------------------------------------------------------

GOLD = {"any_of": ["42", "49", "56"]}


@pytest.mark.parametrize("response, reward_", [
    ("\\boxed{49}", 1.0),
    ("so \\boxed{ 49 }.", 1.0),
    ("\\boxed{49.0}", 1.0),  # the arith kind's normalisation: 49.0 and 049 are 49
    ("\\boxed{049}", 1.0),
    ("\\boxed{**49**}", 1.0),
    ("The answer is 56", 1.0),  # an answer line, as arith reads it
    ("\\boxed{50}", 0.0),
    ("\\boxed{-42}", 0.0),
    ("\\boxed{4.2}", 0.0),
    ("49", 0.0),  # no box and no answer line: no answer
    # several candidates are never rewarded: one box holding them is no number...
    ("\\boxed{42, 49, 56}", 0.0),
    ("\\boxed{42,49}", 0.0),
    ("\\boxed{42 49 56}", 0.0),
    ("\\boxed{$42$ or $49$}", 0.0),
    ("\\boxed{42 \\text{ or } 49}", 0.0),
    ("\\boxed{\\{42, 49\\}}", 0.0),
    ("answer: 42 or 49", 0.0),
    # ... and of several boxes or answer lines the last one is the answer
    ("\\boxed{42} \\boxed{43}", 0.0),
    ("\\boxed{43} \\boxed{42}", 1.0),
    ("answer: 42\nanswer: 43", 0.0),
    ("\\boxed{42}\\boxed{49}\\boxed{56}\\boxed{57}", 0.0),
])
def test_any_of_rewards_the_final_answer_only(response, reward_):
    assert score("any_of", response, GOLD) == reward_


@pytest.mark.parametrize("response", [
    "\\boxed{49}", "\\boxed{49.}", "\\boxed{+49}", "\\boxed{$49$}", "\\boxed{49 \\text{ apples}}",
    "\\boxed{4,9}", "\\boxed{0,049}", "\\boxed{49/1}", "\\boxed{7*7}", "Answer: **49**",
    "\\boxed{}",
])
def test_any_of_reads_an_answer_exactly_as_arith_does(response):
    assert score("any_of", response, {"any_of": ["49"]}) == score("arith", response, "49")


def test_any_of_in_a_batch_and_from_the_command_line():
    stats = reward.VerifyStats()
    items = [("any_of", "\\boxed{49}", GOLD), ("any_of", "\\boxed{49}", GOLD),
             ("any_of", "\\boxed{43}", GOLD), ("arith", "\\boxed{4}", "4")]
    assert reward.score_batch(items, stats=stats) == [1.0, 1.0, 0.0, 1.0]
    assert stats.checks == 0  # decided here, no worker
    assert reward.final_answer("any_of", "\\boxed{43}") == "43"
    right = run_script("reward.py", "--task", "any_of", "--answer", json.dumps(GOLD), "--response",
                       "so \\boxed{56}")
    assert right.stdout == "reward: 1.0\n"


@pytest.mark.parametrize("answer", [
    {"any_of": []}, {"any_of": [42]}, {"any_of": ["4.2"]}, {"any_of": ["42"], "also": ["43"]},
    {"any": ["42"]}, "42", ["42"],
])
def test_malformed_any_of_answers_are_clear_errors(answer):
    with pytest.raises(ValueError, match="any_of answer must be"):
        reward.validate_answer("any_of", answer)


@pytest.mark.parametrize("response", ["\\boxed{42\\,}", "\\boxed{42\\ }", "\\boxed{\\,42}"])
def test_spacing_commands_around_the_integer_are_spaces(response):
    assert score("any_of", response, {"any_of": ["42", "7"]}) == 1.0
    assert score("arith", response, "42") == 1.0
