"""Verifier throughput: reward.score_batch (fast path + group cache + verifier processes) against
plain math-verify called once per response, side by side on the same responses; and sandboxed code.

Math groups imitate a BroRL step (N=512 responses per prompt): most responses give the canonical
correct answer, many give equivalent spellings, some a popular wrong answer, a long tail of other
wrong answers, a few no box at all. "plain" is what a trainer without this module does: for every
response, parse the gold answer and the response with math-verify and verify. Both must give
identical rewards (checked), so the groups leave out the one spelling where the two knowingly
differ: a trailing period (`\\boxed{42.}`), which math-verify rejects and reward.py strips. The
verifier processes are started before timing (a trainer keeps them for the whole run); the cold
first call is reported too.

    python bench/reward_throughput.py                 # 1 x 512 group, 8 x 512 heavy mix, code
    python bench/reward_throughput.py --workers 1
"""

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import reward  # noqa: E402
import sandbox  # noqa: E402

# gold, equivalent spellings, popular wrong answers, long-tail wrong answers
PROBLEMS = [
    ("\\frac{7}{12}", ["\\dfrac{7}{12}", "7/12", "\\frac{14}{24}"],
     ["\\frac{5}{12}", "\\frac{7}{6}"], ["\\frac{1}{12}", "0.5", "\\frac{7}{13}", "12/7"]),
    ("204", [" 204 ", "204.0"], ["203", "210"], ["1", "102", "408", "2040"]),
    ("2\\sqrt{2}", ["\\sqrt{8}", "2 \\sqrt 2", "\\sqrt{2}\\cdot 2"], ["\\sqrt{2}", "4"],
     ["2", "\\sqrt{6}", "8"]), ("(-\\infty, 3]", ["(-\\infty,3]", "\\left(-\\infty, 3\\right]"],
     ["(-\\infty, 3)", "[3, \\infty)"], ["(3, \\infty)", "(-\\infty, -3]", "[-3, 3]"]),
    ("x^2+5x", ["x(x+5)", "5x+x^2", "x^{2}+5x"], ["x^2+5", "x(x-5)"],
     ["x^2", "5x", "x^2-5x", "x+5"]),
    ("\\frac{\\sqrt{3}}{2}", ["\\sqrt{3}/2", "\\frac{\\sqrt 3}{2}", "\\frac{3}{2\\sqrt{3}}"],
     ["\\frac{1}{2}", "\\sqrt{3}"], ["\\frac{\\sqrt{2}}{2}", "1", "\\frac{\\sqrt{3}}{3}"]),
    ("\\{1, 2, 3\\}", ["\\{3,2,1\\}", "\\{1,2,3\\}"], ["\\{1, 2\\}", "\\{1,2,3,4\\}"],
     ["\\{0\\}", "\\{2, 3\\}"]), ("-50", ["- 50", "-50.0"], ["50", "-5"], ["-500", "-49", "0"]),
]
REASONING = "Let me work through this carefully. " * 12


def math_group(problem, n: int, rng: random.Random) -> list[tuple[str, str, str]]:
    """n responses: 55% canonical, 20% equivalent spellings, 15% popular wrong, 5% long tail, 5% no
    box."""
    gold, equivalent, popular_wrong, tail = problem
    items = []
    for _ in range(n):
        u = rng.random()
        if u < 0.55:
            answer = gold
        elif u < 0.75:
            answer = rng.choice(equivalent)
        elif u < 0.90:
            answer = rng.choice(popular_wrong)
        elif u < 0.95:
            answer = rng.choice(tail)
        else:
            items.append(("math", REASONING + "I am not sure how to finish.", gold))
            continue
        items.append(("math", f"{REASONING}So the final answer is $\\boxed{{{answer}}}$.", gold))
    return items


def plain_math_verify(items) -> list[float]:
    from math_verify import parse, verify

    return [float(verify(parse(f"${gold}$"), parse(response))) for _, response, gold in items]


def timed(fn, *args):
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def bench_math(name: str, items, workers: int) -> None:
    plain, plain_s = timed(plain_math_verify, items)
    stats = reward.VerifyStats()
    fast, fast_s = timed(lambda: reward.score_batch(items, workers=workers, stats=stats))
    assert fast == plain, (f"{name}: rewards differ on "
                           f"{sum(a != b for a, b in zip(fast, plain))} responses")
    print(f"| {name} | {len(items)} | {stats.checks} | {len(items) / plain_s:,.0f} | "
          f"{len(items) / fast_s:,.0f} | "
          f"{plain_s / fast_s:.1f}x | {stats.fast_path / len(items):.0%} | "
          f"{sum(fast) / len(fast):.3f} |")


def print_code_table(items: list, tests: int, unit: str) -> None:
    """Programs/s and tests (or calls)/s of scoring `items`, each program running `tests` of them,
    with 1 and 2 workers. Every program is correct: SystemExit, after the table, if any failed (a
    broken sandbox is fast at failing)."""
    print(f"| workers | programs/s | {unit} | passed |")
    print("| --- | --- | --- | --- |")
    failed = 0
    for workers in (1, 2):
        rewards, seconds = timed(reward.score_batch, items, workers)
        passed = sum(r == 1.0 for r in rewards)
        failed += len(items) - passed
        print(f"| {workers} | {len(items) / seconds:.1f} | {len(items) * tests / seconds:.0f} | "
              f"{passed}/{len(items)} |")
    if failed:
        raise SystemExit(f"error: {failed} runs of correct programs did not pass")


def bench_code(programs: int, tests: int) -> None:
    rng = random.Random(0)
    inputs = [f"{rng.randint(-99, 99)} {rng.randint(-99, 99)}\n" for _ in range(tests)]
    spec = {"inputs": inputs, "outputs": [str(sum(map(int, x.split()))) for x in inputs]}
    # distinct programs (a comment makes each one unique), so the group cache does not hide the runs
    items = [("code",
              f"```python\n# variant {i}\na, b = map(int, input().split())\nprint(a + b)\n```",
              spec)
             for i in range(programs)]
    reward.score_batch(items[:1])  # probe the sandbox outside the timing
    print(f"\ncode: {programs} distinct programs x {tests} stdin tests, sandbox: "
          f"{sandbox.sandbox().mode}\n")
    print_code_table(items, tests, "tests/s")
    # HumanEval style: the test in a sandbox of its own, each assert's call relayed to the
    # program's sandbox
    asserts = "".join(f"    assert candidate({a}, {b}) == {a + b}\n"
                      for a, b in (map(int, x.split()) for x in inputs))
    check = {"prompt": "def add(a, b):\n    \"\"\"a + b\"\"\"\n", "entry_point": "add",
             "test": "def check(candidate):\n" + asserts}
    items = [("code", f"```python\n# variant {i}\ndef add(a, b):\n    return a + b\n```", check)
             for i in range(programs)]
    print(f"\ncode, HumanEval style: {programs} distinct programs x a check of {tests} asserts\n")
    print_code_table(items, tests, "calls/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=512, help="responses per prompt")
    parser.add_argument("--workers", type=int, default=2, help="verifier processes")
    parser.add_argument("--programs", type=int, default=40,
                        help="distinct programs for the code benchmark")
    parser.add_argument("--tests", type=int, default=10, help="tests per program")
    args = parser.parse_args()
    rng = random.Random(0)
    single = math_group(PROBLEMS[0], args.n, rng)
    heavy = [item for problem in PROBLEMS for item in math_group(problem, args.n, rng)]
    # not one of the timed problems
    warm_up = ("\\frac{3}{4}", ["0.75"], ["y^2+1", "(0, 1)"], ["\\{5\\}"])
    _, cold_s = timed(reward.score_batch, math_group(warm_up, args.n, rng), args.workers)
    print(f"cold first call (starts {args.workers} verifier processes): {cold_s:.2f} s\n")
    print("| group | responses | distinct checks | plain math-verify answers/s | score_batch "
          "answers/s | speed-up | fast path | reward mean |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    bench_math(f"1 prompt x {args.n} (fraction)", single, args.workers)
    bench_math(f"1 prompt x {args.n} (integer)", math_group(PROBLEMS[1], args.n, rng), args.workers)
    bench_math(f"{len(PROBLEMS)} prompts x {args.n} (heavy mix)", heavy, args.workers)
    bench_code(args.programs, args.tests)


if __name__ == "__main__":
    main()
