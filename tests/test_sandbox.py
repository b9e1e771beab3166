"""reward.py's code verifier: APPS/TACO test specs, and untrusted programs that must not escape."""

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

import reward

ADD = {"inputs": ["1 2\n", "10 -3\n", "5 5\n"], "outputs": ["3\n", "7\n", "10"]}
FAST = reward.VerifyConfig(test_timeout=1.0)


def fenced(program: str) -> str:
    return f"Here is my solution.\n```python\n{program}\n```\nDone."


def test_stdin_programs_pass_when_every_output_matches():
    assert reward.score("code", fenced("a, b = map(int, input().split())\nprint(a + b)"), ADD) == 1.0
    assert reward.score("code", fenced("a, b = map(int, input().split())\nprint(a + b + (a == 5))"), ADD) == 0.0
    assert reward.score("code", fenced("import sys\nprint(sum(map(int, sys.stdin.read().split())), ' ')"),
                        json.dumps(ADD)) == 1.0  # the spec as a JSON string; trailing spaces don't matter


def test_call_based_programs_with_functions_or_a_solution_class():
    spec = {"fn_name": "pair_sum", "inputs": [[[1, 2], 3], [[], 0]], "outputs": [[6], 0]}
    assert reward.score("code", fenced("def pair_sum(xs, k):\n    return sum(xs) + k"), spec) == 1.0
    leetcode = "class Solution:\n    def pair_sum(self, xs, k):\n        return sum(xs) + k"
    assert reward.score("code", fenced(leetcode), spec) == 1.0
    assert reward.score("code", fenced("def pair_sum(xs, k):\n    return (sum(xs), k)"), spec) == 0.0


def test_the_last_code_block_is_the_program_and_the_stats_count_tests():
    response = fenced("print('draft')") + fenced("a, b = map(int, input().split())\nprint(a + b if a != 10 else 0)")
    stats = reward.VerifyStats()
    assert reward.score_batch([("code", response, ADD)] * 3 + [("code", "no code", ADD)], stats=stats) == [0.0] * 4
    assert stats.checks == 1 and stats.cache_hits == 2  # three identical programs ran once
    assert (stats.code_tests_passed, stats.code_tests_total) == (6, 9)
    assert stats.as_log()["verify/code_test_pass_frac"] == pytest.approx(2 / 3)


def test_syntax_errors_and_exceptions_score_zero():
    assert reward.score("code", fenced("def f(:\n"), ADD) == 0.0
    assert reward.run_program("raise SystemExit(3)", ADD).passed == 0
    assert reward.run_program("1 / 0", ADD).status == "error: ZeroDivisionError"


# ---- attacks: each must score 0, leave no process alive, write nothing outside its sandbox -----------

needs_bwrap = pytest.mark.skipif(reward.sandbox().mode != "bwrap",
                                 reason="bubblewrap sandbox unavailable (apt-get install bubblewrap)")
MARKER = "ESCAPED-brorl-test"
OUTSIDE = [Path("/tmp") / MARKER, Path("/dev/shm") / MARKER, Path(__file__).parent / MARKER]

ATTACKS = {
    "infinite loop": "while True:\n    pass",
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "memory hog": "x = bytearray(8 << 30)\nprint('pwned')",
    "10 GB file": "with open('big', 'wb') as f:\n    for _ in range(10240):\n        f.write(b'x' * (1 << 20))\nprint('pwned')",
    "sleeping grandchild": ("import subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True)\n"
                            "print('pwned')"),
    "read /etc/passwd": "print(open('/etc/passwd').read())",
    "kill the parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nprint('pwned')",
    "close stdout then loop": "import os, sys\nsys.stdout.close()\nos.close(1)\nwhile True:\n    pass",
    "print 100 MB": "print('x' * (100 << 20))",
    "write outside": "".join(f"try:\n    open({str(p)!r}, 'w').write('x')\nexcept OSError:\n    pass\n" for p in OUTSIDE)
                     + "print('pwned')",
}


def sandbox_processes() -> list[str]:
    """Live processes of the sandbox uids (zombies waiting for init to reap them are dead already)."""
    ps = subprocess.run(["ps", "-eo", "uid=,stat=,args="], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines()
            if reward.sandbox_uid(0) <= int(line.split()[0]) <= reward.sandbox_uid(reward.PROBE_SLOT) and not line.split()[1].startswith("Z")]


@needs_bwrap
@pytest.mark.parametrize("attack", ATTACKS)
def test_attacks_score_zero_and_leave_nothing_behind(attack):
    spec = {"inputs": ["3 4\n"], "outputs": ["7"]}
    stats = reward.VerifyStats()
    assert reward.score_batch([("code", fenced(ATTACKS[attack]), spec)], config=FAST, stats=stats) == [0.0]
    assert not any(p.exists() for p in OUTSIDE)
    assert not sandbox_processes()
    assert not subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True).stdout


@needs_bwrap
def test_the_network_is_unreachable_even_on_loopback():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
        assert reward.score("code", fenced(program), {"inputs": [""], "outputs": ["connected"]}, FAST) == 0.0
        assert reward.run_program(program, {"inputs": [""], "outputs": ["connected"]}, FAST).status.startswith("error")


@needs_bwrap
def test_the_sandbox_sees_no_environment_and_no_parent():
    program = "import os\nprint(sorted(os.environ), os.getppid(), os.getuid() == 0)"
    expected = "['HOME', 'LC_CTYPE', 'PATH', 'PWD'] 1 False"  # LC_CTYPE: Python's own UTF-8 coercion
    os.environ["BRORL_SECRET"] = "hunter2"
    try:
        assert reward.run_program(program, {"inputs": [""], "outputs": [expected]}, FAST).passed == 1
    finally:
        del os.environ["BRORL_SECRET"]


def test_the_unsafe_fallback_without_bubblewrap_still_limits_and_cleans_up(monkeypatch):
    fallback = reward.Sandbox("rlimits", reward.sandbox().python, "bubblewrap is not installed")
    monkeypatch.setattr(reward, "sandbox", lambda: fallback)
    unsafe = reward.VerifyConfig(test_timeout=1.0, unsafe_no_sandbox=True)
    with pytest.warns(RuntimeWarning, match="NO network or file-system isolation"):
        assert reward.score("code", fenced("a, b = map(int, input().split())\nprint(a + b)"), ADD, unsafe) == 1.0
        assert reward.run_program("while True:\n    pass", ADD, unsafe).status == "timeout"
        assert reward.run_program("x = bytearray(8 << 30)", ADD, unsafe).status == "error: MemoryError"
        grandchild = "import subprocess\nsubprocess.Popen(['sleep', '600'], start_new_session=True)\nprint('pwned')"
        assert reward.score("code", fenced(grandchild), ADD, unsafe) == 0.0
    if os.geteuid() == 0:  # as root the fallback kills every process of the sandbox uid
        assert not subprocess.run(["pgrep", "-f", "sleep 600"], capture_output=True).stdout
