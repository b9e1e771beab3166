"""The math verifier against the official grader: generated (gold, response) pairs, gold values of
many shapes times the spellings models write, each scored by reward.py and by plain math-verify
(`verify(parse(gold), parse(response))`, its default extraction configs). Every disagreement must be
one of INTENTIONAL_DIFFERENCES, which docs/verifiers.md lists too ("Where the verifiers differ from
the official graders, on purpose"). Also the classes of answers the differential found: hedges
through equations, absolute tolerances, and correct spellings that scored 0."""

import random
import time
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

import pytest

import reward
from conftest import ROOT

# name -> (this verifier's reward where math-verify gives the other one, why)
INTENTIONAL_DIFFERENCES = {
    "several candidates for one value": (
        0.0, "a box listing values for a single gold (`x = 6 \\lor x = 5`) states no one answer; "
             "math-verify drops the `\\lor` and reads the last"),
    "a side holding a value": (
        0.0, "`6x = 5` is not the answer 5: only a label (`x`, `f(3)`, `a_n`) may stand beside the "
             "value; math-verify reads any equation as its right-hand side"),
    "relative tolerance": (
        0.0, "numbers further apart than a relative 1e-5 differ; math-verify rounds to 6 decimal "
             "places, so 0 = 1.6e-19, and equates any two values below 1e-15 it cannot simplify "
             "apart"),
    "decimal places, not rounding": (
        1.0, "a decimal equals a number it agrees with to 6 decimal places (`1.5128205` = 59/39) "
             "or to a 15-digit float's precision (`5.1\\times10^{11}` = `51\\times10^{10}`); "
             "math-verify rounds both, which splits them across a rounding boundary or by the "
             "float's error"),
    "degree sign": (1.0, "`30°` is `30^\\circ`; math-verify's grammar cannot read `°`"),
    "repeating decimal": (1.0, "`0.\\overline{3}` is 1/3; math-verify reads it as 0"),
    "null delimiters": (1.0, "`\\left.5\\right.` is 5 (`\\left.` is no delimiter); math-verify "
                                "reads nothing"),
    "space before the box's brace": (1.0, "`\\boxed {5}` is a box; math-verify finds no answer"),
    "trailing period": (1.0, "`\\boxed{42.}` is 42, a sentence's full stop; math-verify reads the "
                             "string `42.`"),
    "bold number": (1.0, "`-\\mathbf{5}` is -5: a bold or italic number is the number; "
                         "math-verify reads `\\mathbf` as text, and `-\\mathbf{5}` as `-`"),
    "row break before a macro in an array": (
        1.0, "`\\\\\\frac{1}{2}` in an array is a row break, then 1/2; math-verify reads `\\\\` "
             "before a letter outside a `matrix` environment as one backslash (`\\\\frac`)"),
    "no box": (0.0, "the answer is the last box (the prompt asks for one); math-verify also reads "
                    "an unboxed 'the answer is 5'"),
}


@dataclass(frozen=True)
class Pair:
    gold: str
    response: str
    correct: bool  # what the generator meant: an equivalent spelling, or a wrong value
    difference: str | None = None  # the intentional difference this spelling falls under, if any


# ---- generation --------------------------------------------------------------------------------

def _decimal(value: Fraction, digits: int) -> str:
    """`value` rounded to `digits` significant digits, written as a plain decimal (the values
    generated here are all above 1e-4, so `g` writes no exponent)."""
    return f"{float(value):.{digits}g}"


def integer_answers(rng):
    n = rng.choice([rng.randint(-99, 99), rng.randint(1000, 99999)])
    spellings = [str(n), f"{n}.0", f"x = {n}", f"{n} "]
    if n >= 1000:
        spellings += [f"{n:,}", f"{n:,}".replace(",", "{,}"), f"{n:,}".replace(",", ",\\!")]
    wrong = [str(n + 1), str(n - 1), str(10 * n + 1)]
    pairs = [(str(n), s, True, None) for s in spellings] + [(str(n), w, False, None) for w in wrong]
    pairs.append((str(n), f"\\left.{n}\\right.", True, "null delimiters"))
    pairs += [(str(n), f"{n}.", True, "trailing period"),
              (str(n), f"-\\mathbf{{{-n}}}" if n < 0 else f"\\mathbf{{{n}}}", True, "bold number")]
    # hedges: a wrong value beside the right one, through an equation
    v = n + rng.randint(1, 9)
    pairs += [(str(n), f"x = {v}, x = {n}", False, "several candidates for one value"),
              (str(n), f"{v} \\text{{ or }} x = {n}", False, "several candidates for one value"),
              (str(n), f"y = {v} \\text{{ and }} x = {n}", False,
               "several candidates for one value"),
              (str(n), f"{v}x = {n}", False, "a side holding a value"),
              (f"x = {n}", f"x = {v} \\lor x = {n}", False, "several candidates for one value"),
              (f"x = {n}", f"x = {n}", True, None), (f"x = {n}", str(n), True, None)]
    return pairs


def fraction_answers(rng):
    """A fraction of any denominator, and one whose decimal repeats with a short period."""
    return [*_fraction_answers(rng, rng.randint(2, 40)),
            *_fraction_answers(rng, rng.choice([3, 6, 7, 9, 11, 12, 22, 27, 33, 37]))]


def _fraction_answers(rng, q: int):
    p = rng.choice([k for k in range(1, 3 * q) if Fraction(k, q).denominator == q] or [1])
    value, gold = Fraction(p, q), f"\\frac{{{p}}}{{{q}}}"
    k = rng.randint(2, 5)
    spellings = [f"\\dfrac{{{p}}}{{{q}}}", f"{p}/{q}", f"\\frac{{{k * p}}}{{{k * q}}}",
                 f"{k * p}/{k * q}", f"a = \\frac{{{p}}}{{{q}}}"]
    pairs = [(gold, s, True, None) for s in spellings]
    pairs.append((gold, _decimal(value, 8), True, "decimal places, not rounding"))
    pairs += [(gold, w, False, None) for w in
              (f"\\frac{{{p + 1}}}{{{q}}}", f"\\frac{{{q}}}{{{p}}}", _decimal(value * 1.01, 6))]
    whole, rest = divmod(p, q)
    period = _repeating_period(rest, q)
    if period:
        fixed, repeated = period
        pairs.append((gold, f"{whole}.{fixed}\\overline{{{repeated}}}", True, "repeating decimal"))
    return pairs


def _repeating_period(numerator: int, denominator: int):
    """The decimal digits of numerator/denominator (< 1) as (fixed part, repeating part), or None if
    it terminates or repeats after more than 12 digits."""
    digits, seen, r = "", {}, numerator
    while r and r not in seen and len(digits) < 12:
        seen[r] = len(digits)
        r *= 10
        digits += str(r // denominator)
        r %= denominator
    if not r or r not in seen:
        return None
    return digits[:seen[r]], digits[seen[r]:]


def decimal_answers(rng):
    cents = rng.randint(101, 99999)
    gold = f"{cents // 100}.{cents % 100:02d}"
    value = Fraction(cents, 100)
    spellings = [gold, f"{gold}0", f"\\frac{{{value.numerator}}}{{{value.denominator}}}",
                 f"\\${gold}", f"{gold}\\text{{ dollars}}"]
    wrong = [f"{(cents + 1) // 100}.{(cents + 1) % 100:02d}",
             f"{(cents + 10) // 100}.{(cents + 10) % 100:02d}", f"{gold}1"]
    return ([(gold, s, True, None) for s in spellings] + [(gold, w, False, None) for w in wrong]
            + [(f"\\${gold}", s, True, None) for s in (gold, f"\\${gold}")])


def surd_answers(rng):
    a, b = rng.randint(2, 9), rng.choice([2, 3, 5, 6, 7, 10, 11])
    gold = f"{a}\\sqrt{{{b}}}"
    spellings = [f"\\sqrt{{{a * a * b}}}", f"\\sqrt{{{b}}} \\cdot {a}",
                 f"{a} \\sqrt {b}" if b < 10 else f"{a} \\sqrt{{{b}}}",  # `\\sqrt 10` is sqrt(1)0
                 f"\\frac{{{2 * a}\\sqrt{{{b}}}}}{{2}}"]
    wrong = [f"{a + 1}\\sqrt{{{b}}}", f"{a}\\sqrt{{{b + 1}}}", f"\\sqrt{{{a * b}}}"]
    return [(gold, s, True, None) for s in spellings] + [(gold, w, False, None) for w in wrong]


def interval_and_tuple_answers(rng):
    a = rng.randint(-9, 5)
    b = a + rng.randint(1, 9)
    pairs = []
    for left, right in (("(", "]"), ("[", ")"), ("[", "]")):
        gold = f"{left}{a}, {b}{right}"
        pairs += [(gold, f"{left}{a},{b}{right}", True, None),
                  (gold, f"\\left{left}{a}, {b}\\right{right}", True, None),
                  (gold, f"{left}{a}, {b + 1}{right}", False, None),
                  (gold, f"({a}, {b})", left == "(" and right == ")", None)]
    gold = f"[{a}, \\infty)"
    pairs += [(gold, f"[{a},\\infty)", True, None), (gold, f"({a}, \\infty)", False, None)]
    point = f"({a}, {b}, {a + b})"  # a triple is a tuple, not an interval
    pairs += [(point, f"\\left({a},{b},{a + b}\\right)", True, None),
              (point, f"(x, y, z) = ({a}, {b}, {a + b})", True, None),
              (point, f"x = {a}, y = {b}, z = {a + b}", True, None),
              (point, f"({b}, {a}, {a + b})", False, None),
              (point, f"(x, y, z) = ({a}, {b}, {a + b + 1})", False, None)]
    return pairs


def solution_set_answers(rng):
    a, b = sorted(rng.sample(range(-12, 13), 2))
    pairs = []
    for gold in (f"{a}, {b}", f"\\{{{a}, {b}\\}}"):
        spellings = [f"{b}, {a}", f"x = {a}, x = {b}", f"x = {a} \\text{{ or }} x = {b}",
                     f"\\{{{b}, {a}\\}}", (str(a), str(b)), (f"x={a}", f"x={b}"),
                     (f"x = \\boxed{{{a}}}", f"x = \\boxed{{{b}}}")]
        wrong = [str(a), f"{a}, {b + 1}", f"{a}, {b}, {b + 1}"]
        pairs += [(gold, s, True, None) for s in spellings]
        pairs += [(gold, w, False, None) for w in wrong]
    return pairs


def matrix_and_vector_answers(rng):
    """A column vector and a square matrix, in the environments and spacings models write; a row
    is not a column, and a row break written as a control space `\\ ` breaks no row."""
    a, b, c, d = (rng.randint(-9, 9) for _ in range(4))
    b += b == a  # two entries that differ, so that swapping them is wrong
    column = f"\\begin{{pmatrix}} {a} \\\\ {b} \\end{{pmatrix}}"
    spellings = [f"\\begin{{pmatrix}}{a}\\\\{b}\\end{{pmatrix}}",
                 f"\\begin{{bmatrix}} {a} \\\\ {b} \\end{{bmatrix}}",
                 f"\\left(\\begin{{array}}{{c}} {a} \\\\ {b} \\end{{array}}\\right)"]
    wrong = [f"\\begin{{pmatrix}} {a} \\\\ {b + 1} \\end{{pmatrix}}",
             f"\\begin{{pmatrix}} {b} \\\\ {a} \\end{{pmatrix}}",
             f"\\begin{{pmatrix}} {a} & {b} \\end{{pmatrix}}",
             f"\\begin{{pmatrix}} {a} \\ {b} \\end{{pmatrix}}",
             f"\\begin{{pmatrix}}{a}\\{abs(b)}\\end{{pmatrix}}"]
    pairs = [(column, s, True, None) for s in spellings] + [(column, w, False, None) for w in wrong]
    pairs.append((column, f"\\left(\\begin{{array}}{{c}}{a}\\\\\\frac{{{2 * b}}}{{2}}\\end{{array}}"
                          f"\\right)", True, "row break before a macro in an array"))
    q = rng.choice([2, 4, 5, 8])
    p = rng.choice([k for k in range(1, 2 * q) if Fraction(k, q).denominator == q])
    matrix = f"\\begin{{pmatrix}} \\frac{{{p}}}{{{q}}} & {c} \\\\ {d} & {a} \\end{{pmatrix}}"
    spellings = [f"\\begin{{bmatrix}}\\dfrac{{{p}}}{{{q}}}&{c}\\\\{d}&{a}\\end{{bmatrix}}",
                 f"\\begin{{pmatrix}} {p}/{q} & {c} \\\\ {d} & {a} \\end{{pmatrix}}",
                 f"\\begin{{pmatrix}} {p / q} & {c} \\\\ {d} & {a} \\end{{pmatrix}}",
                 f"\\left[ \\begin{{array}}{{cc}} \\frac{{{p}}}{{{q}}} & {c} \\\\ {d} & {a} "
                 f"\\end{{array}} \\right]"]
    wrong = [f"\\begin{{pmatrix}} \\frac{{{p}}}{{{q}}} & {c} \\\\ {d} & {a + 1} \\end{{pmatrix}}",
             f"\\begin{{pmatrix}} \\frac{{{p}}}{{{q}}} & {c} & {d} & {a} \\end{{pmatrix}}"]
    if c != d:  # the transpose
        wrong.append(f"\\begin{{pmatrix}} \\frac{{{p}}}{{{q}}} & {d} \\\\ {c} & {a} "
                     f"\\end{{pmatrix}}")
    pairs += [(matrix, s, True, None) for s in spellings]
    return pairs + [(matrix, w, False, None) for w in wrong]


def polynomial_answers(rng):
    k = rng.randint(2, 9)
    gold = f"x^2+{k}x"
    spellings = [f"x(x+{k})", f"{k}x + x^2", f"x^{{2}} + {k} x", f"x \\cdot (x + {k})"]
    wrong = [f"x^2-{k}x", f"x^2+{k}", f"x(x+{k + 1})"]
    pairs = [(gold, s, True, None) for s in spellings] + [(gold, w, False, None) for w in wrong]
    line = f"y = {k}x + 1"
    pairs += [(line, f"y={k}x+1", True, None), (line, f"y = 1 + {k}x", True, None),
              (line, f"y = {k}x - 1", False, None)]
    return pairs


def unit_answers(rng):
    """Degrees, percentages and dollars, written on either side."""
    d = rng.choice([15, 30, 45, 60, 72, 90, 120, 135])
    p = rng.randint(1, 99)
    pairs = [(f"{d}^\\circ", s, True, None) for s in (str(d), f"{d}^{{\\circ}}", f"{d} ^\\circ")]
    pairs += [(str(d), f"{d}^\\circ", True, None), (f"{d}^\\circ", f"{d}°", True, "degree sign"),
              (f"{d}^\\circ", str(d + 1), False, None)]
    # math-verify's percent rule: N% equals N/100, and equals N where both are integers
    pairs += [(f"{p}\\%", s, True, None)
              for s in (f"{p}\\%", str(p), _decimal(Fraction(p, 100), 6), f"{p}\\text{{ percent}}")]
    pairs += [(str(p), f"{p}\\%", True, None),
              (_decimal(Fraction(p, 100), 6), f"{p}\\%", True, None),
              (f"{p}\\%", f"{p + 1}\\%", False, None), (str(p), f"{p} percent", True, None)]
    dollars = rng.randint(10, 99999)
    pairs += [(f"\\${dollars:,}".replace(",", ",\\!"), s, True, None)
              for s in (str(dollars), f"\\${dollars}", f"{dollars:,}")]
    return pairs


def scientific_answers(rng):
    """A quantity of everyday size and a tiny one (a physical constant)."""
    return [*_scientific_answers(rng, rng.randint(-5, 12)),
            *_scientific_answers(rng, rng.randint(-40, -8))]


def _scientific_answers(rng, exponent: int):
    mantissa = rng.randint(11, 99) / 10
    gold = f"{mantissa}\\times10^{{{exponent}}}"
    value = Fraction(str(mantissa)) * Fraction(10) ** exponent
    spellings = [f"{mantissa} \\times 10^{{{exponent}}}", f"{mantissa}0 \\times 10^{{{exponent}}}",
                 f"{mantissa} \\cdot 10^{{{exponent}}}"]
    # tiny golds: math-verify's 6 decimal places accept any other tiny number
    tiny = value < Fraction(1, 10**6)
    wrong = [(f"{round(mantissa + 0.1, 1)}\\times10^{{{exponent}}}", tiny and exponent <= -16),
             (f"{mantissa}\\times10^{{{exponent + 1}}}", tiny and exponent <= -17), ("0.0", tiny),
             ("0", False)]
    shifted = f"{round(mantissa * 10)}\\times10^{{{exponent - 1}}}"
    return ([(gold, s, True, None) for s in spellings]
            + [(gold, shifted, True, "decimal places, not rounding")]
            + [(gold, w, False, "relative tolerance" if flagged else None) for w, flagged in wrong])


SHAPES = [integer_answers, fraction_answers, decimal_answers, surd_answers,
          interval_and_tuple_answers, solution_set_answers, matrix_and_vector_answers,
          polynomial_answers, unit_answers, scientific_answers]

# how a response presents its answer: a template, the intentional difference it falls under, and
# how often models write it (relative)
RESPONSE_FORMATS = [
    ("So the answer is $\\boxed{{{answer}}}$.", None, 3),
    ("The final answer is \\boxed{{{answer}}}", None, 3),
    ("Thus $\\boxed{{ {answer} }}$", None, 2),
    ("Therefore, \\boxed {{{answer}}}.", "space before the box's brace", 1),
    ("The answer is ${answer}$.", "no box", 1),
]
PLAIN_FORMATS = [f for f in RESPONSE_FORMATS if f[1] is None]


def generate_pairs(rounds: int, seed: int = 0) -> list[Pair]:
    """`rounds` draws of every shape's gold values; each spelling presented in a random format.
    A spelling given as a tuple is one box per part (`\\boxed{2}` and `\\boxed{3}`, or
    `$x = \\boxed{2}$ and $x = \\boxed{3}$`)."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(rounds):
        for shape in SHAPES:
            for gold, spelling, correct, difference in shape(rng):
                if isinstance(spelling, tuple):  # a part with its own box keeps its label outside
                    boxes = " and ".join(f"${part}$" if "\\boxed" in part else
                                         f"$\\boxed{{{part}}}$" for part in spelling)
                    pairs.append(Pair(gold, f"The solutions are {boxes}.", correct, difference))
                    continue
                # a spelling that differs on purpose is presented plainly: one difference a pair
                formats = PLAIN_FORMATS if difference else RESPONSE_FORMATS
                template, presentation, _ = rng.choices(formats, [f[2] for f in formats])[0]
                response = template.format(answer=spelling)
                pairs.append(Pair(gold, response, correct, difference or presentation))
    return pairs


def official_reward(pair: Pair) -> float:
    from math_verify import parse, verify

    return float(verify(parse(f"${pair.gold}$"), parse(pair.response)))


def disagreements(pairs: list[Pair]) -> tuple[list, Counter]:
    """(disagreements outside INTENTIONAL_DIFFERENCES, count of those within each one)."""
    ours = reward.score_batch([("math", p.response, p.gold) for p in pairs], workers=2)
    unexplained, explained = [], Counter()
    for pair, mine in zip(pairs, ours):
        official = official_reward(pair)
        if mine == official:
            continue
        expected = INTENTIONAL_DIFFERENCES.get(pair.difference, (None,))[0]
        if mine == expected:
            explained[pair.difference] += 1
        else:
            unexplained.append((pair, mine, official))
    return unexplained, explained


def check_agreement(rounds: int, seed: int) -> None:
    pairs = generate_pairs(rounds, seed)
    unexplained, explained = disagreements(pairs)
    agreed = len(pairs) - len(unexplained) - sum(explained.values())
    print(f"\n{len(pairs)} pairs: {agreed} agree with math-verify ({agreed / len(pairs):.1%}); "
          f"intentional differences: {dict(explained)}")
    assert not unexplained, "\n".join(f"{p.gold!r} {p.response!r}: reward.py {mine}, "
                                      f"math-verify {official}"
                                      for p, mine, official in unexplained)


def test_math_verifier_agrees_with_math_verify_but_for_its_listed_differences():
    check_agreement(rounds=2, seed=0)


@pytest.mark.slow
def test_math_verifier_agrees_with_math_verify_on_thousands_of_pairs():
    check_agreement(rounds=30, seed=1)


def test_every_generated_pair_scores_what_the_generator_meant():
    """The differential test's own ground truth: a correct spelling scores 1, a wrong value 0
    (where math-verify is wrong, reward.py is not)."""
    pairs = [p for p in generate_pairs(rounds=1, seed=2) if p.difference != "no box"]
    ours = reward.score_batch([("math", p.response, p.gold) for p in pairs], workers=2)
    wrong = [(p.gold, p.response, r) for p, r in zip(pairs, ours) if r != float(p.correct)]
    assert not wrong, wrong


# ---- hedges through equations: only a label may stand beside the value ---------------------------

@pytest.mark.parametrize("box, gold", [
    ("x = 6, x = 5", "5"), ("6 \\text{ or } x = 5", "5"), ("y = 6 \\text{ and } x = 5", "5"),
    ("6x = 5", "5"), ("x = 6; x = 5", "5"), ("x=6 \\lor x=5", "x=5"), ("x=6 \\vee x=5", "5"),
    ("x + 1 = 5", "5"),
    # a side that looks like a name but is a number
    ("\\cos(\\pi) = 5", "5"), ("\\log(100) = 5", "5"), ("e = 5", "5"), ("\\ln(e) = 2", "2"),
    # words or an equation where a name would be
    ("\\text{six or } x = 5", "5"), ("\\text{not } x = 5", "5"), ("f(6=7) = 5", "5"),
    ("f(6 \\text{ or } 5) = 5", "5"), ("f(6 \\vee 7) = 5", "5"), ("\\text{six} = 5", "5"),
    ("x(6) = 5", "5"), ("\\sqrt{x}(6) = 5", "5"),  # implied products, not functions
    ("x_{6=7} = 5", "5"), ("\\bar x_{6 \\ne 5} = 5", "5"),  # a statement in a subscript
    ("x_{6 \\le 5} = 5", "5"), ("f(6 \\equiv 5) = 5", "5"), ("\\mathrm{e} = 5", "5"),
    ("\\text{dozen} = 5", "5"),
])
def test_a_second_value_written_through_an_equation_is_wrong(box, gold):
    assert reward.score("math", f"so \\boxed{{{box}}}", gold) == 0.0


@pytest.mark.parametrize("box", ["x = 5", "f(3) = 5", "a_n = 5", "a_{10} = 5", "\\theta = 5",
                                 "a+b = 5", "2+3 = 5", "x = \\frac{10}{2} = 5",
                                 # named quantities
                                 "\\text{Area} = 5", "\\det(A) = 5", "\\operatorname{Var}(X) = 5",
                                 "\\mathbb{E}[X] = 5", "f'(2) = 5", "\\textbf{Area} = 5",
                                 "P(X \\geq 2) = 5"])
def test_a_label_or_an_equal_value_beside_the_answer_is_fine(box):
    assert reward.score("math", f"so \\boxed{{{box}}}", "5") == 1.0


def test_labels_are_names_not_values():
    assert all(map(reward.is_a_label, ["x", "f(3)", "a_n", "a_{10}", "\\theta", "\\angle ABC"]))
    assert reward.is_a_label("(x, y)") and not reward.is_a_label("(x, 2)")
    assert not any(map(reward.is_a_label, ["6x", "x^2", "\\pi r", "6 \\text{ or } x", "x, y"]))


@pytest.mark.parametrize("gold", ["\\lambda=2\\sqrt{2}, A(\\pm 1, 0)", "x = 6 \\lor x = 5",
                                  "y = 2x + 1, y = -x", "a_1 = 3; a_2 = 4"])
def test_the_gold_written_exactly_is_right_whatever_its_equations_and_lists(gold):
    assert reward.score("math", f"so \\boxed{{{gold}}}", gold) == 1.0


# ---- numbers: a relative tolerance ---------------------------------------------------------------

@pytest.mark.parametrize("box, gold, expected", [
    ("0.0", "1.6\\times10^{-19}", 0.0),  # math-verify's 6 decimal places: every tiny gold is 0
    ("2\\times10^{-30}", "6.63\\times10^{-34}", 0.0),
    ("1.7\\times10^{-19}", "1.6\\times10^{-19}", 0.0),
    ("\\frac{\\sqrt{2}}{10^{20}}", "\\frac{\\sqrt{3}}{10^{20}}", 0.0),
    ("1.60\\times10^{-19}", "1.6\\times10^{-19}", 1.0),
    ("6.6300001 \\times 10^{-34}", "6.63\\times10^{-34}", 1.0),
    ("51\\times10^{10}", "5.1\\times10^{11}", 1.0),  # 5.1 read as a binary float: 6 decimals miss
    ("1.5128205", "\\frac{59}{39}", 1.0),  # 1.51282051...: rounded, 1.512820 and 1.512821
    ("2^{64}+1", "2^{64}", 0.0),  # exact numbers: no tolerance
    ("0.333333", "\\frac{1}{3}", 1.0), ("0.0333333", "\\frac{1}{30}", 1.0),
    ("0.0", "0", 1.0),
    # an integer gold's last digits are not rounding
    ("1.0\\times10^{15}", "1000000000000999", 0.0), ("999999999999.5", "1000000000000", 0.0),
    ("1.0\\times10^{15}", "1000000000000000", 1.0),
])
def test_numbers_are_equal_within_a_relative_tolerance(box, gold, expected):
    assert reward.score("math", f"\\boxed{{{box}}}", gold) == expected


@pytest.mark.parametrize("box, gold, expected", [
    # math-verify's rule: N% is N/100, and equals N where both are integers
    ("5\\%", "5", 1.0), ("5\\%", "0.05", 1.0), ("0.05", "5\\%", 1.0), ("5\\%", "0.5", 0.0),
    ("50 \\text{ percent}", "0.5", 1.0), ("50 percent", "50\\%", 1.0),
    # `\left.` and `\right.` are empty delimiters, not decimal points
    ("\\left.5\\right.", "5", 1.0), ("\\left.5\\right.", "0.5", 0.0),
])
def test_percentages_and_empty_delimiters(box, gold, expected):
    assert reward.score("math", f"\\boxed{{{box}}}", gold) == expected


# ---- correct answers in the formats models write ----------------------------------------------

@pytest.mark.parametrize("response, gold", [
    ("\\boxed{\\$18.90}", "18.90"), ("\\boxed{18.90}", "\\$18.90"),
    ("\\boxed{\\$32,\\!348}", "32348"), ("\\boxed{32,348}", "\\$32,\\!348"),
    ("\\boxed{1,234 \\text{ dollars}}", "1234"), ("\\boxed{x = 1,234}", "1234"),
    ("\\boxed{30°}", "30"), ("\\boxed{30^\\circ}", "30^\\circ"),
    ("\\boxed{x=2, x=3}", "2, 3"), ("\\boxed{x = 2 \\text{ or } x = 3}", "\\{2, 3\\}"),
    ("so $x = \\boxed{2}$ and $\\boxed{3}$", "2, 3"), ("\\boxed{3}, \\boxed{2}", "\\{2, 3\\}"),
    ("\\boxed{0.\\overline{3}}", "\\frac{1}{3}"), ("\\boxed{1.\\overline{6}}", "\\frac{5}{3}"),
    ("\\boxed{-0.1\\overline{6}}", "-\\frac{1}{6}"), ("\\boxed{1.5/2}", "0.75"),
    ("so \\boxed {5}", "5"), ("\\boxed{50 \\text{ percent}}", "50"),
    ("\\boxed{\\bf 5}", "5"), ("\\boxed{\\large 5}", "5"), ("\\boxed{\\scriptstyle 5}", "5"),
])
def test_correct_answers_in_common_formats_score_1(response, gold):
    assert reward.score("math", response, gold) == 1.0


def test_a_number_with_thousands_separators_is_one_item_of_an_answer():
    assert reward.answer_items("1,234 \\text{ dollars}") == ["1,234 \\text{ dollars}"]
    assert reward.answer_items("x = 1,234; y = -5,000.5") == ["x = 1,234", " y = -5,000.5"]
    assert reward.answer_items("1, 234") == ["1", " 234"]  # a list, to math-verify too
    assert reward.answer_items("1,2345") == ["1", "2345"]


def test_boxes_read_together_are_one_answer():
    assert reward.boxed_answer("$\\boxed{2}$ and $\\boxed{3}$.") == "2, 3"
    assert reward.score("math", "\\boxed{2} and \\boxed{3}", "3") == 0.0  # two values for one
    assert reward.boxed_answer("\\boxed{2} no, wait: \\boxed{3}") == "3"  # a correction is not
    # outside an environment, boxes fewer than 10 characters apart are one list, as math-verify
    assert reward.boxed_answer("\\boxed{2} \\boxed{3}") == "2, 3"
    assert reward.boxed_answer("\\boxed{1}, " * 3 + "\\boxed{2}") == "1, 2"  # one value once
    # a chain of more boxes than are read, however many a response has, is no answer
    assert reward.boxed_answer("\\boxed{1}, " * 50_000 + "\\boxed{2}") is None
    assert reward.boxed_answer("}" * 100_000 + ", \\boxed{2}") == "2"


# ---- spellings the normalisation must not change: matrices, one box per part, macros ------------

COLUMN = "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"
MATRIX = "\\begin{pmatrix} \\frac{1}{2} & 3 \\\\ -4 & 5 \\end{pmatrix}"


@pytest.mark.parametrize("box, gold, expected", [
    # `\\` ends a matrix row; it is no control space `\ ` (math-verify's verdicts, each one)
    ("\\begin{bmatrix}1\\\\2\\end{bmatrix}", COLUMN, 1.0),
    ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", COLUMN, 1.0),
    ("\\left(\\begin{array}{c} 1 \\\\ 2 \\end{array}\\right)", COLUMN, 1.0),
    ("\\begin{pmatrix} 0.5 & 3 \\\\ -4 & 5 \\end{pmatrix}", MATRIX, 1.0),
    ("\\begin{bmatrix} \\dfrac{1}{2} & 3 \\\\ -4 & 5 \\end{bmatrix}", MATRIX, 1.0),
    ("\\begin{pmatrix} 1 \\\\ 3 \\end{pmatrix}", COLUMN, 0.0),
    ("\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}", COLUMN, 0.0),
    ("\\begin{pmatrix} 1 & 2 \\end{pmatrix}", COLUMN, 0.0),  # a row is not a column
    # malformed: a control space or `\2` where the row break belongs
    ("\\begin{pmatrix} 1 \\ 2 \\end{pmatrix}", COLUMN, 0.0),
    ("\\begin{pmatrix}1\\2\\end{pmatrix}", COLUMN, 0.0),
])
def test_a_matrix_is_read_with_its_rows_whatever_its_environment_and_spacing(box, gold, expected):
    assert reward.score("math", f"so \\boxed{{{box}}}", gold) == expected


@pytest.mark.parametrize("response, gold, expected", [
    ("$x=\\boxed{2}$ and $x=\\boxed{3}$", "2, 3", 1.0),
    ("$x=\\boxed{2}$ and $x=\\boxed{3}$", "3", 0.0),  # two values for one
    ("\\boxed{(2,2)} \\quad \\text{and} \\quad \\boxed{(6,2)}", "(2,2), (6,2)", 1.0),
    ("\\boxed{(2,2)} \\quad \\text{and} \\quad \\boxed{(6,2)}", "(6,2)", 0.0),
    ("$a_1 = \\boxed{2}$, $a_2 = \\boxed{3}$", "2, 3", 1.0),
])
def test_one_labelled_box_per_part_is_read_as_the_list_of_parts(response, gold, expected):
    assert reward.score("math", response, gold) == expected


@pytest.mark.parametrize("box, gold, expected", [
    ("\\mathbf 3", "3", 1.0), ("\\mathbf 3", "4", 0.0), ("\\textbf 3", "3", 1.0),
    ("1{,}085", "1085", 1.0), ("1{,}085", "1086", 0.0),
    ("\\displaystyle\\frac{1}{2}", "0.5", 1.0), ("\\displaystyle 3", "3", 1.0),
    ("\u22125", "-5", 1.0), ("\u22125", "5", 0.0), ("3\u22122", "1", 1.0),
    ("0,065", "0.065", 1.0), ("0,065", "65", 0.0),
    ("1 000", "1000", 0.0), ("2 3", "23", 0.0),  # math-verify reads no number split by a space
])
def test_macros_separators_and_minus_signs_are_read_as_math_verify_reads_them(box, gold,
                                                                                expected):
    assert reward.score("math", f"\\boxed{{{box}}}", gold) == expected


@pytest.mark.parametrize("response, gold", [
    # one box per part across \\( \\) and \\[ \\] delimiters, spacing commands and longer labels
    ("The solutions are \\(x = \\boxed{2}\\) and \\(x = \\boxed{3}\\).", "2, 3"),
    ("\\[\\boxed{2}\\] and \\[\\boxed{3}\\]", "2, 3"),
    ("$\\boxed{2},\\ \\boxed{3}$", "2, 3"), ("$\\boxed{2}\\text{, }\\boxed{3}$", "2, 3"),
    ("$\\boxed{2} , \\text{and} \\boxed{3}$", "2, 3"),
    ("$AB = \\boxed{2}$ and $BC = \\boxed{3}$", "2, 3"),
    ("$f(1) = \\boxed{2}$ and $f(2) = \\boxed{3}$", "2, 3"),
    # spacing commands and control spaces are spaces
    ("$\\boxed{5\\,}$", "5"), ("$\\boxed{\\,4\\,}$", "4"),
    ("$\\boxed{1 \\, , \\, 2}$", "\\{1,2\\}"),
    ("$\\boxed{ 81\\  }$", "81"), ("\\boxed{n = 1600\\ }", "1600"), ("$\\boxed{x \\,=\\, 5}$", "5"),
    ("$\\boxed{= 5}$", "5"),
    ("$x = \\boxed{2}\\text{ and }y = \\boxed{3}$", "2, 3"),  # a label after `\text{..}`
])
def test_correct_answers_math_verify_reads_score_1(response, gold):
    assert reward.score("math", response, gold) == 1.0


@pytest.mark.parametrize("response, gold", [
    # a hedge spaced with spacing commands is still two candidates
    ("\\boxed{x = 7 \\;\\text{or}\\; x = 5}", "5"), ("\\boxed{x = 7 \\,,\\, x = 5}", "5"),
    ("\\boxed{x = \\frac{1}{3} \\; or \\; x = \\frac{1}{2}}", "\\frac{1}{2}"),
    ("\\boxed{1 \\,,\\, \\sqrt{2}}", "\\sqrt{2}"),
    # a second candidate struck out, commented out, tagged, implied or on its own line
    ("$\\boxed{\\cancel{\\frac{1}{2}} \\frac{1}{3}}$", "\\frac{1}{3}"),
    ("$\\boxed{\\frac{1}{3} % \\frac{1}{2}\n}$", "\\frac{1}{2}"),
    ("$\\boxed{\\frac{1}{3} \\tag{\\frac{1}{2}}}$", "\\frac{1}{2}"),
    ("$\\boxed{\\frac{1}{2} \\iff \\frac{1}{3}}$", "\\frac{1}{3}"),
    ("$\\boxed{\\frac{1}{3} \\Rightarrow \\frac{1}{2}}$", "\\frac{1}{2}"),
    ("$\\boxed{\\frac{1}{3} \\therefore \\frac{1}{2}}$", "\\frac{1}{2}"),
    ("$\\boxed{\\frac{1}{2} \\\\ \\frac{1}{3}}$", "\\frac{1}{3}"),
    # a list read as fewer or other items than it has
    ("$\\boxed{\\frac{1}{2}, \\ldots, \\frac{1}{3}}$", "\\frac{1}{3}"),
    ("$\\boxed{x = [0,1] \\text{ or } x = (0,1)}$", "(0,1)"),
    # two boxes in delimiters are two candidates for one value
    ("\\(\\boxed{2}\\) and \\(\\boxed{3}\\)", "3"),
    # a box is no label: the middle box is a third candidate, not the next part's name
    ("\\boxed{7}, \\boxed{6} x = \\boxed{5}", "\\{5,7\\}"),
    # what a box's environment holds beside it, other separators and labels join the boxes still
    ("$\\boxed{6}^\\circ$ or $\\boxed{5}^\\circ$", "5"),
    ("$\\boxed{6}\\%$ or $\\boxed{5}\\%$", "5"),
    ("$\\displaystyle\\boxed{6}$ or $\\displaystyle\\boxed{5}$", "5"),
    ("$\\boxed{6}\\text{ cm}$ or $\\boxed{5}\\text{ cm}$", "5"),
    ("$\\boxed{6} \\lor \\boxed{5}$", "5"), ("$\\boxed{6} \\text{ OR } \\boxed{5}$", "5"),
    ("$\\boxed{6}$ or $2x = \\boxed{5}$", "5"), ("$\\boxed{6}$ or $x \\le \\boxed{5}$", "5"),
    ("$\\boxed{6}$" + " " * 300 + "or $\\boxed{5}$", "5"),  # padding joins nothing apart
    ("\\boxed{\\frac{1}{2}} \\quad or \\quad \\boxed{5}", "5"),  # a box ending in a nested brace
])
def test_a_second_candidate_however_spaced_or_hidden_scores_0(response, gold):
    assert reward.score("math", response, gold) == 0.0


# ---- several boxes in one math environment: one list, as math-verify reads them ------------------

# the delimiters math-verify's extraction reads an environment between, and a display environment
# inside them; it reads every box of one environment as one list (`$\boxed{6} = \boxed{5}$` is 6, 5)
DELIMITERS = [("$", "$"), ("$$", "$$"), ("\\(", "\\)"), ("\\[", "\\]"),
              ("$$\\begin{aligned}", "\\end{aligned}$$"),
              ("\\[\\begin{align*}", "\\end{align*}\\]")]
# between the boxes: a relation, nothing, spacing, a row of an aligned environment, prose
BETWEEN = ["=", " = ", "", " ", "\\quad", "\\qquad ", " \\ne ", "\\approx", " \\Rightarrow ",
           " \\\\ x &= ", "\\text{ is wrong, so }", ", "]
# (the boxes, the gold): a hedge, one value twice (written alike or not), a list for a gold of
# several values
BOXES_AND_GOLDS = [(("6", "5"), "5"), (("5", "5"), "5"), (("\\frac{10}{2}", "5.0"), "5"),
                   (("6", "5"), "5, 6"), (("x = 6", "x = 5"), "5"), (("2", "3"), "\\{2, 3\\}")]


def test_boxes_in_one_math_environment_are_read_as_math_verify_reads_them():
    pairs = [Pair(gold, f"So {opening}\\boxed{{{first}}}{between}\\boxed{{{last}}}{closing}.",
                  correct=False)
             for opening, closing in DELIMITERS for between in BETWEEN
             for (first, last), gold in BOXES_AND_GOLDS]
    ours = reward.score_batch([("math", p.response, p.gold) for p in pairs], workers=2)
    differ = [(p.response, p.gold, mine) for p, mine in zip(pairs, ours)
              if mine != official_reward(p)]
    assert not differ, differ


@pytest.mark.parametrize("opening, closing", [("\\begin{equation*}", "\\end{equation*}"),
                                              ("\\begin{align}", "\\end{align}"),
                                              ("\\begin{gather}", "\\end{gather}")])
@pytest.mark.parametrize("between", [" \\Rightarrow ", " = ", "\\qquad\\qquad", " \\\\ x &= "])
def test_boxes_in_one_display_environment_are_one_list(opening, closing, between):
    """A display environment outside `$$` and `\\[` is no environment to math-verify's extraction:
    it joins boxes fewer than 10 characters apart, and reads the last of two further apart."""
    def score(first, last, gold):
        return reward.score("math", f"{opening}\\boxed{{{first}}}{between}\\boxed{{{last}}}"
                                    f"{closing}", gold)

    assert score("6", "5", "5") == 0.0  # a hedge
    assert score("5", "5", "5") == 1.0
    assert score("6", "5", "\\{5, 6\\}") == 1.0


@pytest.mark.parametrize("response, expected", [
    ("$\\boxed{6} = \\boxed{5}$", "6, 5"), ("\\[\\boxed{6}\\quad\\boxed{5}\\]", "6, 5"),
    ("$\\boxed{5} = \\boxed{5}$", "5"),  # consecutive equal boxes once, as math-verify reads them
    ("$\\boxed{\\frac{10}{2}} = \\boxed{5}$", "5"),
    ("$\\boxed{x = 5} = \\boxed{5}$", "x = 5, 5"),  # one value to math-verify, not to the fast path
    ("$\\boxed{5} = \\boxed{6} = \\boxed{5}$", "5, 6, 5"),
    ("$\\boxed{2} = \\boxed{1}$ and $\\boxed{3}$", "2, 1, 3"),  # joined to another environment
    ("$\\boxed{6}$ = $\\boxed{5}$", "5"),  # two environments: only a separator joins them
    ("\\boxed{6} = \\boxed{5}", "6, 5"),  # no environment: fewer than 10 characters apart
    ("$x = 1$, so \\boxed{6} = \\boxed{5}", "6, 5"),  # the `$`s close an environment before
    ("\\boxed{6} = 12345678 = \\boxed{5}", "5"),  # 10 characters apart, no separator: the last
    ("$\\boxed{6 = \\boxed{5}}$", "5"),  # a box in a box: the inner one, as math-verify
    ("$\\boxed{} = \\boxed{5}$", None),  # a blank box in the list: no answer (math-verify: none)
    ("$" + "\\boxed{1} = " * 6 + "\\boxed{5}$", None),  # more boxes than are read
])
def test_the_boxes_of_an_environment_are_read_in_order(response, expected):
    assert reward.boxed_answer(response) == expected


# ---- boxes outside every math environment: fewer than 10 characters apart, one list -------------

# between two boxes: nothing, a relation, prose, spacing, a line break, a formula, a separator; each
# as it is and padded with spaces to either side of math-verify's distance (10 characters from the
# first box's closing brace to the next `\\boxed`)
RELATIONS = ["", "=", "\\ne", "\\Rightarrow", "so", "no", "\\quad", "~", "\n", "$x$", ",", "or",
             "\\text{ or }"]
# where the boxes stand: prose, after an inline formula that holds the first box, in a `$` that a
# line break leaves unclosed, and three boxes in a row
PLACINGS = ["So \\boxed{{{0}}}{between}\\boxed{{{1}}}.",
            "$x = \\boxed{{{0}}}${between}\\boxed{{{1}}}",
            "$x = \\boxed{{{0}}}\n{between}\\boxed{{{1}}}$",
            "\\boxed{{7}}{between}\\boxed{{{0}}}{between}\\boxed{{{1}}}"]
BARE_BOXES_AND_GOLDS = [(("6", "5"), "5"), (("6", "5"), "6"), (("5", "5"), "5"),
                        (("\\frac{10}{2}", "5"), "5"), (("6", "5"), "5, 6"),
                        (("6", "5"), "5, 6, 7"), (("2", "3"), "\\{2, 3\\}")]


def bare_box_pairs() -> list[Pair]:
    """Each placing of each pair of boxes with each relation between them, but where this verifier
    reads them apart from math-verify on purpose or by a known difference (docs/verifiers.md):
    math-verify pairs a `$` that closes a formula with a `$` after it when a box lies between
    (`\n$x$\\boxed{5}$`; MATH_ENVIRONMENT pairs them in order), and its rule for boxes a separator
    joins 10 to 70 characters apart stops at one written alike (`\\boxed{7} , \\boxed{5} ,
    \\boxed{5}` is 5 to it, the list 7, 5 here)."""
    pairs = []
    for relation in RELATIONS:
        separator = relation in (",", "or", "\\text{ or }")
        for length in sorted({len(relation), 8, 9, 10} - set(range(len(relation)))):
            left = (length - len(relation)) // 2
            between = " " * left + relation + " " * (length - len(relation) - left)
            pairs += [Pair(gold, placing.format(*boxes, between=between), correct=False)
                      for placing in PLACINGS for boxes, gold in BARE_BOXES_AND_GOLDS
                      if not ("$" in relation and "\n" in placing)
                      and not (separator and length >= 10
                               and placing.count("{between}") == 2 and boxes[0] == boxes[1])]
    return pairs


def test_boxes_outside_an_environment_are_read_as_math_verify_reads_them():
    """Boxes outside every environment fewer than 10 characters apart are one list whatever lies
    between (`\\boxed{6} = \\boxed{5}` is 6, 5: wrong for the gold 5), further apart the last."""
    pairs = bare_box_pairs()
    ours = reward.score_batch([("math", p.response, p.gold) for p in pairs], workers=2)
    differ = [(p.response, p.gold, mine) for p, mine in zip(pairs, ours)
              if mine != official_reward(p)]
    assert not differ, differ
    assert reward.score("math", "\\boxed{6} = \\boxed{5}", "5") == 0.0


# ---- spacing between boxes: read by what it is, not by how long it is ----------------------------

SPACING = ["\\quad ", "\\qquad", "~", "\\,", "\\;", " ", "\\hspace{1em}", "\\ ", "\\quad\n"]


@pytest.mark.parametrize("spacing", SPACING)
@pytest.mark.parametrize("repeats", [1, 100, 20_000])
def test_a_hedge_padded_with_spacing_of_any_length_is_still_two_candidates(spacing, repeats):
    padding = spacing * repeats
    for response in [f"\\boxed{{6}}, {padding}\\boxed{{5}}", f"$\\boxed{{6}}$, {padding}"
                     f"$\\boxed{{5}}$", f"$x = \\boxed{{6}}${padding} or $x = \\boxed{{5}}$"]:
        assert reward.boxed_answer(response) == "6, 5"
        assert reward.score("math", response, "5") == 0.0
    # spacing alone joins boxes fewer than 10 characters apart (math-verify's distance), no others:
    # a correction is the last box
    joined = "6, 5" if len(padding) < 10 else "5"
    assert reward.boxed_answer(f"\\boxed{{6}}{padding}\\boxed{{5}}") == joined


def test_one_box_per_part_spaced_far_apart_is_the_list_of_parts():
    response = "$x = \\boxed{2}$," + "\\qquad" * 500 + "$y = \\boxed{3}$"
    assert reward.score("math", response, "2, 3") == 1.0


# about 100K characters each, built to make a reader of boxes scan or backtrack quadratically
CRAFTED = {
    "boxes in one environment": "$" + "\\boxed{1} = " * 10_000 + "\\boxed{2}$",
    "spacing between boxes": "\\boxed{6}, " + "\\quad " * 20_000 + "\\boxed{5}",
    "spacing then a letter": "\\boxed{1}" + "\\quad x" * 14_000 + "\\boxed{2}",
    "dollars": "$" * 100_000 + "\\boxed{1} \\boxed{2}$",
    "unclosed display delimiters": "\\[" * 50_000 + "\\boxed{1} \\boxed{2}",
    "unclosed inline delimiters": "\\(" * 50_000 + "\\boxed{1} \\boxed{2}",
    "unclosed environments": "\\begin{align}" * 8_000 + "\\boxed{1} \\boxed{2}",
    "many environments": "$\\boxed{1}$ " * 10_000,
    "adjacent boxes": "\\boxed{1}\\boxed{2}" * 5_000,
    "reversed spacing": "dauq\\" * 20_000 + "\\boxed{1}, \\quad \\boxed{2}",
    "long boxes compared": "$" + " = ".join(f"\\boxed{{{'(' * 8_000}{')' * 8_000}{k}}}"
                                            for k in range(6)) + "$",
    "boxes fewer than 10 characters apart": "\\boxed{1} = \\boxed{2} = " * 4_000,
    "one value boxed again and again": "\\boxed{5} " * 10_000,
    "a long box near the last": f"\\boxed{{{'(' * 50_000}{')' * 50_000}}} \\boxed{{2}}",
    "nested braces before a separator": "\\boxed{" + "{" * 50_000 + "}" * 50_001 + ", \\boxed{2}",
}


@pytest.mark.parametrize("name", CRAFTED)
def test_reading_several_boxes_is_linear_on_crafted_responses(name):
    start = time.perf_counter()
    reward.boxed_answer(CRAFTED[name])
    assert time.perf_counter() - start < 0.5  # quadratic reading takes seconds to minutes


# ---- a correction in prose is no label -----------------------------------------------------------

@pytest.mark.parametrize("word", ["thus", "so", "hence", "Therefore", "i.e."])
@pytest.mark.parametrize("template", ["$\\boxed{{6}}$, {word} x = $\\boxed{{5}}$",
                                      "$\\boxed{{6}}$, {word} $x=\\boxed{{5}}$",
                                      "$\\boxed{{6}}$ and {word} $x = \\boxed{{5}}$"])
def test_a_correction_in_prose_before_a_labelled_box_is_the_last_box(template, word):
    response = template.format(word=word)
    assert reward.boxed_answer(response) == "5"
    assert reward.score("math", response, "5") == official_reward(Pair("5", response, True))


@pytest.mark.parametrize("label", ["y", "\\theta x", "\\angle ABC", "x + y", "\\text{area}",
                                   "f(2)", "2x"])
def test_a_label_of_a_name_and_its_macros_joins_the_next_part(label):
    assert reward.boxed_answer(f"$x = \\boxed{{2}}$ and ${label} = \\boxed{{3}}$") == "2, 3"


@pytest.mark.parametrize("box", ["\\frac{1}{2\u00a0}", "-\u20093", "1\u3000/2", "30^ \\circ",
                                 "12  \\%", "\\{ \\}", "5./2", "2^{0}.5",
                                 "\\right(1,2\\right)"])
def test_the_fast_path_defers_on_spacing_math_verify_reads(box):
    assert not isinstance(reward.math_check_here(box, "5"), bool)


def test_the_fast_path_reads_decimal_fractions_with_the_relative_tolerance():
    assert reward.math_fast_path("1.5/2", "3/4") is True
    assert reward.math_fast_path("0.0000001", "0") is None  # math-verify's rounding decides
    assert reward.math_fast_path("0.05", "0.0500001") is None
    assert reward.math_fast_path("0.05", "0.051") is False  # beyond the relative tolerance


def test_every_intentional_difference_is_documented():
    section = (ROOT / "docs" / "verifiers.md").read_text().split(
        "## Where the verifiers differ from the official graders, on purpose")[1].split("\n## ")[0]
    assert [name for name in INTENTIONAL_DIFFERENCES if f"*{name}*" not in section] == []
