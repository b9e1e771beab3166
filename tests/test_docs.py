"""The README and the docs pages point at things that exist: every relative link names a file (and a
heading, for a link into a page), and every link to a line of code, [`symbol`](file.py#L123), lands
on a line that holds `symbol`.

When code moves, `python tests/test_docs.py --fix` rewrites each such link to where the symbol is
now (`def symbol`, `class symbol`, `symbol =`, else its first occurrence in the file; else the file
that defines it); read the diff."""

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *[p for p in [ROOT / "experiments" / "README.md"] if p.is_file()]]

# [text](target) and ![alt](target); the target ends at the first space or ')'
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)")
CODE_LINK = re.compile(r"^`([^`]+)`$")
LINE_ANCHOR = re.compile(r"^L(\d+)$")
# a code fence: three or more backticks and an info string without one (CommonMark), so that prose
# which starts with inline code of backticks (```` ``` ````) is not taken for a fence
FENCE = re.compile(r"^\s*`{3,}[^`]*$")


def relative_links(page: Path) -> list[tuple[int, str, str]]:
    """(line in the page, link text, target) of every link that is not a URL, outside code
    blocks."""
    links, fenced = [], False
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for match in LINK.finditer(line):
            text, target = match.groups()
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                links.append((number, text, target))
    return links


def heading_anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces to
    hyphens."""
    anchors, fenced = set(), False
    for line in page.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and re.match(r"^#{1,6} ", line):
            title = line.lstrip("#").strip().lower()
            anchor = re.sub(r"[^\w\- ]", "", title).replace(" ", "-")
            base, n = anchor, 1
            while anchor in anchors:
                anchor, n = f"{base}-{n}", n + 1
            anchors.add(anchor)
    return anchors


def resolve(page: Path, target: str) -> tuple[Path, str]:
    path, _, anchor = target.partition("#")
    return (page.parent / path).resolve() if path else page, anchor


def definition_line(lines: list[str], symbol: str) -> int | None:
    """1-based line of `def symbol`, `class symbol` or `symbol =` (or `symbol: type =`)."""
    name = re.escape(symbol)
    definition = re.compile(rf"^\s*(?:async\s+def|def|class)\s+{name}\b|^\s*{name}\s*(?::[^=]*)?=")
    return next((number for number, line in enumerate(lines, 1) if definition.search(line)), None)


def where_defined(lines: list[str], symbol: str) -> int | None:
    """The line that defines `symbol`, else the first line holding it; None when no line does."""
    return definition_line(lines, symbol) or next(
        (number for number, line in enumerate(lines, 1) if symbol in line), None)


def defined_elsewhere(symbol: str) -> tuple[Path, int] | None:
    """The first project file (top level, then experiments/) that defines `symbol`: where it
    moved."""
    for path in [*sorted(ROOT.glob("*.py")), *sorted((ROOT / "experiments").glob("*.py"))]:
        number = definition_line(path.read_text().splitlines(), symbol)
        if number:
            return path, number
    return None


def code_link_problems() -> list[tuple[Path, int, str, str, str | None]]:
    """(page, page line, target, message, the target that would be right) per wrong line link."""
    problems = []
    for page in PAGES:
        for number, text, target in relative_links(page):
            code, (path, anchor) = CODE_LINK.match(text), resolve(page, target)
            line = LINE_ANCHOR.match(anchor)
            if not (code and line and path.is_file()):
                continue
            symbol, n = code.group(1), int(line.group(1))
            lines = path.read_text().splitlines()
            if n <= len(lines) and symbol in lines[n - 1]:
                continue
            found, fixed = where_defined(lines, symbol), None
            if found:
                now, fixed = f"defined at line {found}", f"{target.partition('#')[0]}#L{found}"
            elif moved := defined_elsewhere(symbol):
                now = f"not in that file; defined in {moved[0].relative_to(ROOT)} line {moved[1]}"
                fixed = f"{os.path.relpath(moved[0], page.parent)}#L{moved[1]}"
            else:
                now = "not in that file, nor defined in another"
            problems.append((page, number, target,
                             f"{page.relative_to(ROOT)}:{number}: `{symbol}` is not on "
                             f"{path.relative_to(ROOT)} line {n} ({now})", fixed))
    return problems


def test_every_link_in_the_readme_and_docs_points_to_a_file_that_exists():
    missing = []
    for page in PAGES:
        for number, _, target in relative_links(page):
            path, anchor = resolve(page, target)
            if not path.exists():
                missing.append(f"{page.relative_to(ROOT)}:{number}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in heading_anchors(path):
                missing.append(f"{page.relative_to(ROOT)}:{number}: {target} (no such heading)")
    assert not missing, "links to nothing:\n" + "\n".join(missing)


def test_every_link_to_a_line_of_code_lands_on_a_line_that_holds_its_symbol():
    problems = [message for _, _, _, message, _ in code_link_problems()]
    assert not problems, ("line links that missed (python tests/test_docs.py --fix moves them to "
                          "the definitions):\n" + "\n".join(problems))


def test_the_readme_test_command_is_the_one_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    command = ci.split(" && ", 1)[1] if ci.startswith("cd ") else ci
    assert command in readme, f".ci/run's command is not in the README verbatim:\n{command}"


def fix() -> None:
    """Rewrite each missed line link to where the symbol is now (in that file, else the file that
    defines it)."""
    by_page: dict[Path, list] = {}
    for page, number, target, message, fixed in code_link_problems():
        print(message if fixed is None else f"{message}: fixed")
        if fixed is not None:
            by_page.setdefault(page, []).append((number, target, fixed))
    for page, fixes in by_page.items():
        lines = page.read_text().splitlines(keepends=True)
        for number, target, fixed in fixes:
            lines[number - 1] = lines[number - 1].replace(f"({target})", f"({fixed})", 1)
        page.write_text("".join(lines))


if __name__ == "__main__":
    if sys.argv[1:] != ["--fix"]:
        sys.exit("usage: python tests/test_docs.py --fix   (or run it with pytest)")
    fix()
