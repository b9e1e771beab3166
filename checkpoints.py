"""A training run's checkpoints, read without the trainer (eval.py, monitor.py and run.py share it).

A run folder holds checkpoints/step_NNNNNN/ (model/ as save_pretrained, state/, trainer_state.pt,
written last). A run folder may come from someone else, so its .pt files load as plain data only.
"""

import hashlib
import re
from pathlib import Path

import torch

from tasks import InputError, error_line

CHECKPOINT = re.compile(r"^step_(\d{6})$")  # the trainer's checkpoints/step_NNNNNN folders


def read_plain_data(path: Path):
    """A .pt file the trainer wrote (trainer_state.pt, probes.pt), loaded as plain data only:
    tensors, numbers, strings, lists and dicts. A run folder may come from someone else, and a
    pickle allowed to build any object runs whatever code it names."""
    try:
        return torch.load(path, weights_only=True)
    except PermissionError:  # not the file's fault: never passed over as damaged
        raise
    except Exception as e:  # a damaged or hostile pickle raises any of several types
        raise InputError(f"{path} does not load as plain data ({error_line(e)})") from None


# what run.py writes into every checkpoint's trainer_state.pt (files: name -> size, taken last;
# and digests: name -> sha256 of each file up to DIGEST_MAX_BYTES, absent from older checkpoints)
TRAINER_STATE_KEYS = ("step", "data_position", "config", "reference_step", "allocation", "files")
# The small files (RNG states, configs, the tokenizer) carry a checksum: damaged at their size they
# would load, and a resume would silently differ; hashing the weights would cost seconds per check.
DIGEST_MAX_BYTES = 2**20


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def read_trainer_state(checkpoint: Path) -> dict:
    """A checkpoint's trainer_state.pt as plain data, holding every key the trainer writes."""
    path = checkpoint / "trainer_state.pt"
    state = read_plain_data(path)
    if not isinstance(state, dict):
        raise InputError(f"{path} is not a trainer state (not a dict)")
    missing = [key for key in TRAINER_STATE_KEYS if key not in state]
    if missing:
        raise InputError(f"{path} is not a trainer state (no {', '.join(missing)})")
    wrong = [key for key in ("step", "data_position", "reference_step")
             if type(state[key]) is not int or state[key] < 0]
    wrong += [key for key in ("config", "allocation", "files", "digests")
              if not isinstance(state.get(key, {}), dict)]
    if wrong:
        raise InputError(f"{path} is not a trainer state ({', '.join(wrong)}: not a count, or not "
                         "a dict)")
    # files: name -> size, digests: name -> hex, each name a path inside the checkpoint
    for key, kind in (("files", int), ("digests", str)):
        for name, value in state.get(key, {}).items():
            if not (isinstance(name, str) and name and not Path(name).is_absolute()
                    and ".." not in Path(name).parts and type(value) is kind
                    and (kind is str or value >= 0)):
                raise InputError(f"{path} is not a trainer state ({key}: {repr(name)[:80]} -> "
                                 f"{repr(value)[:80]})")
    return state


def checkpoint_problem(checkpoint: Path) -> str | None:
    """Why a saved checkpoint can't be resumed from (None when it can): its trainer_state.pt does
    not load as a trainer state, or a file it lists (name and size, taken when the checkpoint was
    written) is missing or changed size, or a small one its content (its digest). A file this user
    may not read raises PermissionError: not the checkpoint's fault, so never a reason to pass it
    over."""
    try:
        state = read_trainer_state(checkpoint)
    except InputError as e:
        return str(e)
    digests = state.get("digests", {})
    for name, size in state["files"].items():
        path = checkpoint / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} is {path.stat().st_size} bytes, {size} when saved"
        if name in digests and file_digest(path) != digests[name]:
            return f"{name} changed since it was saved (its sha256)"
        open(path, "rb").close()
    return None


def checkpoint_folders(output_dir: Path) -> list[Path]:
    """A training run's checkpoints/step_NNNNNN folders, oldest first, complete or not."""
    root = output_dir / "checkpoints"
    return sorted(p for p in root.iterdir() if CHECKPOINT.match(p.name)) if root.is_dir() else []


def latest_checkpoint(output_dir: Path, say=print) -> Path | None:
    """The newest complete checkpoint of a training run (trainer_state.pt is written last); a
    damaged one is passed over for the one before it, saying so."""
    found = checkpoint_folders(output_dir)
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
