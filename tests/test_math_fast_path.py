"""The math fast path never changes a verdict: whatever reward.py decides without sympy
(math_check_here returning True or False) is what math-verify, called as check_math calls it, says
of the same answer and gold as written; and where the fast path defers, the normalised answer it
hands to check_math gets the verdict the answer as written gets. Generated: answer structures
(numbers, fractions, tuples, sets, intervals, vectors, matrices, several parts) times the spellings
models write (environments, spacing, \\left/\\right, \\frac/\\dfrac/a/b, decimals, signs, font
macros, spacing at a comma, a decimal point, an exponent or a macro's argument, one box per
part), gold and prediction both drawn from them, equal and unequal."""

import random
from dataclasses import dataclass
from fractions import Fraction

import pytest

import reward


@dataclass(frozen=True)
class Value:
    """An answer's structure: `kind` and its numbers (a matrix's rows, a list's parts)."""
    kind: str  # number, tuple, set, interval, column, row, matrix, parts
    entries: tuple
    brackets: str = "()"  # an interval's


# ---- spellings -----------------------------------------------------------------------------------

def number_spellings(x: Fraction, rng, in_matrix: bool = False) -> str:
    """One way a model writes the number `x`. In a matrix, no thousands separator: math-verify
    cannot read `2{,}944` there, and takes a number out of the matrix by its fallback, which one
    depending on the spacing (the fast path leaves such answers to it)."""
    sign = "-" if x < 0 else ""
    x = abs(x)
    if x.denominator == 1:
        n = x.numerator
        forms = [str(n), f"{n}.0", f"{{{n}}}"]
        if n >= 100:  # an exponent's braces, which decide what it covers: `2^{1}0` is no `2^10`
            digits = str(n)
            forms += [f"{digits[0]}^{{{digits[1]}}}{digits[2:]}", f"{digits[0]}^{digits[1:]}"]
        if n >= 1000 and not in_matrix:  # a space at the comma makes `1, 234` a list
            forms += [f"{n:,}".replace(",", separator)
                      for separator in (",", "{,}", ", ", " ,", "\\;,", "\\,")]
        body = rng.choice(forms)
    else:
        p, q = x.numerator, x.denominator
        k = rng.choice([1, 1, 2, 3])
        forms = [f"\\frac{{{p}}}{{{q}}}", f"\\dfrac{{{p}}}{{{q}}}", f"\\tfrac{{{p}}}{{{q}}}",
                 f"{p}/{q}", f"\\frac{{{k * p}}}{{{k * q}}}", f"\\frac {p}{q}" if p < 10 > q
                 else f"\\frac{{{p}}}{{{q}}}", f"\\frac\\;{{{p}}}{{{q}}}"]
        if 10**6 % q == 0:  # a terminating decimal, written exactly
            decimal = f"{float(x):.6f}".rstrip("0")
            forms += [decimal, decimal.replace(".", ". "), decimal.replace(".", " .")]
        body = rng.choice(forms)
    if not sign:
        return body
    return rng.choice(["-", "\u2212", "- "]) + body


def spell(value: Value, rng) -> str:
    """One way a model writes `value`: its numbers, brackets and environments spelled at random."""
    space = rng.choice(["", " ", "  "])
    comma = rng.choice([",", ", ", " , "])
    in_matrix = value.kind in ("column", "row", "matrix")
    items = [number_spellings(x, rng, in_matrix) for x in value.entries] if value.kind not in (
        "matrix", "parts") else None
    # `\\left (` is no sized delimiter to math-verify, which reads `\\left(` as `(`
    left, right = rng.choice([("", "")] * 4 + [("\\left", "\\right"), ("\\left ", "\\right ")])
    if value.kind == "number":
        return rng.choice(["{}", "{}", "\\displaystyle {}", " {} "]).format(items[0])
    if value.kind in ("tuple", "interval"):
        opening, closing = value.brackets
        return f"{left}{opening}{space}{comma.join(items)}{space}{left and right}{closing}"
    if value.kind == "set":
        rng.shuffle(items)
        return f"{left}\\{{{space}{comma.join(items)}{space}{left and right}\\}}"
    if value.kind == "parts":
        return comma.join(spell(part, rng) for part in value.entries)
    rows = {"column": [[x] for x in items or ()], "row": [items]}.get(value.kind) or [
        [number_spellings(x, rng, in_matrix) for x in row] for row in value.entries]
    environment = rng.choice(["pmatrix", "bmatrix", "array"])
    # (in an array, math-verify reads a row break before a macro, `\\\\\\frac`, as `\\\\frac`)
    cell = rng.choice(["&", " & "])
    row_break = rng.choice([" \\\\ ", "\\\\ "] + (["\\\\"] if environment != "array" else []))
    body = space + row_break.join(cell.join(row) for row in rows) + space
    if environment == "array":
        columns = "c" * len(rows[0])
        return f"\\left(\\begin{{array}}{{{columns}}}{body}\\end{{array}}\\right)"
    name = f"{{{environment}}}"
    opening = rng.choice([name] * 3 + [f"{{ {environment}}}", f" {name}"])
    return f"\\begin{opening}{body}\\end{{{environment}}}"


# ---- structures, and values that differ from them ------------------------------------------------

def random_number(rng) -> Fraction:
    if rng.random() < 0.6:
        return Fraction(rng.choice([rng.randint(-20, 20), rng.randint(1000, 20000)]))
    return Fraction(rng.randint(-30, 30) or 1, rng.choice([2, 3, 4, 5, 8, 12]))


def random_value(rng, depth: int = 0) -> Value:
    kind = rng.choice(["number", "tuple", "set", "interval", "column", "row", "matrix"]
                      + (["parts"] if depth == 0 else []))
    if kind == "number":
        return Value(kind, (random_number(rng),))
    if kind == "interval":
        a = random_number(rng)
        return Value(kind, (a, a + rng.randint(1, 9)), rng.choice(["()", "(]", "[)", "[]"]))
    if kind == "set":
        return Value(kind, tuple(sorted({random_number(rng) for _ in range(rng.randint(2, 4))})))
    if kind == "matrix":
        size = rng.randint(2, 3)
        return Value(kind, tuple(tuple(random_number(rng) for _ in range(size))
                                 for _ in range(size)))
    if kind == "parts":
        return Value(kind, tuple(random_value(rng, 1) for _ in range(rng.randint(2, 3))))
    return Value(kind, tuple(random_number(rng) for _ in range(rng.randint(2, 3))))


def different_values(value: Value, rng) -> list[Value]:
    """Values a wrong answer gives: a number off by one, entries swapped, another bracket, the
    transpose of a column, one part fewer."""
    entries = list(value.entries)
    i = rng.randrange(len(entries))
    if value.kind == "parts":
        changed = entries.copy()
        changed[i] = rng.choice(different_values(entries[i], rng))
        return [Value("parts", tuple(changed)), Value("parts", tuple(entries[:-1]))]
    if value.kind == "matrix":
        changed = [list(row) for row in entries]
        changed[i][0] += 1
        return [Value("matrix", tuple(map(tuple, changed))),
                Value("matrix", tuple(zip(*entries)))]
    changed = entries.copy()
    changed[i] += 1
    different = [Value(value.kind, tuple(changed), value.brackets)]
    if value.kind in ("tuple", "column", "row") and entries[0] != entries[-1]:
        different.append(Value(value.kind, tuple(entries[::-1])))
    if value.kind == "interval":
        different.append(Value("interval", value.entries, rng.choice(
            [b for b in ("()", "(]", "[)", "[]") if b != value.brackets])))
    if value.kind == "column":
        different.append(Value("row", value.entries))
    return different


def malformed(spelling: str, rng) -> str:
    """A spelling broken where a parser could be lenient: a row break written as a control space
    or a stray backslash, a cell separator or a brace dropped."""
    breaks = [("\\\\", "\\ "), ("\\\\", "\\"), ("&", ""), ("}", "", )]
    old, new = rng.choice([b for b in breaks if b[0] in spelling] or [("", "")])
    return spelling.replace(old, new, 1)


def generate_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """`count` (gold, box) pairs: a gold spelled once, answered by another spelling of it, by a
    different value, or by a malformed spelling."""
    rng = random.Random(seed)
    pairs = []
    while len(pairs) < count:
        value = random_value(rng)
        gold = spell(value, rng)
        pairs.append((gold, spell(value, rng)))
        pairs.append((gold, gold))
        pairs += [(gold, spell(other, rng)) for other in different_values(value, rng)]
        pairs.append((gold, malformed(spell(value, rng), rng)))
    return pairs[:count]


# ---- the property --------------------------------------------------------------------------------

def math_verify(gold: str, box: str) -> bool:
    """math-verify's own verdict, its whole extraction: the official grader."""
    from math_verify import parse, verify

    return verify(parse(f"${gold}$"), parse(f"\\boxed{{{box}}}"))


def verdicts(pairs) -> tuple[list, dict]:
    """(pairs where reward.py's verdict is not math-verify's, how many the fast path decided).
    A fast-path verdict must be math-verify's on the answer and gold as written. Where reward.py
    defers, check_math's verdict on the answer as it reads it (respell_math) must be its verdict on
    the answer as written, or math-verify's own (check_math reads a box by the LaTeX grammar alone
    and compares numbers first: a spelling its reading misses, math-verify's fallbacks can
    read)."""
    wrong, decided = [], {True: 0, False: 0, None: 0}
    for gold, box in pairs:
        fast = reward.math_check_here(box, reward.read_math_gold(gold))
        if isinstance(fast, bool):
            decided[fast] += 1
            if fast != math_verify(gold, box):
                wrong.append(("fast path", gold, box, fast, not fast))
            continue
        decided[None] += 1
        respelled = reward.check_math(fast, reward.read_math_gold(gold))
        if respelled != reward.check_math(box, gold) and respelled != math_verify(gold, box):
            wrong.append(("respelled", gold, box, respelled, not respelled))
    return wrong, decided


def check_property(count: int, seed: int) -> None:
    wrong, decided = verdicts(generate_pairs(count, seed))
    print(f"\n{count} pairs: fast path True {decided[True]}, False {decided[False]}, "
          f"deferred {decided[None]}")
    assert decided[True] and decided[False], "the fast path decided nothing: no property tested"
    assert not wrong, "\n".join(f"{where}: gold {g!r}, box {b!r}: reward.py {mine}, math-verify "
                                f"{theirs}" for where, g, b, mine, theirs in wrong)


def test_the_fast_path_and_the_normalisation_give_math_verifys_verdicts():
    check_property(count=160, seed=0)


@pytest.mark.slow
def test_the_fast_path_and_the_normalisation_give_math_verifys_verdicts_on_many_seeds():
    for seed in range(1, 6):
        check_property(count=1000, seed=seed)


@pytest.mark.parametrize("box, gold", [
    ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    ("\\{1,2\\}", "\\left\\{ 1, 2 \\right\\}"), ("(1,2]", "\\left( 1 , 2 \\right]"),
    ("x^2+5x", "x^{2}+5x"), ("- 5", "-5.0"), ("2\\sqrt{2}", "2 \\sqrt{2}"),
])
def test_the_fast_path_decides_answers_spelled_as_the_gold(box, gold):
    assert reward.math_check_here(box, reward.read_math_gold(gold)) is True


@pytest.mark.parametrize("box", [
    "x = 5", "6 = 6", "1 \\lor 2", "x < 3", "\\text{five}", "5 \\text{ cm}", "a \\equiv b",
    "\\cancel{6} 5", "\\left (1, 2\\right)",
    "\\left(\\begin{array}{c} 1 \\\\ 2 \\end{array}\\right)",
    "\\frac{1}{2}, \\begin{pmatrix} 5.0 \\end{pmatrix}", "\\begin{pmatrix} 2{,}944 \\end{pmatrix}",
])
def test_the_fast_path_defers_answers_whose_rules_math_verify_applies(box):
    """An equation, a relation, list words and macros outside SELF_EQUAL can make math-verify's
    verdict on an answer and itself False (`6 = 6` holds, `6 = 5` would not), and math-verify reads
    some spellings by their spacing: check_math decides, on the answer as written."""
    assert reward.math_check_here(box, reward.read_math_gold(box)) == box


@pytest.mark.parametrize("box, gold", [
    ("1, 234", "1,234"), ("1,234", "1, 234"), ("2. 5", "2.5"), ("0. 065", "0.065"), ("2 .5", "2.5"),
    ("2^{1}0", "2^10"), ("\\sqrt\\;{2}", "\\sqrt{2}"), ("12\\;\\;,345", "12,345"),
    ("x\\,|y", "x|y"),
    ("\\begin{ pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
])
def test_the_fast_path_defers_answers_whose_spacing_math_verify_reads(box, gold):
    """A space at a comma between digits or at a decimal point, a spacing command, a space in an
    environment's name and an exponent's braces before a digit change math-verify's reading (all
    of these pairs are wrong to it): the fast path, which would read them alike, leaves them to
    check_math."""
    assert reward.math_check_here(box, reward.read_math_gold(gold)) == reward.respell_math(box)
    assert not math_verify(gold, box)
    assert reward.score("math", f"\\boxed{{{box}}}", gold) == 0.0
