"""Attacks a policy finds against the math / Reasoning Gym verifiers (issue 15): answers that run
code, forged worker replies, responses that raise or stall, and answers that hedge. Each must
score 0."""

import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import reward
import sandbox
from tasks import load_tasks
from conftest import ROOT

RG = {row["answer"]["dataset"]: row["answer"]
      for row in load_tasks(ROOT / "data" / "rg_test.jsonl")}


def rg_item(dataset: str, answer: str) -> tuple[str, str, dict]:
    return ("reasoning_gym", f"Let me think. <answer>{answer}</answer>", RG[dataset])


# ---- class 1: answers that Reasoning Gym scorers would run as Python -----------------------------

def test_an_always_equal_object_built_by_the_answer_is_not_a_correct_polynomial():
    # polynomial_multiplication compares sympy's parse_expr(answer) with == : an answer that is
    # Python building an object equal to everything used to score 1.0
    evil = "__import__('unittest.mock').mock.ANY"
    assert reward.score("reasoning_gym", f"<answer>{evil}</answer>",
                        RG["polynomial_multiplication"]) == 0.0
    gold = RG["polynomial_multiplication"]["entry"]["answer"]
    assert reward.score("reasoning_gym", f"<answer>{gold}</answer>",
                        RG["polynomial_multiplication"]) == 1.0


def test_scorers_that_eval_or_parse_expr_cannot_run_an_answer(tmp_path):
    # outside any sandbox, in a plain process: only the guarded eval / parse_expr stand in the way
    marker = tmp_path / "ran"
    program = f"""
import json, sys
sys.path.insert(0, {str(ROOT)!r})
import reward
reward._forbid_code_in_scorers()
entry = json.loads(sys.stdin.read())
attacks = ["__import__('os').system('touch {marker}')", "exec(\\"open('{marker}', 'w')\\")",
           "eval(\\"__import__('pathlib').Path('{marker}').touch()\\")"]
for dataset, answer in [(d, a) for d in ("countdown", "polynomial_multiplication") for a in attacks]:
    try:
        print(reward.rg_raw_score(dataset, answer, entry[dataset]["entry"]))
    except reward.NotPlainData:
        print("refused")
for n_queens_attack in ["[open('{marker}', 'w')]", "().__class__.__base__.__subclasses__()"]:
    try:
        print(reward.rg_raw_score("n_queens", n_queens_attack, {{"answer": "", "metadata": {{"valid_answers": []}}}}))
    except reward.NotPlainData:
        print("refused")
"""  # noqa: E501
    done = subprocess.run([sys.executable, "-c", program], input=json.dumps(RG),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not marker.exists()
    assert all(line in ("refused", "0.0", "0.01") for line in done.stdout.split()), done.stdout


def test_scorers_that_eval_keep_scoring_gold_answers_and_score_code_zero():
    import reasoning_gym

    evaluating = ["bitwise_arithmetic", "number_sorting", "n_queens", "puzzle24",
                  "string_insertion", "binary_matrix", "spiral_matrix", "simple_integration",
                  "countdown", "polynomial_multiplication"]
    entries = [(name, json.loads(json.dumps(entry))) for name in evaluating
               for entry in reasoning_gym.create_dataset(name, size=2, seed=3)]
    # past the exact match
    golds = [("reasoning_gym", [entry["answer"], {"dataset": name, "entry": entry}])
             for name, entry in entries]
    attacks = [("reasoning_gym", [attack, {"dataset": name, "entry": entry}])
               for name, entry in entries
               for attack in ("__import__('unittest.mock').mock.ANY",
                              "[__import__('os').getpid()]")]
    results = reward.verifier_pool(2, 2048).run(golds + attacks, timeout=30)
    assert [value == 1.0 for value, _ in results] == [True] * len(golds) + [False] * len(attacks)


@pytest.mark.parametrize("text, names, plain", [
    ("-1806*x**5 + 987*x**4 - 6708*x**2", True, True),
    ("(3 + 5) * 7 - 100 / 4", True, True),
    ("x^2 + sqrt(y)", True, True),
    ("[[1, 0], [0, 1]]", False, True),
    ("['a', 'b']", False, True),
    ("__import__('os')", True, False),
    ("exec(bytes((112, 114)).decode())", True, False),  # no quotes needed to build a program
    ("().__class__", True, False),
    ("x.conjugate()", True, False),
    ("lambda: 1", True, False),
    ("[c for c in 'ab']", False, False),
    ("'a' + 'b'", True, False),  # strings only where names are not allowed
    ("(" * 500 + "1" + ")" * 500, True, False),
])
def test_plain_expression_admits_data_and_nothing_that_calls(text, names, plain):
    assert reward.plain_expression(text, names) is plain


def test_a_countdown_answer_that_kills_the_trainer_is_a_zero():
    # the worker used to run countdown's parse_expr on the answer: the answer killed the worker's
    # parent
    answer = json.dumps(RG["countdown"])
    response = "<answer>__import__('os').kill(__import__('os').getppid(), 9)</answer>"
    done = subprocess.run([sys.executable, str(ROOT / "reward.py"), "--task", "reasoning_gym",
                           "--response", response, "--answer", answer], capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "reward: 0.0\n"), done.stderr[-2000:]


def test_a_countdown_answer_cannot_add_sympys_constants_to_the_numbers():
    """Countdown's scorer counts the digits an answer uses; `E/E` (or `pi/pi`) is a 1 with none, so
    any target was reachable as the sum of the numbers plus enough of them."""
    entry = RG["countdown"]["entry"]
    numbers, target = entry["metadata"]["numbers"], entry["metadata"]["target"]
    gap = target - sum(numbers)
    sums = " + ".join(map(str, numbers))
    hedges = [f"<answer>{sums} {'+' if gap > 0 else '-'} ({' + '.join([one] * abs(gap))})</answer>"
              for one in ("E/E", "pi/pi", "E**(E - E)")]
    items = [("reasoning_gym", response, RG["countdown"]) for response in hedges]
    # the gold scores
    items.append(("reasoning_gym", f"<answer>{entry['answer']} </answer>x", RG["countdown"]))
    assert reward.score_batch(items, workers=2) == [0.0] * len(hedges) + [1.0]


FORGER = '''
def _forge_replies(answer, entry):
    """A scorer that runs the answer, as several reasoning-gym scorers do: it finds the request id in its
    caller's frame and writes a reply of 1.0 on every descriptor it has and every one of its parent's."""
    import os, sys
    frame, request_id = sys._getframe(), "?"
    while frame is not None:
        request_id = frame.f_locals.get("request", {}).get("id", request_id)
        frame = frame.f_back
    forged = (json.dumps({"id": request_id, "value": 1.0}) + "\\n").encode()
    for fd in range(64):
        try:
            os.write(fd, forged)
        except OSError:
            pass
        try:
            with open(f"/proc/{os.getppid()}/fd/{fd}", "wb") as f:
                f.write(forged)
        except OSError:
            pass
    return 0.0


def _kill_the_worker(answer, entry):
    import os
    os.kill(os.getppid(), 9)
    return 1.0


def _evals_the_answer(answer, entry):  # like a scorer of a dataset nobody has reviewed
    return float(eval(answer))


RG_SCORER_OVERRIDES["forge_replies"] = _forge_replies
RG_SCORER_OVERRIDES["kill_the_worker"] = _kill_the_worker
RG_SCORER_OVERRIDES["evals_the_answer"] = _evals_the_answer
'''  # noqa: E501


def pool_importing(reward_source: str, directory: Path) -> sandbox.VerifierPool:
    """A pool of one worker that imports `reward_source` as reward.py, beside sandbox.py."""
    (directory / "reward.py").write_text(reward_source)
    return sandbox.VerifierPool(1, 2048, files=[str(directory / "reward.py"), sandbox.__file__],
                                module="reward")


def with_forger(source: str) -> str:
    return source.replace("\nWARM_UP_CHECKS", FORGER + "\nWARM_UP_CHECKS", 1)


def test_an_unreviewed_scorer_that_evals_the_answer_cannot_run_it(tmp_path):
    # no patched eval reaches this scorer; the audit hook stops the compile in the worker and in the
    # child
    pool = pool_importing(with_forger(Path(reward.__file__).read_text()), tmp_path)
    try:
        evals = {"dataset": "evals_the_answer", "entry": {}}
        results = pool.run([("reasoning_gym", ["(lambda: 1.0)()", evals]),
                            ("reasoning_gym", ["__import__('os').system('true') + 1.0", evals])],
                           timeout=60)
    finally:
        pool.close()
    assert results == [(0.0, "error"), (0.0, "error")]


def test_a_scorer_that_runs_code_cannot_forge_replies_or_outlive_its_check(tmp_path):
    # the second line of defence, if a scorer ever did run an answer: it runs in a child with no way
    # to the reply channel, so its own result is what it returned, and the next request is unharmed
    pool = pool_importing(with_forger(Path(reward.__file__).read_text()), tmp_path)
    try:
        forge, kill = ({"dataset": name, "entry": {}}
                       for name in ("forge_replies", "kill_the_worker"))
        results = pool.run([("reasoning_gym", ["x", forge]), ("math", ["7", "8"]),
                            ("reasoning_gym", ["x", kill]), ("math", ["x(x+1)", "x^2+x"])],
                           timeout=60)
    finally:
        pool.close()
    # the forger's own check is an error (what it wrote on its own pipe is not a number); the rest
    # stand
    assert results == [(0.0, "error"), (0.0, "ok"), (0.0, "error"), (1.0, "ok")]


FAKE_WORKER = '''
import json, sys
print("ready", flush=True)
for line in sys.stdin:
    request = json.loads(line)
    print(json.dumps(%s), flush=True)
'''


@pytest.mark.parametrize("reply", [
    '{"id": "someone else", "value": 1.0}', '{"id": request["id"], "value": True}',
    '{"id": request["id"], "value": 1}', '{"id": request["id"], "value": 2.0}',
    '{"id": request["id"], "value": 1.0, "also": 1}', '[request["id"], 1.0]',
])
def test_a_worker_reply_that_is_not_exactly_the_answer_to_its_request_scores_zero_and_the_worker_goes(tmp_path, reply):  # noqa: E501
    pool = pool_importing(FAKE_WORKER % reply, tmp_path)
    try:
        worker = pool._ready(0)
        assert pool.run([("math", ["1", "1"])], timeout=30) == [(0.0, "error")]
        # killed: it is no longer the process we started
        assert worker.returncode is not None and pool.procs[0] is not worker
    finally:
        pool.close()


@pytest.mark.parametrize("data", [
    b'{"id": "r1", "value": 1.0}\n{"id": "r2", "value": 1.0}\n',  # one reply each
    b'{"id": "r1", "value": NaN}\n', b'{"id": "r1", "value": Infinity}\n',
    b"[" * 4000 + b"]" * 4000 + b"\n", b'{"id": "r1", "value": 1.0}',  # no newline
    b"\xff\xfe\n",
])
def test_read_reply_accepts_one_line_of_plain_data_only(data):
    assert sandbox.read_reply(data, "r1") == ((0.0, "error"), False)
    assert sandbox.read_reply(b'{"id": "r1", "value": 0.5}\n', "r1") == ((0.5, "ok"), True)
    assert (sandbox.read_reply(b'{"id": "r1", "error": "ValueError: x"}\n', "r1")
            == ((0.0, "error"), True))


def assert_a_worker_scores_inside_bubblewrap():
    pool = sandbox.VerifierPool(workers=1, memory_mb=2048, files=reward.WORKER_FILES,
                                module="reward")
    try:
        assert pool.run([("math", ["1/2", "0.5"])], timeout=60) == [(1.0, "ok")]
        with open(f"/proc/{pool.procs[0].pid}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[0].endswith(b"bwrap")
    finally:
        pool.close()


def test_verifier_workers_run_inside_bubblewrap():
    if not shutil.which("bwrap") or sandbox.sandbox().mode != "bwrap":
        pytest.skip("bubblewrap cannot run here")
    assert_a_worker_scores_inside_bubblewrap()


def test_a_worker_that_fails_to_start_leaves_later_workers_in_bubblewrap(tmp_path):
    """A failed start is that worker's own (here it complains instead of reporting ready), not a
    sign that bubblewrap cannot run it: it raises, and the next worker starts in bubblewrap."""
    if sandbox.sandbox().mode != "bwrap":
        pytest.skip("bubblewrap cannot run here")
    (tmp_path / "complains.py").write_text("def serve(memory_mb, isolated, kinds):\n"
                                           "    print('not warmed up', flush=True)\n")
    failing = sandbox.VerifierPool(1, 2048, files=[str(tmp_path / "complains.py")],
                                   module="complains")
    try:
        with pytest.raises(RuntimeError, match="failed to start: not warmed up"):
            failing.run([("math", ["1", "1"])], timeout=60)
    finally:
        failing.close()
    assert_a_worker_scores_inside_bubblewrap()


def test_a_verifier_worker_holds_no_capability_to_undo_its_read_only_binds():
    """A root trainer's worker is uid 0 in its namespace: with any capability left it could remount
    the module copy it imports (and the interpreter's directories) writable."""
    if sandbox.sandbox().mode != "bwrap":
        pytest.skip("bubblewrap cannot run here")
    pool = sandbox.VerifierPool(workers=1, memory_mb=2048, files=reward.WORKER_FILES,
                                module="reward")
    ms_remount_bind = 0x20 | 0x1000
    probe = ("import ctypes, os; "
             "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0]); "
             "libc = ctypes.CDLL(None, use_errno=True); "
             f"print(libc.mount(b'none', b'{sandbox.WORKER_DIR}', None, {ms_remount_bind}, None)); "
             f"print(os.access('{sandbox.WORKER_DIR}/reward.py', os.W_OK))")
    try:
        worker = pool.command(sandbox._worker_isolation())[:-1] + [probe]
        lines = subprocess.run(worker, capture_output=True, text=True, timeout=60).stdout.split()
    finally:
        pool.close()
    assert lines[:3] == ["0000000000000000", "-1", "False"]


@pytest.mark.parametrize("isolated", [True, False])
def test_verifier_workers_start_from_files_whatever_the_size_of_reward_py(tmp_path, monkeypatch,
                                                                          isolated):
    """Linux caps one argument at 128 KiB (MAX_ARG_STRLEN): a worker given a module's text as an
    argument would not start once the file grew past it, so workers start from files."""
    if isolated and sandbox.sandbox().mode != "bwrap":
        pytest.skip("bubblewrap cannot run here")
    if not isolated:
        monkeypatch.setattr(sandbox, "_worker_isolation", lambda: [])
    padded = Path(reward.__file__).read_text() + "\n# padding\n" * (12 << 10)
    assert len(padded.encode()) > 128 << 10
    pool = pool_importing(padded, tmp_path)
    try:
        assert pool.run([("math", ["1/2", "0.5"]), ("math", ["x(x+1)", "x^2+x"])],
                        timeout=60) == [(1.0, "ok")] * 2
        with open(f"/proc/{pool.procs[0].pid}/cmdline", "rb") as f:
            arguments = f.read().split(b"\0")
        assert (arguments[0].endswith(b"bwrap")) is isolated
        assert max(map(len, arguments)) <= 4096  # no module text, only paths and a one-line start
        if isolated:  # the copy, read-only at a fixed path: nothing of the repository or its data
            binds = [arguments[i + 1:i + 3] for i, a in enumerate(arguments) if a == b"--ro-bind"]
            assert [pool.directory.encode(), sandbox.WORKER_DIR.encode()] in binds
            assert not ({bind[0] for bind in binds}
                        & {str(ROOT).encode(), str(ROOT / "data").encode()})
        assert sorted(os.listdir(pool.directory)) == ["reward.py", "sandbox.py"]
    finally:
        pool.close()
    assert len(sandbox.HARNESS) < 16 << 10 and len(sandbox.TESTER) < 16 << 10  # a program's script


# ---- class 3: responses that used to raise out of score_batch ------------------------------------

def test_an_integer_longer_than_pythons_int_limit_is_compared_not_raised():
    digits = "9" * 5000  # int() refuses more than 4,300 digits
    assert reward.score("arith", f"\\boxed{{{digits}}}", "12") == 0.0
    assert reward.score("arith", f"\\boxed{{+000{digits}}}", digits) == 1.0
    assert reward.score("arith", f"The answer is {digits}", "-" + digits) == 0.0


def test_responses_that_are_not_text_are_counted_errors_not_exceptions():
    stats = reward.VerifyStats()
    items = [("math", None, "1"), ("arith", 42, "42"),
             ("reasoning_gym", b"<answer>1</answer>", RG["gcd"]), ("math", "\\boxed{1}", "1")]
    assert reward.score_batch(items, workers=1, stats=stats) == [0.0, 0.0, 0.0, 1.0]
    assert stats.errors == 3


def test_deeply_nested_answers_score_zero_on_every_reasoning_gym_task():
    config = reward.VerifyConfig(max_answer_chars=1 << 20)  # let them reach the scorers
    nested = ["[" * 100_000 + "]" * 100_000, "{\"a\": " * 50_000 + "1" + "}" * 50_000,
              "(" * 100_000 + ")" * 100_000]
    items = [rg_item(dataset, answer) for dataset in RG for answer in nested]
    assert reward.score_batch(items, workers=2, config=config) == [0.0] * len(items)


# ---- class 8: cost attacks in the trainer's process ----------------------------------------------

COSTLY = {
    "code fence then spaces": ("code", "```" + " " * 100_000 + "x"),
    "many code fences": ("code", "```" * 100_000 + "\n"),
    "unclosed answer tags": ("reasoning_gym", "<answer>" * 20_000),
    "answer line with trailing spaces": ("arith", "answer: 1" + " " * 100_000 + "x"),
    "repeated answer leads": ("arith", "the answer is " * 20_000),
    "unclosed boxes": ("math", "\\boxed{" * 20_000),
    # groups a gap between two boxes could be read as in several ways (9 took 20 s)
    "text groups between boxes": ("math", "\\boxed{5}" + "\\text{ }" * 12 + " q \\boxed{6}"),
    "font groups between boxes": ("math", "\\boxed{5}" + "\\mathrm{ }" * 12 + " q \\boxed{6}"),
    "macro label between boxes": ("math", "$\\boxed{3}$, $" + "\\overline{AB}\\," * 9
                                  + "$ is $\\boxed{12}$."),
}


@pytest.mark.parametrize("name", COSTLY)
def test_extraction_is_linear_on_adversarial_responses(name):
    task, response = COSTLY[name]
    start = time.perf_counter()
    reward.final_answer(task, response)
    assert time.perf_counter() - start < 0.5  # the backtracking regexes took seconds to minutes


@pytest.mark.parametrize("response, expected", [
    # fences inside a line of prose open nothing
    ("```python\nprint(1)\n```\nthen ```js\nx\n``` and ```py\nprint(2)\n```", "print(1)\n"),
    ("````python\nprint(3)\n```", "print(3)\n"),  # four open it; no four close it: three do
    ("``` \nprint(4)\n```", "print(4)\n"),
    ("```Python3\nprint(5)\n```", "print(5)\n"),
    ("```python\nprint(6)", "print(6)"),  # unclosed: to the end of the response
    ("```javascript\nx\n```", None),
])
def test_last_code_block_edge_cases(response, expected):
    assert reward.last_code_block(response) == expected


@pytest.mark.parametrize("response, expected", [
    ("<answer>1</answer> <answer> 2 </answer>", "2"), ("<answer>1</answer></answer>", "1"),
    ("<answer><answer>3</answer>", "<answer>3"), ("<answer>4", None), ("no tags", None),
])
def test_last_answer_tag_edge_cases(response, expected):
    assert reward.last_answer_tag(response) == expected


def test_a_response_over_the_length_cap_scores_zero_unread():
    stats = reward.VerifyStats()
    config = reward.VerifyConfig()
    padded = "x" * config.max_response_chars + " \\boxed{5}"
    assert reward.score_batch([("math", padded, "5"), ("math", "\\boxed{5}", "5")], config=config,
                              stats=stats) == [0.0, 1.0]
    assert stats.too_long == 1 and stats.as_log()["verify/too_long"] == 1


def test_a_step_stops_verifying_when_its_time_budget_is_spent():
    config = reward.VerifyConfig(timeout=30.0, step_timeout=2.0)
    # each runs for minutes
    towers = [("math", f"\\boxed{{{k}^{{9^{{9^{{9}}}}}}}}", "1") for k in range(2, 6)]
    stats = reward.VerifyStats()
    start = time.monotonic()
    rewards = reward.score_batch(towers, workers=1, config=config, stats=stats)
    assert rewards == [0.0] * 4 and stats.over_budget == 4
    assert time.monotonic() - start < 10  # the budget, not 4 x 30 s
    assert reward.score("math", "\\boxed{2}", "2") == 1.0  # the pool recovers


def test_score_batch_calls_in_concurrent_threads_share_the_verifier_workers_safely():
    """Threads that score at once (an evaluation beside training) use one pool of workers: its
    requests and replies used to cross, so calls raised out of score_batch or scored right
    answers 0."""
    # no fast path: workers
    items = [("math", f"\\boxed{{{k}x+x^{k}}}", f"x^{k}+{k}x") for k in range(2, 30)]
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: reward.score_batch(items, 2), range(3)))
    assert results == [[1.0] * len(items)] * 3


# ---- class 9: answers that hedge -----------------------------------------------------------------

@pytest.mark.parametrize("box, gold, expected", [
    ("6=5", "5", 0.0),  # a false equation is not its right-hand side
    ("x = 6 = 5", "5", 0.0),
    ("5 = 6", "5", 0.0),
    ("x=5", "5", 1.0), ("2+3=5", "5", 1.0), ("\\frac{10}{2} = 5", "5", 1.0), ("a+b = 5", "5", 1.0),
    ("y = 2x+1", "y=2x+1", 1.0),  # an equation as the gold answer is compared whole
    # a false equation in brackets
    ("(6 = 5)", "5", 0.0), ("[6=5]", "5", 0.0), ("\\{6=5\\}", "5", 0.0),
    ("6 \\equiv 5", "5", 0.0),
])
def test_an_equation_in_the_box_counts_only_if_it_is_true(box, gold, expected):
    assert reward.score("math", f"so \\boxed{{{box}}}", gold) == expected


@pytest.mark.parametrize("box", [
    "6 \\implies 5", "6 \\iff 5", "6 \\to 5", "6 \\Rightarrow 5", "6 \\cong 5", "6 \\sim 5",
    "6 \\therefore 5", "6 \\mid 5", "6 \\\\ 5", "6 & 5", "6 \\cdot{} 5", "6 \\times{} 5",
    "6 \\quad{} 5", "6 \\text{,} 5", "6\\dots 5", "\\cancel{6} 5", "\\not{6} 5", "\\label{6} 5",
    "\\color{red}{6} 5", "6 \\hspace{1cm} 5",
])
def test_a_box_of_two_values_is_not_read_as_its_last_number(box):
    """math-verify reads a box its LaTeX grammar cannot parse by picking out its last number: a
    policy writes a wrong value and the right one joined by any symbol the grammar does not know.
    (Checked in this process too: how a worker's environment reaches that fallback differs between
    machines.)"""
    assert reward.check_math(box, "5") is False
    assert reward.score("math", f"so \\boxed{{{box}}}", "5") == 0.0


def test_spell_backward_gives_no_credit_for_the_word_plus_junk():
    entry = {"dataset": "spell_backward",
             "entry": {"question": "?", "answer": "tnemirepxe", "metadata": {}}}
    # the package sums 1/10 per matching letter: 0.9999999999999999, not its own 1.0, so it is not
    # docked
    assert reward.score("reasoning_gym", "<answer>tnemirepxeXYZ</answer>", entry) == 0.0
    assert reward.score("reasoning_gym", "<answer>Tnemirepxe</answer>", entry) == 1.0


def test_a_reasoning_gym_task_without_a_gold_answer_is_refused():
    logic = {"dataset": "propositional_logic",
             "entry": {"question": "?", "answer": None, "metadata": {}}}
    with pytest.raises(ValueError, match="propositional_logic.*no gold answer"):
        reward.score("reasoning_gym", "<answer>P</answer>", logic)
