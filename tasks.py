"""Task files: reading and checking them, and `InputError`, the one-line error for bad input.

Task files are jsonl, one record per line with string fields `prompt` and `task` (the verifier
reward.py uses: a key of reward.TASK_KINDS, "arith", "math", ...) and an `answer`: a string, or a
JSON object for code test specs and Reasoning Gym entries; extra fields are kept.
"""

import gzip
import itertools
import json
import os
from pathlib import Path

import reward
import sandbox


class InputError(ValueError):
    """Bad user input (a config value, a data line, a model path); main() prints it as one line."""


def error_line(e: BaseException) -> str:
    """An exception in one line, for an InputError about a file that does not load: its type and
    the first line of its message."""
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"


def first_of(items: list[str], shown: int, sep: str = ", ") -> str:
    """The first `shown` items joined, and how many more, for a one-line message."""
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return sep.join(items[:shown]) + more


# A task line longer than this is refused before it is parsed: the largest real records (code tasks
# with their tests inline) are far smaller, and a runaway line (a binary file, a missing newline)
# would otherwise be read whole into memory. Benchmark files in their sources' layouts are not
# capped.
MAX_TASK_LINE_BYTES = 32 * 2**20


def json_loads(text: str | bytes):
    """json.loads, integers longer than CPython's 4,300-digit limit included (up to
    sandbox.MAX_INT_DIGITS, as the verifier compares them; ValueError for a longer one)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer over the limit: read again a chunk of digits at a time
        return json.loads(text, parse_int=sandbox.json_int)


def read_jsonl(path: Path, max_line_bytes: int | None = None) -> list[tuple[int, dict]]:
    """(line number, object) for every non-blank line of a jsonl file (gzipped if it ends in .gz);
    a malformed line (not UTF-8, not JSON, not an object, longer than `max_line_bytes`) raises
    InputError naming the file and line."""
    rows = []
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
        for line_no in itertools.count(1):
            raw = f.readline(max_line_bytes + 1) if max_line_bytes else f.readline()
            if not raw:
                break
            if max_line_bytes and len(raw) > max_line_bytes:
                raise InputError(f"{path}:{line_no}: line longer than "
                                 f"{max_line_bytes // 2**20} MiB")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{path}:{line_no}: not UTF-8 text (byte {e.start} of the line)"
                                 ) from None
            if not line.strip():
                continue
            try:
                row = json_loads(line)
            except ValueError as e:
                raise InputError(f"{path}:{line_no}: not valid JSON "
                                 f"({getattr(e, 'msg', e)})") from None
            except RecursionError:
                raise InputError(f"{path}:{line_no}: not valid JSON here (nested too deep)"
                                 ) from None
            if not isinstance(row, dict):
                raise InputError(f"{path}:{line_no}: expected a JSON object, "
                                 f"got {type(row).__name__}")
            rows.append((line_no, row))
    return rows


def load_tasks(path: str | os.PathLike) -> list[dict]:
    """Read a jsonl task file; a malformed row raises InputError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"data file not found: {path}")
    tasks = []
    for line_no, row in read_jsonl(path, MAX_TASK_LINE_BYTES):
        for field in ("prompt", "task"):
            if not isinstance(row.get(field), str) or not row[field]:
                raise InputError(f"{path}:{line_no}: field '{field}' must be a non-empty string")
        if not isinstance(row.get("answer"), (str, dict)):
            raise InputError(f"{path}:{line_no}: field 'answer' must be a string or a JSON object")
        tasks.append(row)
    if not tasks:
        raise InputError(f"{path}: no task records")
    return tasks


def check_answers(tasks: list[dict], source: str) -> None:
    """InputError naming the record when a ground truth is not one its verifier can check (before
    any work)."""
    for index, task in enumerate(tasks):
        try:
            reward.validate_answer(task["task"], task["answer"])
        except ValueError as e:
            raise InputError(f"{source}: task record {index + 1}: {e}") from None
