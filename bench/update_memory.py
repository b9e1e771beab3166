"""Peak memory and time of the log-prob + loss step (forward and backward), chunked vs naive.

The naive path materialises [batch, seq, vocab] float32 logits and their log-softmax; update.py's
chunked path holds at most [chunk_tokens, vocab] at once. The gap grows with the vocabulary, so the
tiny model's body is paired with a larger vocabulary (8K; the vocab/hidden ratio of 64 is below
Qwen2.5-1.5B's 99, so real models gain more). The naive path at a 32K vocabulary would need
~18 GiB for the logits alone and does not fit this 24 GiB machine.
Each mode runs in a fresh subprocess and reports its peak resident memory above the baseline
after the model and batch were built. Both paths are measured with and without activation
checkpointing of the transformer body (`--gradient-checkpointing` in train_brorl.py): without it,
the body's saved activations dominate the chunked path at this size.

    python bench/update_memory.py                      # N=512 responses of 192 tokens, vocab 8192
    python bench/update_memory.py --n 64 --response-len 128 --vocab 8192
"""

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import update  # noqa: E402
from tiny_model import TinySpec, build_model, build_tokenizer  # noqa: E402


MODES = ["naive", "chunked", "naive+ckpt", "chunked+ckpt"]


def naive_token_logprobs(model, input_ids, attention_mask, response_len: int,
                         temperature: float = 1.0) -> torch.Tensor:
    """What a trainer without chunking computes: full [B, P+R, V] float32 logits, then their
    log-softmax (tests/test_update.py checks update.token_logprobs against it)."""
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention_mask,
                   position_ids=positions).logits.float()
    logprobs = torch.log_softmax(logits[:, -response_len - 1 : -1] / temperature, dim=-1)
    logprobs = logprobs.gather(-1, input_ids[:, -response_len:, None]).squeeze(-1)
    return logprobs * attention_mask[:, -response_len:]


def measure(mode: str, n: int, response_len: int, prompt_len: int, vocab: int, chunk: int) -> dict:
    tokenizer = build_tokenizer()
    model = build_model(TinySpec(max_positions=prompt_len + response_len + 8), tokenizer)
    model.resize_token_embeddings(vocab)
    model.train()
    if mode.endswith("+ckpt"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    g = torch.Generator().manual_seed(0)
    input_ids = torch.randint(0, vocab, (n, prompt_len + response_len), generator=g)
    attention_mask = torch.ones_like(input_ids)
    old = torch.zeros(n, response_len) - 5.0
    advantages = torch.randn(n, generator=g)
    base_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.time()
    if mode.startswith("naive"):
        logprobs = naive_token_logprobs(model, input_ids, attention_mask, response_len)
    else:
        batch = update.TrainBatch(input_ids[:, :prompt_len], attention_mask[:, :prompt_len],
                                  input_ids[:, prompt_len:], attention_mask[:, prompt_len:],
                                  advantages)
        update.Policy(model)  # sets the packed attention on the model
        logprobs, _ = update.token_logprobs(model, update.pack_rows(batch, list(range(n))),
                                            chunk_tokens=chunk)
    mask = torch.ones(n, response_len)
    cfg = update.UpdateConfig(eps_low=0.2, eps_high=0.28)
    loss, _, _ = update.per_token_loss(logprobs, old, advantages, mask, cfg)
    (loss.sum() / mask.sum()).backward()
    seconds = time.time() - start
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"mode": mode, "peak_mib": (peak_kib - base_kib) / 1024, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=512, help="rollouts in the batch (N)")
    parser.add_argument("--response-len", type=int, default=192, help="response tokens per rollout")
    parser.add_argument("--prompt-len", type=int, default=16, help="prompt tokens per rollout")
    parser.add_argument("--vocab", type=int, default=8192, help="vocabulary size")
    parser.add_argument("--chunk-tokens", type=int, default=4096,
                        help="chunk size of the chunked path")
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)  # one subprocess run
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(measure(args.mode, args.n, args.response_len, args.prompt_len, args.vocab,
                                 args.chunk_tokens)))
        return
    results = {}
    for mode in MODES:
        cmd = [sys.executable, __file__, "--mode", mode] + [f"--{k.replace('_', '-')}={v}"
                                                            for k, v in vars(args).items()
                                                            if k != "mode"]
        results[mode] = json.loads(subprocess.run(cmd, capture_output=True, text=True,
                                                  check=True).stdout)
    print(f"log-prob + loss step, forward + backward: N={args.n}, "
          f"response {args.response_len} tokens, vocab {args.vocab}, tiny Qwen2 body, fp32, CPU")
    print("| path | body checkpointing | peak memory (MiB) | time (s) |\n| --- | --- | --- | --- |")
    for mode in MODES:
        print(f"| {mode.removesuffix('+ckpt')} | {'yes' if mode.endswith('+ckpt') else 'no'} | "
              f"{results[mode]['peak_mib']:.0f} | {results[mode]['seconds']:.2f} |")
    for suffix, label in (("", "without"), ("+ckpt", "with")):
        ratio = results["chunked" + suffix]["peak_mib"] / results["naive" + suffix]["peak_mib"]
        print(f"chunked / naive peak memory, {label} body checkpointing: {ratio:.3f}")


if __name__ == "__main__":
    main()
