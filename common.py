"""Loading shared by train_brorl.py, eval.py and the benchmarks: task files and policies.

Task files are jsonl, one record per line with string fields `prompt` and `task` (the verifier
reward.py uses: a key of reward.TASK_KINDS, "arith", "math", ...) and an `answer`: a string, or a JSON
object for code test specs and Reasoning Gym entries; extra fields are kept. A policy is anything
`transformers.AutoModelForCausalLM.from_pretrained` loads: a local `save_pretrained` directory (our
checkpoints, the embedded tiny model) or a Hugging Face hub name.
"""

import gzip
import itertools
import json
import os
import re
from pathlib import Path

import torch
import transformers

import reward
import rollout

# per-call "Loading weights" bars drown the training log
transformers.utils.logging.disable_progress_bar()
HUB_NAME = re.compile(r"^[\w.-]+/[\w.-]+$")


class InputError(ValueError):
    """Bad user input (a config value, a data line, a model path); main() prints it as one line."""


# A task line longer than this is refused before it is parsed: the largest real records (code tasks with
# their tests inline) are far smaller, and a runaway line (a binary file, a missing newline) would
# otherwise be read whole into memory. Benchmark files in their sources' layouts are not capped.
MAX_TASK_LINE_BYTES = 32 * 2**20


def read_jsonl(path: Path, max_line_bytes: int | None = None) -> list[tuple[int, dict]]:
    """(line number, object) for every non-blank line of a jsonl file (gzipped if it ends in .gz); a
    malformed line (not UTF-8, not JSON, not an object, longer than `max_line_bytes`) raises InputError
    naming the file and line."""
    rows = []
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
        for line_no in itertools.count(1):
            raw = f.readline(max_line_bytes + 1) if max_line_bytes else f.readline()
            if not raw:
                break
            if max_line_bytes and len(raw) > max_line_bytes:
                raise InputError(f"{path}:{line_no}: line longer than {max_line_bytes // 2**20} MiB")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"{path}:{line_no}: not UTF-8 text (byte {e.start} of the line)"
                                 ) from None
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
    for line_no, row in read_jsonl(path, MAX_TASK_LINE_BYTES):
        for field in ("prompt", "task"):
            if not isinstance(row.get(field), str):
                raise InputError(f"{path}:{line_no}: field '{field}' must be a string")
        if not isinstance(row.get("answer"), (str, dict)):
            raise InputError(f"{path}:{line_no}: field 'answer' must be a string or a JSON object")
        tasks.append(row)
    if not tasks:
        raise InputError(f"{path}: no task records")
    return tasks


def check_prompt_lengths(path: str | os.PathLike, tokenizer, limit: int, chat_template: bool) -> None:
    """InputError naming file:line of the first prompt over `limit` tokens (the model's context less the
    response budget), before any work: it could not be answered within the context, and one huge prompt
    makes a whole batch allocate for its length."""
    rows = read_jsonl(Path(path), MAX_TASK_LINE_BYTES)
    lengths = map(len,
                  rollout.encode_prompts(tokenizer, [row["prompt"] for _, row in rows], chat_template))
    for (line_no, _), length in zip(rows, lengths):
        if length > limit:
            raise InputError(f"{path}:{line_no}: prompt is {length} tokens, over the limit of {limit} "
                             "(the model's context less max_new_tokens)")


def check_answers(tasks: list[dict], source: str) -> None:
    """InputError naming the record when a ground truth is not one its verifier can check (before
    any work)."""
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


CHECKPOINT = re.compile(r"^step_(\d{6})$")  # the trainer's checkpoints/step_NNNNNN folders


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why a saved checkpoint can't be resumed from (None when it can): its trainer_state.pt does
    not load, or a file it lists (name and size, taken when the checkpoint was written) is missing
    or changed size."""
    try:
        state = torch.load(checkpoint / "trainer_state.pt", weights_only=False)
        files = state.get("files", {})
    except Exception as e:  # a damaged pickle raises any of several types
        return f"trainer_state.pt does not load: {type(e).__name__}"
    for name, size in files.items():
        if not (checkpoint / name).is_file():
            return f"{name} is missing"
        if (checkpoint / name).stat().st_size != size:
            return f"{name} is {(checkpoint / name).stat().st_size} bytes, {size} when saved"
    return None


def latest_checkpoint(output_dir: Path, say=print) -> Path | None:
    """The newest complete checkpoint of a training run (trainer_state.pt is written last); a
    damaged one is passed over for the one before it, saying so."""
    root = output_dir / "checkpoints"
    found = sorted(p for p in root.iterdir() if CHECKPOINT.match(p.name)) if root.is_dir() else []
    for checkpoint in reversed([p for p in found if (p / "trainer_state.pt").is_file()]):
        problem = checkpoint_problem(checkpoint)
        if problem is None:
            return checkpoint
        say(f"skipping the damaged checkpoint {checkpoint} ({problem}): "
            "falling back to the one before it")
    return None


def resolve_model_dir(name_or_path: str) -> str:
    """A model to load from what a user may pass as one: a training run's folder means the model of
    its latest complete checkpoint, a checkpoint folder (step_*) its model/; anything else is
    returned as is."""
    path = Path(name_or_path)
    if (path / "checkpoints").is_dir():
        checkpoint = latest_checkpoint(path)
        if checkpoint is None:
            raise InputError(f"{path} is a training run with no complete checkpoint yet")
        print(f"{path} is a training run: evaluating its latest checkpoint, {checkpoint / 'model'}")
        return str(checkpoint / "model")
    if (path / "model" / "config.json").is_file() and not (path / "config.json").is_file():
        print(f"{path} is a checkpoint: evaluating its model, {path / 'model'}")
        return str(path / "model")
    return name_or_path


def model_fingerprint(name_or_path: str) -> dict:
    """What identifies a model without reading its weights: a local directory's absolute path with the
    size and modification time of each of its files (so a re-saved model counts as another one, even
    with the same weights: eval.py refuses rather than mixes), or a hub name."""
    path = Path(name_or_path)
    if not path.is_dir():
        return {"hub": name_or_path}
    files = {f.name: [f.stat().st_size, f.stat().st_mtime_ns]
             for f in sorted(path.iterdir()) if f.is_file()}
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


def load_policy(name_or_path: str, dtype: str = "float32", device: str = "cpu",
                revision: str | None = None):
    """(model, tokenizer) from a local directory or a hub name; the one loading path for every model."""
    tokenizer = load_tokenizer(name_or_path, revision)
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            name_or_path, revision=revision, dtype=getattr(torch, dtype)
        )
    except OSError as e:
        raise InputError(f"could not load model '{name_or_path}': {str(e).splitlines()[0]}") from None
    return model.to(device), tokenizer
