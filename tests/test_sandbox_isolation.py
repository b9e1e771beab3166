"""What one sandboxed program cannot do to the trainer or to the programs beside it: reach the
kernel's keyrings, trace processes, make user namespaces (sandbox.py's seccomp filter and fresh
session keyring), or take the machine's CPU from its neighbours (a CPU cgroup per sandbox, tests
timed in its CPU time, and a fair share of the step's budget per response)."""

import ctypes
import errno
import platform

import pytest

import reward
import sandbox

needs_bwrap = pytest.mark.skipif(sandbox.sandbox().mode != "bwrap",
                                 reason="bubblewrap sandbox unavailable "
                                        "(apt-get install bubblewrap)")
needs_cpu_cgroup = pytest.mark.skipif(
    not {"cpu", "cpuacct"} <= set(sandbox._cgroup_parents()),
    reason="no cpu and cpuacct cgroup this process may create")

SYS_ADD_KEY = {"x86_64": 248, "aarch64": 217}  # the kernel's syscall tables, as SYS_KEYCTL
KEYCTL_UNLINK, KEYCTL_READ = 9, 11
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = -3, -4


def fenced(program: str) -> str:
    return f"```python\n{program}\n```"


def prints(expected: str) -> dict:
    return {"inputs": [""], "outputs": [expected]}


@pytest.fixture
def trainers_key():
    """The id of a key in this process's session keyring, as a trainer's credentials would be."""
    machine = platform.machine()
    if machine not in SYS_ADD_KEY:
        pytest.skip(f"no syscall numbers for {machine}")
    libc = ctypes.CDLL(None, use_errno=True)
    key = libc.syscall(SYS_ADD_KEY[machine], b"user", b"brorl-trainer-secret", b"secret-7",
                       8, ctypes.c_int(KEY_SPEC_SESSION_KEYRING))
    if key < 0:
        pytest.skip(f"the kernel has no keyrings here ({errno.errorcode[ctypes.get_errno()]})")
    yield key
    libc.syscall(sandbox.SYS_KEYCTL[machine], KEYCTL_UNLINK, key, KEY_SPEC_SESSION_KEYRING)


@needs_bwrap
def test_a_program_cannot_read_add_or_unlink_keys(trainers_key):
    machine = platform.machine()
    keyctl, add_key = sandbox.SYS_KEYCTL[machine], SYS_ADD_KEY[machine]
    program = (f"import ctypes\nlibc = ctypes.CDLL(None)\n"
               f"buffer = ctypes.create_string_buffer(64)\n"
               f"done = [libc.syscall({keyctl}, {KEYCTL_READ}, {trainers_key}, buffer, 64) >= 0,\n"
               f"        libc.syscall({keyctl}, {KEYCTL_UNLINK}, {trainers_key}, "
               f"{KEY_SPEC_SESSION_KEYRING}) >= 0]\n"
               f"for keyring in ({KEY_SPEC_SESSION_KEYRING}, {KEY_SPEC_USER_KEYRING}):  # a later "
               f"sample's\n"
               f"    done.append(libc.syscall({add_key}, b'user', b'left', b'x', 1, "
               f"ctypes.c_int(keyring)) >= 0)\n"
               f"print(sum(done), buffer.value.decode())")
    assert reward.run_program(program, prints("0")).passed == 1
    buffer = ctypes.create_string_buffer(64)
    still_there = ctypes.CDLL(None).syscall(keyctl, KEYCTL_READ, trainers_key, buffer, 64)
    assert (still_there, buffer.value) == (8, b"secret-7")


@needs_bwrap
def test_a_program_cannot_trace_processes_make_user_namespaces_or_open_io_uring():
    program = ("import ctypes, os, shutil, subprocess\nlibc = ctypes.CDLL(None, use_errno=True)\n"
               "done = []\nr, w = os.pipe()\nparent = os.getpid()\nif os.fork() == 0:\n"
               "    attached = libc.ptrace(16, parent, None, None) == 0  # PTRACE_ATTACH\n"
               "    os.write(w, b'1' if attached else b'0')\n    os._exit(0)\n"
               "done.append(os.read(r, 1) == b'1')\nos.wait()\n"
               "done.append(libc.unshare(0x10000000) == 0)  # CLONE_NEWUSER\n"
               "params = ctypes.create_string_buffer(120)  # struct io_uring_params\n"
               "done.append(libc.syscall(425, 8, params) >= 0)  # io_uring_setup\n"
               "if shutil.which('unshare'):\n"
               "    done.append(subprocess.run(['unshare', '-U', 'true']).returncode == 0)\n"
               "print(sum(done))")
    assert reward.run_program(program, prints("0")).passed == 1


@needs_bwrap
def test_programs_with_threads_and_subprocesses_still_pass():
    program = ("import subprocess, sys, threading\nfound = []\n"
               "threads = [threading.Thread(target=found.append, args=(i,)) for i in range(4)]\n"
               "for t in threads:\n    t.start()\nfor t in threads:\n    t.join()\n"
               "child = subprocess.run([sys.executable, '-c', 'print(6)'], capture_output=True)\n"
               "print(sum(found) + int(child.stdout))")
    assert reward.run_program(program, prints("12")).status == "ok"


# Busy loops in sessions of their own (out of the program's autogroup), 40 of them, running while
# the program answers its tests slowly enough to outlive its neighbours' tests.
BUSY_LOOPS = ("import os, time\nif not os.path.exists('started'):\n"
              "    open('started', 'w').close()\n    for _ in range(40):\n"
              "        if os.fork() == 0:\n            os.setsid()\n"
              "            while True:\n                pass\ntime.sleep(0.9)\nprint(input())")
# ~0.2 s of CPU per test on an idle core: well past the second a test has on a core shared with 40
# busy loops
SQUARES = "n = int(input())\nprint(sum(i * i for i in range(n)))"


@needs_bwrap
@needs_cpu_cgroup
def test_busy_loops_of_one_program_do_not_time_out_the_correct_programs_beside_it():
    sizes = [5_000_000 + k for k in range(3)]
    squares = {"inputs": [f"{n}\n" for n in sizes],
               "outputs": [str((n - 1) * n * (2 * n - 1) // 6) for n in sizes]}
    echo = {"inputs": [f"{k}\n" for k in range(5)], "outputs": [str(k) for k in range(5)]}
    neighbours = [("code", fenced(SQUARES + f"\n# neighbour {k}"), squares) for k in range(6)]
    stats = reward.VerifyStats()
    rewards = reward.score_batch([("code", fenced(BUSY_LOOPS), echo), *neighbours], workers=7,
                                 config=reward.VerifyConfig(test_timeout=1.0), stats=stats)
    assert rewards[1:] == [1.0] * 6, stats  # (the busy program's own loops time it out)


@needs_bwrap
def test_a_response_that_spends_its_share_of_the_budget_leaves_the_others_theirs():
    """Scored one at a time, a response that passes each of its tests just in time would take the
    whole step's budget and leave the correct responses after it none."""
    many = {"inputs": [f"{k}\n" for k in range(20)], "outputs": [str(k) for k in range(20)]}
    slow = fenced("import time\ntime.sleep(0.8)\nprint(input())")
    correct = [fenced(f"print(input())  # response {k}") for k in range(2)]
    config = reward.VerifyConfig(test_timeout=1.0, step_timeout=6.0)
    stats = reward.VerifyStats()
    rewards = reward.score_batch([("code", slow, many)] + [("code", c, many) for c in correct],
                                 workers=1, config=config, stats=stats)
    assert rewards == [0.0, 1.0, 1.0] and stats.over_budget == 1

