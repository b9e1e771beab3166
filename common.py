"""Loading shared by train_brorl.py, eval.py and the benchmarks: task files and policies.

Task files are jsonl, one record per line with string fields `prompt` and `task` (the verifier
reward.py uses: "arith", "math", "code", "reasoning_gym") and an `answer`: a string, or a JSON
object for code test specs and Reasoning Gym entries; extra fields are kept. A policy is anything
`transformers.AutoModelForCausalLM.from_pretrained` loads: a local `save_pretrained` directory (our
checkpoints, the embedded tiny model) or a Hugging Face hub name.
"""

import gzip
import json
import os
import re
from pathlib import Path

import torch
import transformers

import reward

transformers.utils.logging.disable_progress_bar()  # per-call "Loading weights" bars drown the training log
HUB_NAME = re.compile(r"^[\w.-]+/[\w.-]+$")


class InputError(ValueError):
    """Bad user input (a config value, a data line, a model path); main() prints it as one line."""


def read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """(line number, object) for every non-blank line of a jsonl file (gzipped if it ends in .gz); a
    malformed line raises InputError naming the file and line."""
    rows = []
    with (gzip.open if path.suffix == ".gz" else open)(path, "rt") as f:
        for line_no, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise InputError(f"{path}:{line_no}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise InputError(f"{path}:{line_no}: expected a JSON object, got {type(row).__name__}")
            rows.append((line_no, row))
    return rows


def load_tasks(path: str | os.PathLike) -> list[dict]:
    """Read a jsonl task file; a malformed row raises InputError naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"data file not found: {path}")
    tasks = []
    for line_no, row in read_jsonl(path):
        for field in ("prompt", "task"):
            if not isinstance(row.get(field), str):
                raise InputError(f"{path}:{line_no}: field '{field}' must be a string")
        if not isinstance(row.get("answer"), (str, dict)):
            raise InputError(f"{path}:{line_no}: field 'answer' must be a string or a JSON object")
        tasks.append(row)
    if not tasks:
        raise InputError(f"{path}: no task records")
    return tasks


def check_answers(tasks: list[dict], source: str) -> None:
    """InputError naming the record when a ground truth is not one its verifier can check (before any work)."""
    for index, task in enumerate(tasks):
        try:
            reward.validate_answer(task["task"], task["answer"])
        except ValueError as e:
            raise InputError(f"{source}: task record {index + 1}: {e}") from None


def check_model_path(name_or_path: str) -> None:
    """Fail early, in one line, on a model path that can't be loaded (before any work starts)."""
    if os.path.isdir(name_or_path):
        if not os.path.isfile(os.path.join(name_or_path, "config.json")):
            raise InputError(f"model directory has no config.json: {name_or_path}")
        return
    if not HUB_NAME.match(name_or_path) or name_or_path.startswith((".", "/")):
        raise InputError(f"model path does not exist: {name_or_path}")


def model_fingerprint(name_or_path: str) -> dict:
    """What identifies a model without reading its weights: a local directory's absolute path with the
    size and modification time of each of its files (so a re-saved model counts as another one, even
    with the same weights: eval.py refuses rather than mixes), or a hub name."""
    path = Path(name_or_path)
    if not path.is_dir():
        return {"hub": name_or_path}
    files = {f.name: [f.stat().st_size, f.stat().st_mtime_ns] for f in sorted(path.iterdir()) if f.is_file()}
    return {"path": str(path.resolve()), "files": files}


def load_tokenizer(name_or_path: str, revision: str | None = None):
    """The policy's tokenizer (with a pad token: the EOS token if it has none)."""
    check_model_path(name_or_path)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(name_or_path, revision=revision)
    except OSError as e:
        raise InputError(f"could not load model '{name_or_path}': {str(e).splitlines()[0]}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_policy(name_or_path: str, dtype: str = "float32", device: str = "cpu", revision: str | None = None):
    """(model, tokenizer) from a local directory or a hub name; the one loading path for every model."""
    tokenizer = load_tokenizer(name_or_path, revision)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            name_or_path, revision=revision, dtype=getattr(torch, dtype)
        )
    except OSError as e:
        raise InputError(f"could not load model '{name_or_path}': {str(e).splitlines()[0]}") from None
    return model.to(device), tokenizer
