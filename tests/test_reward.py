"""reward.py: answer extraction and checking, as the training loop calls it."""

import dataclasses
import json
import os
import random
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import sympy

import benchmarks
import reward
import sandbox
from conftest import ROOT, run_script
from reward import extract_answer, score
from tasks import load_tasks


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


# ---- exact: a task kind that is one entry of reward.TASK_KINDS -----------------------------------

@pytest.mark.parametrize("response, reward_", [
    ("The capital of France is \\boxed{Paris}.", 1.0),
    ("<answer> Paris </answer>", 1.0),  # whitespace around the answer does not count
    ("\\boxed{paris}", 0.0),  # case does
    ("\\boxed{Paris or Lyon}", 0.0),  # a hedge is not the answer
    ("\\boxed{Paris} no wait, \\boxed{Lyon}", 0.0),  # the last answer is the one read
    # a box or a tag, whichever the response opens last
    ("<answer>Lyon</answer>, so \\boxed{Paris}", 1.0),
    ("\\boxed{Lyon} <answer>Paris</answer>", 1.0),
    ("\\boxed{Paris", 0.0),  # unclosed: no answer
    ("Paris", 0.0),  # no box and no tag: no answer
])
def test_exact_scores_the_last_box_or_answer_tag_against_the_gold_string(response, reward_):
    assert score("exact", response, "Paris") == reward_


def test_exact_in_a_batch_decides_every_answer_here_and_refuses_an_empty_gold():
    stats = reward.VerifyStats()
    items = ([("exact", "\\boxed{Paris}", " Paris\n")] * 3
             + [("exact", "<answer>Rome</answer>", "Paris"), ("exact", "no answer", "Paris")])
    assert reward.score_batch(items, stats=stats) == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert stats.answered == 4 and stats.checks == 0  # no worker: answers are only compared
    assert reward.final_answer("exact", "<answer>Rome</answer>") == "Rome"
    with pytest.raises(ValueError, match="exact answer must be a non-empty string"):
        reward.score("exact", "\\boxed{}", "  ")  # an empty gold would reward an empty box


def test_exact_from_the_command_line():
    right = run_script("reward.py", "--task", "exact", "--answer", "Paris", "--response",
                       "so \\boxed{Paris}")
    wrong = run_script("reward.py", "--task", "exact", "--answer", "Paris", "--response",
                       "so \\boxed{paris}")
    assert (right.stdout, wrong.stdout) == ("reward: 1.0\n", "reward: 0.0\n")
    empty = run_script("reward.py", "--task", "exact", "--answer", " ", "--response", "\\boxed{}",
                       check=False)
    assert (empty.returncode, empty.stderr) == (1, "error: exact answer must be a non-empty "
                                                   "string, got ' '\n")


def read_yes_no(answer) -> str:
    if answer not in ("yes", "no"):
        raise ValueError(f"yes_no answer must be 'yes' or 'no', got {answer!r}")
    return answer


def test_a_new_task_kind_is_one_entry_that_score_and_score_batch_read(monkeypatch):
    yes_no = reward.TaskKind(extract=reward.last_answer_tag, read_gold=read_yes_no,
                             check_here=lambda pred, gold: pred.lower() == gold)
    monkeypatch.setitem(reward.TASK_KINDS, "yes_no", yes_no)
    assert score("yes_no", "<answer>Yes</answer>", "yes") == 1.0
    assert reward.score_batch([("yes_no", "<answer>no</answer>", "yes"),
                               ("yes_no", "<answer>YES</answer>", "yes"),
                               ("arith", "\\boxed{4}", "4")]) == [0.0, 1.0, 1.0]
    assert reward.final_answer("yes_no", "<answer>no</answer>") == "no"
    with pytest.raises(ValueError, match="yes_no answer must be 'yes' or 'no'"):
        # what the trainer asks of every data record
        reward.validate_answer("yes_no", "maybe")
    with pytest.raises(ValueError, match="needs check_here, check, or both"):
        reward.TaskKind(extract=reward.last_answer_tag, read_gold=read_yes_no)

# ---- math: equivalences, fast path, group cache, hard timeouts -----------------------------------

@pytest.mark.parametrize("pred, gold", [
    ("\\frac{1}{2}", "0.5"), ("1/2", "\\frac{1}{2}"), ("\\dfrac{1}{2}", "\\frac12"),
    ("\\sqrt{3}/2", "\\frac{\\sqrt 3}{2}"), ("(1, 2]", "(1,2]"), ("[0,\\infty)", "[0, \\infty)"),
    ("\\{2,1\\}", "\\{1,2\\}"), ("x=3", "3"), ("x = 3", "3"), ("30^\\circ", "30"),
    ("5\\text{ cm}", "5"), ("x(x+2)", "x^2+2x"), ("\\left(1,2\\right)", "(1,2)"), ("42.", "42"),
    ("\\sqrt{4}", "2"),
])
def test_equivalent_math_answers_are_correct(pred, gold):
    assert score("math", f"so the answer is \\boxed{{{pred}}}", gold) == 1.0


@pytest.mark.parametrize("pred, gold", [("0.6", "\\frac{1}{2}"), ("(1,2)", "(1,2]"),
                                        ("x^2+x", "x(x+2)"), ("3", "-3"),
                                        ("\\{1,2,3\\}", "\\{1,2\\}")])
def test_different_math_answers_are_wrong(pred, gold):
    assert score("math", f"\\boxed{{{pred}}}", gold) == 0.0


def test_math_needs_a_box_and_the_last_box_wins():
    assert score("math", "The final answer is 3", "3") == 0.0
    assert score("math", "\\boxed{2} no, wait: \\boxed{3}", "3") == 1.0
    assert score("math", "\\boxed{3} no wait \\boxed{2}", "3") == 0.0


def test_fast_path_decides_plain_numbers_without_sympy():
    assert reward.math_fast_path("0.5", "1/2") is True
    assert reward.math_fast_path("7", "8") is False
    # math-verify's tolerance decides that one
    assert reward.math_fast_path("0.333333", "1/3") is None
    assert (reward.math_fast_path("14/24", "7/12") is True
            and reward.math_fast_path("5/12", "7/12") is False)
    assert reward.math_fast_path("1/0", "1") is None
    assert (reward.normalize_math("-\\dfrac{14}{24}") == "-14/24"
            and reward.normalize_math("x^{2}") == "x^2")
    assert reward.normalize_math("\\left( \\dfrac{1}{2} , 3 \\right) .") == "(\\frac{1}{2},3)"
    # a space that separates a macro survives
    assert reward.normalize_math("2 \\cdot x") == "2\\cdot x"


def group_of(answers_and_counts, gold):
    return [("math", f"Reasoning... \\boxed{{{a}}}", gold) for a, count in answers_and_counts
            for _ in range(count)]


def test_a_group_verifies_each_distinct_answer_once_and_workers_do_not_change_rewards():
    items = group_of([("x(x+5)", 300), ("x^2+5x", 100), ("x^2+5", 80), ("5x+x^2", 32)], "x^2+5x")
    stats = reward.VerifyStats()
    rewards = reward.score_batch(items, workers=2, stats=stats)
    assert rewards == [1.0] * 400 + [0.0] * 80 + [1.0] * 32
    assert stats.fast_path == 100 and stats.checks == 3 and stats.cache_hits == 512 - 100 - 3
    assert stats.as_log()["verify/cache_hit_rate"] == pytest.approx(409 / 412)
    assert reward.score_batch(items, workers=1) == rewards


PATHOLOGICAL = {
    "power tower": "9^{9^{9^{9}}}",
    "huge factorial": "10^{10^{10}}!",
    "10,000 nested parentheses": "(" * 10_000 + "1" + ")" * 10_000,
    "1 MB answer": "1" * (1 << 20),
    "invalid LaTeX": "\\frac{1}{}}}^^_\\sqrt[",
    "unicode junk": "\u2603\u00e9\U0001F600\u202e\x00",
    "empty box": "",
}


@pytest.mark.parametrize("name", PATHOLOGICAL)
def test_pathological_answers_score_zero_within_the_limit_and_the_pool_survives(name):
    # let them reach the verifier
    config = reward.VerifyConfig(timeout=1.0, max_answer_chars=50_000)
    stats = reward.VerifyStats()
    start = time.monotonic()
    rewards = reward.score_batch([("math", f"\\boxed{{{PATHOLOGICAL[name]}}}", "1"),
                                  ("math", "\\boxed{2}", "2")],
                                 workers=1, config=config, stats=stats)
    assert rewards == [0.0, 1.0]
    assert time.monotonic() - start < 10  # 1 s limit + a worker restart, never sympy's hours
    # the replaced worker works
    assert reward.score("math", "\\boxed{\\frac{2}{4}}", "0.5", config) == 1.0


def test_a_hung_answer_is_a_counted_timeout_even_from_a_thread():
    stats = reward.VerifyStats()
    config = reward.VerifyConfig(timeout=1.0)
    with ThreadPoolExecutor(1) as pool:  # math-verify's own SIGALRM timeouts would raise here
        rewards = pool.submit(reward.score_batch, [("math", "\\boxed{9^{9^{9^{9}}}}", "1")], 1,
                              config, stats).result()
    assert rewards == [0.0] and stats.timeouts == 1


def test_a_worker_that_dies_mid_check_is_replaced_and_that_answer_scores_zero():
    pool = sandbox.VerifierPool(workers=1, memory_mb=2048, files=reward.WORKER_FILES,
                                module="reward")
    killed = []

    def kill_worker_once_busy():  # what the kernel's OOM killer would do
        deadline = time.monotonic() + 60
        while (pool.procs[0] is None or pool.starting[0]) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)  # the power tower is being checked now (it runs for minutes)
        killed.append(pool.procs[0].pid)
        pool.procs[0].kill()

    threading.Thread(target=kill_worker_once_busy, daemon=True).start()
    results = pool.run([("math", ["9^{9^{9^{9}}}", "1"]), ("math", ["7", "7"])], timeout=60)
    replacement = pool.procs[0].pid
    pool.close()
    assert results == [(0.0, "error"), (1.0, "ok")] and killed and replacement != killed[0]


def test_answers_of_one_prompt_slow_to_verify_leave_another_prompts_correct_answers_their_share():
    """Prompt A's answers each run sympy until their timeout and cost a worker's replacement; B's
    symbolic answers, queued after A's (numbers first), scored 0 behind them, whatever they were."""
    config = reward.VerifyConfig(timeout=1.0, step_timeout=5.0)
    towers = [("math", f"\\boxed{{{k}^{{9^{{9^{{9}}}}}}}}", "1") for k in range(2, 8)]
    quick = [("math", f"\\boxed{{{k}^{{10}}}}", "1") for k in range(2, 8)]  # wrong, checked at once
    correct = [("math", f"\\boxed{{{answer}}}", "x^2+5x") for answer in ("x(x+5)", "5x+x^2")]
    stats = reward.VerifyStats()
    rewards = reward.score_batch(towers + correct, workers=1, config=config, stats=stats)
    assert rewards == [0.0] * 6 + [1.0, 1.0] and stats.over_budget + stats.timeouts == 6
    assert reward.score_batch(quick + correct, workers=1, config=config)[6:] == [1.0, 1.0]


def test_problems_with_the_same_answer_named_as_two_prompts_get_a_share_each():
    """Two problems whose answer is x^2+5x: known by their gold alone they are one prompt, and the
    first's slow answers took the second's correct ones' time (both 0); named by the caller, each
    has its own share."""
    config = reward.VerifyConfig(timeout=1.0, step_timeout=5.0)
    towers = [("math", f"\\boxed{{{k}^{{9^{{9^{{9}}}}}}}}", "x^2+5x") for k in range(2, 8)]
    correct = [("math", f"\\boxed{{{answer}}}", "x^2+5x") for answer in ("x(x+5)", "5x+x^2")]
    rewards = reward.score_batch(towers + correct, workers=1, config=config,
                                 prompts=[0] * 6 + [1] * 2)
    assert rewards[6:] == [1.0, 1.0]
    with pytest.raises(ValueError, match="prompts names 2 items' prompts for 8 items"):
        reward.score_batch(towers + correct, prompts=[0, 1])


def test_checks_past_their_prompts_share_run_again_in_what_the_step_has_left():
    """One prompt's 18 correct answers need sympy ~0.06 s each, about twice its 1/16 of a 9 s step
    beside 15 prompts of 12 quick checks each (so that none finishes early and leaves it its
    share): they used to score 0, on a machine far from the step's cap. (The whole takes ~4 s on
    an idle 2-core machine: a 6 s step left too little for round 2 on a loaded one.)"""
    x, y = sympy.symbols("x y")
    terms = list(sympy.Add.make_args(sympy.expand((x + y + 1) ** 4)))
    rng = random.Random(0)
    slow = []
    for _ in range(18):  # the expansion, its terms in another order each time
        rng.shuffle(terms)
        slow.append(("math", "\\boxed{%s}" % " + ".join(map(sympy.latex, terms)), "(x+y+1)^4"))
    quick = [("math", f"\\boxed{{{j}+x}}", f"x+{k}") for k in range(100, 115) for j in range(12)]
    stats = reward.VerifyStats()
    config = reward.VerifyConfig(step_timeout=9.0)
    rewards = reward.score_batch(slow + quick, workers=1, config=config, stats=stats)
    assert rewards == [1.0] * 18 + [0.0] * 180 and stats.checks == 198, stats
    assert stats.over_budget == 0 and stats.rechecked > 0


def test_answers_that_overrun_and_replace_their_workers_leave_another_prompt_its_share():
    """100 answers that each overrun their tiny share, each worker replaced (~0.7 s): 23 of another
    prompt's 30 correct answers went unchecked while every replacement held up both workers. (30
    checks of about 0.05 s in a share of 4 s: the replacements' imports, beside them on 2 cores, can
    slow one past its own share of it, which a 5 s step left no time to run again.)"""
    towers = [("math", f"\\boxed{{10^{{10^{{{10 + k}}}}}}}", "5") for k in range(100)]
    forms = ["x^{2}+2x+1", "1+2x+x^{2}", "(1+x)^{2}", "(x+1)(x+1)", "x^{2}+1+2x", "x(x+2)+1",
             "2x+x^{2}+1", "(x+1)(1+x)", "x\\cdot x+2x+1", "x^{2}+2\\cdot x+1"]
    correct = [("math", f"\\boxed{{{form}+{k}-{k}}}", "(x+1)^{2}")
               for k in range(3) for form in forms]
    config = reward.VerifyConfig(step_timeout=8.0)
    assert reward.score_batch(towers + correct, workers=2, config=config)[100:] == [1.0] * 30


@pytest.mark.slow  # a 12 s step
def test_a_prompt_whose_last_answer_overruns_pays_its_workers_replacement_in_its_own_share():
    """8 prompts of one answer each that runs until its share is spent: their workers' replacements
    came after their last check, so the step paid for them, and another prompt's 8 correct answers
    scored 1-2 of 8 in a 12 s step."""
    slow = [("math", "\\boxed{\\sum_{k=1}^{10000} k^{k}}", str(100 + i)) for i in range(8)]
    forms = ["x^{2}+2x+1", "1+2x+x^{2}", "(1+x)^{2}", "(x+1)(x+1)", "x^{2}+1+2x", "x(x+2)+1",
             "2x+x^{2}+1", "(x+1)(1+x)"]
    correct = [("math", f"\\boxed{{{form}}}", "(x+1)^{2}") for form in forms]
    # a pool of its own, math only: one that has had Reasoning Gym checks starts each worker 0.5 s
    # slower, and overruns this fast then outpace the starts (docs/verifiers.md, known limits)
    config = reward.VerifyConfig(worker_memory_mb=2000)
    started = [("math", f"\\boxed{{{answer}}}", "x^2+5x") for answer in ("x(x+5)", "5x+x^2")]
    assert reward.score_batch(started, workers=2, config=config) == [1.0, 1.0]  # both started
    config = dataclasses.replace(config, step_timeout=12.0)
    assert reward.score_batch(slow + correct, workers=2, config=config)[8:] == [1.0] * 8


def test_math_checked_first_leaves_a_code_prompt_of_the_same_step_its_share():
    """The step's math is checked before its programs run: one budget for both, so a prompt's
    slow math answers cannot spend a code prompt's share. (A prompt can overrun its share by its
    last checks' worker replacements, ~0.7 s each on an idle 2-core machine and several times that
    under load: a step of 9 s leaves the program, 0.1 s alone, seconds to spare.)"""
    config = reward.VerifyConfig(timeout=1.5, step_timeout=9.0)
    # 27 worker-seconds of math for a step of 18: before, they took it all
    towers = [("math", f"\\boxed{{{k}^{{{k}^{{{k}^{{9}}}}}}}}", "1/2") for k in range(3, 21)]
    program = "```python\nn = int(input())\nprint(sum(map(int, input().split())))\n```"
    code = [("code", program, {"inputs": ["3\n1 2 3\n"], "outputs": ["6\n"]})] * 2
    stats = reward.VerifyStats()
    rewards = reward.score_batch(towers + code, workers=2, config=config, stats=stats)
    assert rewards[-2:] == [1.0, 1.0], stats


# ---- Reasoning Gym -------------------------------------------------------------------------------

RG_TEST = [row for row in load_tasks(ROOT / "data" / "rg_test.jsonl")]
RG_BY_DATASET = {row["answer"]["dataset"]: row for row in RG_TEST}


def test_shipped_reasoning_gym_data_covers_the_documented_set():
    assert set(RG_BY_DATASET) == set(benchmarks.REASONING_GYM_TASKS)
    assert {row["category"] for row in RG_TEST} == set(benchmarks.REASONING_GYM_TASKS.values())


def test_gold_answers_score_one_on_every_reasoning_gym_task():
    entries = [row["answer"] for row in RG_TEST]
    items = [("reasoning_gym", f"<answer>{entry['entry']['answer']}</answer>", entry)
             for entry in entries]
    stats = reward.VerifyStats()
    assert reward.score_batch(items, workers=2, stats=stats) == [1.0] * len(items)
    assert stats.fast_path == len(items)  # an exact copy of the gold answer needs no scorer
    # the scorers themselves
    jobs = [("reasoning_gym", [entry["entry"]["answer"], entry]) for entry in entries]
    assert reward.verifier_pool(2, 2048).run(jobs, timeout=30) == [(1.0, "ok")] * len(jobs)


@pytest.mark.parametrize("nonsense", ["", "banana", "-1", "<answer>", "None", "[[", "1e999",
                                      "\u2603" * 50])
def test_nonsense_answers_score_zero_on_every_reasoning_gym_task(nonsense):
    stats = reward.VerifyStats()
    items = [("reasoning_gym", f"thinking <answer>{nonsense}</answer>", row["answer"])
             for row in RG_BY_DATASET.values()]
    assert reward.score_batch(items, workers=2, stats=stats) == [0.0] * len(items)


def test_reasoning_gym_reward_is_binary_and_guarded():
    entry = RG_BY_DATASET["basic_arithmetic"]["answer"]
    stats = reward.VerifyStats()
    gold = entry["entry"]["answer"]
    # the package gives partial credit to a spaced-out answer; the RL reward does not
    assert reward.score_batch([("reasoning_gym", f"<answer> {gold} x</answer>", entry)],
                              stats=stats) == [0.0]
    halting = {"dataset": "game_of_life_halting",
               "entry": {"question": "?", "answer": "False", "metadata": {}}}
    # the package says 1.0
    assert reward.score("reasoning_gym", "<answer>anything at all</answer>", halting) == 0.0
    assert reward.score("reasoning_gym", "<answer>false</answer>", halting) == 1.0
    factor = {"dataset": "prime_factorization",
              "entry": {"question": "?", "answer": "2 × 3", "metadata": {"number": 6}}}
    stats = reward.VerifyStats()
    assert reward.score_batch([("reasoning_gym", "<answer>definitely wrong</answer>", factor)],
                              stats=stats) == [0.0]
    assert stats.errors == 1  # the package's scorer raised ValueError: counted, scored 0
    assert reward.score("reasoning_gym", "no tags", RG_TEST[0]["answer"]) == 0.0


def test_malformed_answers_are_clear_errors():
    with pytest.raises(ValueError, match="reasoning_gym answer must be"):
        reward.score("reasoning_gym", "<answer>1</answer>", "1")
    with pytest.raises(ValueError, match="code answer must be"):
        reward.score("code", "```python\nprint(1)\n```", '{"tests": []}')
    with pytest.raises(ValueError, match="workers must be >= 1"):
        reward.score_batch([], workers=0)


def test_workers_started_during_a_call_on_a_thread_that_ends_outlive_it():
    """bwrap's --die-with-parent kills a sandbox when the thread that forked it ends: a call on a
    short-lived thread left every worker it started dead for the next call (which raised "failed to
    start" in 14 of 30 such calls, or scored answers 0 as errors when another thread's call was
    using them). The workers and the spare are forked from the pool's own lasting thread."""
    config = reward.VerifyConfig(timeout=0.3, worker_memory_mb=1997)  # a pool of its own
    # three answers overrun their checks (their workers replaced), one is right
    items = [("math", f"\\boxed{{(x+y+z+w)^{{{40 + k}}}}}", "2") for k in range(3)]
    items += [("math", "\\boxed{\\sqrt{8}}", "2\\sqrt{2}")]
    with ThreadPoolExecutor(1) as caller:  # its thread ends with the block
        assert caller.submit(reward.score_batch, items, 2, config).result() == [0.0] * 3 + [1.0]
    pool = reward.verifier_pool(2, config.worker_memory_mb)
    started = [proc for proc in pool.procs if proc is not None]
    time.sleep(0.5)  # the parent-death signal comes as the thread exits
    assert len(started) >= 2 and all(proc.poll() is None for proc in started)
    stats = reward.VerifyStats()
    assert reward.score_batch(items[3:], 2, config, stats) == [1.0] and stats.errors == 0
    assert set(started) <= set(pool.procs)  # none started again (a spare may have been added)


def test_the_pool_survives_ctrl_c_a_fork_and_a_main_thread_that_returns():
    """tests/verifier_pool_lifetime.py's scenarios. Ctrl-C mid-check left a worker holding its
    request, and the next call's correct answer scored 0; workers forked from a thread pool's
    thread died when the interpreter shut that pool down after the main thread returned, and a
    forked child waited for a thread it does not have."""
    printed = run_script("tests/verifier_pool_lifetime.py", timeout=120).stdout
    reports = {r["scenario"]: r for r in map(json.loads, printed.splitlines())}
    interrupted = reports["interrupted"]
    assert interrupted["after"] == [{"rewards": [1.0], "errors": 0}] * 3
    assert interrupted["strays"] == 0  # no worker left running outside the pool
    assert reports["forked"]["status"] == 0
    calls = [r for r in map(json.loads, printed.splitlines()) if r["scenario"] == "after_main"]
    assert calls == [{"scenario": "after_main", "rewards": [1.0, 0.0, 1.0], "errors": 0}] * 2


def test_a_worker_killed_as_it_starts_is_started_again_not_raised():
    """The kernel's OOM killer or a `kill` hits the worker's interpreter, which bubblewrap runs as
    PID 1 of its namespace and reports dead by exit status 137, not by a signal: that start raised
    "failed to start" (5 of 5)."""
    killed = []

    def kill_the_first_interpreter():
        deadline = time.monotonic() + 30
        while not killed and time.monotonic() < deadline:
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        command = f.read().split(b"\0")
                except OSError:
                    continue
                if not command[0].endswith(b"bwrap") and any(b"reward.serve(" in part
                                                             for part in command):
                    os.kill(int(pid), signal.SIGKILL)
                    killed.append(pid)
                    break
            time.sleep(0.005)

    threading.Thread(target=kill_the_first_interpreter, daemon=True).start()
    config = reward.VerifyConfig(worker_memory_mb=1999)  # a pool of its own: its workers start now
    items = [("math", "\\boxed{x(x+1)}", "x^2+x"), ("math", "\\boxed{2x+2}", "2(x+1)")]
    assert reward.score_batch(items, workers=2, config=config) == [1.0, 1.0] and killed
