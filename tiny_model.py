"""The embedded default policy: a tiny Qwen2-style causal LM, warmed up on the toy arithmetic task.

No model hub is reachable from the machines this project is built on, so the default run builds its
own model: a char-level tokenizer (the `tokenizers` library, wrapped as a transformers fast
tokenizer) and a ~1M-parameter Qwen2 model, saved with `save_pretrained` and then loaded through
the same `from_pretrained(path)` call used for `nvidia/Nemotron-Research-Reasoning-Qwen-1.5B`.

Two choices keep the same model servable by vLLM (see shared notes on vLLM's CPU backend):
head size 32 (vLLM's CPU attention rejects 16) and untied input/output embeddings (vLLM's
in-place weight reload silently leaves a tied output layer stale).

A short supervised warm-up (teacher forcing on `prompt -> \\boxed{answer}`) brings the policy to a
partial pass rate, the analog of the saturated ProRL checkpoint BroRL starts from: it has learned
the answer format and solves some problems, and RL must do the rest. The result is cached under
`--cache-dir`, keyed by a hash of everything that determines it, so it is built once.

    python tiny_model.py                 # build (or reuse) and print the cached model's path
    python tiny_model.py --warmup-steps 0 --out /tmp/tiny-random
    python tiny_model.py --train-data data/many_answers_train.jsonl --warmup-steps 800
                                         # warmed on the many-answers task's prior, cached apart
"""

import argparse
import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from tasks import InputError, load_tasks

BOX_TOKEN = "\\boxed{"
SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]
DEFAULT_TRAIN_DATA = Path(__file__).parent / "data" / "arith_train.jsonl"
DEFAULT_CACHE_DIR = Path(os.environ.get("BRORL_CACHE") or Path.home() / ".cache" / "brorl")


@dataclass
class TinySpec:
    """Everything that determines the tiny model; its hash names the cache entry."""

    hidden_size: int = 128
    intermediate_size: int = 512
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    max_positions: int = 256
    warmup_steps: int = 300
    warmup_batch: int = 128
    warmup_lr: float = 1e-3
    warmup_lr_ramp: int = 50
    seed: int = 0


def build_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """Char-level tokenizer over printable ASCII, with `\\boxed{` as one token."""
    chars = ["\n", "\t"] + [chr(c) for c in range(32, 127)]
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + chars)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # Oniguruma: (?m) lets . match newlines in Oniguruma
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_tokens([BOX_TOKEN])
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )


def build_model(spec: TinySpec, tokenizer) -> transformers.PreTrainedModel:
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.hidden_size // spec.num_heads,
        max_position_embeddings=spec.max_positions,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.eos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(spec.seed)
    return transformers.Qwen2ForCausalLM(config)


def sft_batch(tokenizer, tasks: list[dict]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded `prompt + \\boxed{answer}<eos>` with labels only on the response tokens."""
    rows, labels = [], []
    for task in tasks:
        prompt = tokenizer.encode(task["prompt"])
        response = tokenizer.encode(BOX_TOKEN + task["answer"] + "}") + [tokenizer.eos_token_id]
        rows.append(prompt + response)
        labels.append([-100] * len(prompt) + response)
    width = max(map(len, rows))
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    label_ids = torch.tensor([r + [-100] * (width - len(r)) for r in labels])
    return input_ids, (input_ids != pad).long(), label_ids


def warmup_row(task: dict, rng: random.Random) -> dict:
    """The task as a warm-up row: as it is, or, for a record with a `prior` over answers (the
    many-answers task, data/make_many_answers.py), with an answer drawn from the prior, so that the
    warm-up teaches the prior's skew (near misses included)."""
    if "prior" not in task:
        return task
    answers, weights = zip(*task["prior"].items())
    return {**task, "answer": rng.choices(answers, weights)[0]}


def warm_up(model, tokenizer, tasks: list[dict], spec: TinySpec) -> None:
    """Supervised warm-up by teacher forcing; deliberately short (a partial pass rate is the
    point)."""
    rng = random.Random(spec.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=spec.warmup_lr)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / spec.warmup_lr_ramp))
    model.train()
    for _ in range(spec.warmup_steps):
        rows = [warmup_row(task, rng) for task in rng.sample(tasks, spec.warmup_batch)]
        input_ids, attention_mask, labels = sft_batch(tokenizer, rows)
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()


def build(out: Path, spec: TinySpec, train_data: Path = DEFAULT_TRAIN_DATA) -> Path:
    """Build, warm up and save the tiny model atomically at `out`."""
    tokenizer = build_tokenizer()
    model = build_model(spec, tokenizer)
    if spec.warmup_steps:
        warm_up(model, tokenizer, load_tasks(train_data), spec)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "tiny_spec.json").write_text(json.dumps(asdict(spec), indent=2))
    try:
        os.replace(tmp, out)
    except OSError:  # another process built it first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def tiny_model_path(cache_dir: Path = DEFAULT_CACHE_DIR, spec: TinySpec = TinySpec(),
                    train_data: Path = DEFAULT_TRAIN_DATA) -> Path:
    """Where the warmed-up tiny model of this spec and warm-up data is cached (built or not)."""
    key = json.dumps(asdict(spec),
                     sort_keys=True) + hashlib.sha256(Path(train_data).read_bytes()).hexdigest()
    return Path(cache_dir) / f"tiny-arith-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def ensure_tiny_model(cache_dir: Path = DEFAULT_CACHE_DIR, spec: TinySpec = TinySpec(),
                      train_data: Path = DEFAULT_TRAIN_DATA) -> Path:
    """Path of the cached warmed-up tiny model, building it on first use."""
    out = tiny_model_path(cache_dir, spec, train_data)
    if not (out / "config.json").is_file():
        try:  # before the warm-up, not after it
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"the tiny model's cache folder {out.parent} ($BRORL_CACHE) cannot "
                             f"be made: {e.strerror}") from None
        start = time.time()
        print(f"building the tiny default model (once, cached at {out}) ...", flush=True)
        build(out, spec, train_data)
        print(f"built in {time.time() - start:.1f}s", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path,
                        help="write the model here instead of the cache (always rebuilds)")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR,
                        help="cache directory ($BRORL_CACHE)")
    parser.add_argument("--train-data", type=Path, default=DEFAULT_TRAIN_DATA,
                        help="warm-up data (jsonl)")
    parser.add_argument("--warmup-steps", type=int, default=TinySpec.warmup_steps,
                        help="supervised warm-up steps")
    parser.add_argument("--seed", type=int, default=TinySpec.seed,
                        help="initialisation and data-order seed")
    args = parser.parse_args()
    if args.warmup_steps < 0 or not 0 <= args.seed < 2**63:
        raise SystemExit("error: --warmup-steps must be >= 0 and --seed in [0, 2^63)")
    if args.out and (args.out.is_file() or args.out.is_dir() and any(args.out.iterdir())):
        raise SystemExit(f"error: --out {args.out} exists: pass a new folder (it is never "
                         "overwritten)")
    spec = TinySpec(warmup_steps=args.warmup_steps, seed=args.seed)
    try:
        print(build(args.out, spec, args.train_data) if args.out
              else ensure_tiny_model(args.cache_dir, spec, args.train_data))
    except InputError as e:
        raise SystemExit(f"error: {e}") from None


if __name__ == "__main__":
    main()
