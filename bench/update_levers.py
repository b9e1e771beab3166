"""The update's levers on one GPU, side by side in one run: what activation checkpointing, the
entropy in the output layer's recompute, and compiling the decoder layers or the output layer's
chunk cost or save.

Each variant runs the trainer's step (update.batch_logprobs for π_old, then update.ppo_update with
AdamW) on gpu_check's 1.5B-shaped model, fp32 master weights under bf16 autocast, over the same two
batches (full-length rows and skewed lengths up to 16K); tokens/s and MFU count real tokens only:
- checkpoint all: every decoder layer under activation checkpointing (the trainer's
  `--gradient-checkpointing`), micro-batches of `--micro-batch-tokens`;
- checkpoint every k-th: the others keep their activations (selective checkpointing), with
  smaller micro-batches where the name says;
- no checkpoint, smaller micro-batches: no recompute, more passes (a row longer than the budget
  is still one pass);
- no entropy: the output layer's chunk without the entropy (the bound on what computing it
  outside the checkpointed chunk could save);
- compiled layers: torch.compile on each decoder layer (dynamic shapes; compile time reported);
- and output chunk: also torch.compile on the output layer's chunk (`update._chunk_logprobs`:
  the logits, log-softmax, gather and entropy fused, instead of several passes over a [chunk,
  vocabulary] fp32 tensor each).
With `--profile`, each variant's update runs once more under torch's profiler and the kernels
that took the most time are printed after its rows.

    python bench/update_levers.py                  # about 4 minutes on one H100
    python bench/update_levers.py --only "checkpoint all" "no entropy" --profile
    python bench/update_levers.py --tiny --device cpu   # the code path on a small model
"""

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import run  # noqa: E402
import update  # noqa: E402
from bench.gpu_check import (QWEN2_1P5B, peak_tflops, random_batch,  # noqa: E402
                             skewed_rows, update_flops)

# name: (checkpoint every k-th layer (None: none), tokens per pass (None: --micro-batch-tokens),
# entropy computed, what is compiled: the decoder layers (the trainer's --compile-layers), the
# output layer's chunk). They run in this order whatever --only's: compiled layers stay compiled
# for the variants after them, and a variant reuses what an earlier one compiled (its "first call
# s" then leaves that compile out).
VARIANTS = {
    "checkpoint all": (1, None, True, ()),
    "checkpoint every 2nd": (2, None, True, ()),
    "checkpoint every 2nd, micro-batch 16K": (2, 16384, True, ()),
    "checkpoint every 4th, micro-batch 8K": (4, 8192, True, ()),
    "no checkpoint, micro-batch 8K": (None, 8192, True, ()),
    "no entropy": (1, None, False, ()),
    "compiled output chunk": (1, None, True, ("chunk",)),
    "compiled layers": (1, None, True, ("layers",)),
    "compiled layers, checkpoint every 2nd, micro-batch 16K": (2, 16384, True, ("layers",)),
    "compiled layers and output chunk, checkpoint every 2nd, micro-batch 16K":
        (2, 16384, True, ("layers", "chunk")),
}


def build(args):
    import transformers

    shape = dict(QWEN2_1P5B)
    if args.tiny:
        shape.update(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                     num_attention_heads=4, num_key_value_heads=2)
    config = transformers.Qwen2Config(**shape)
    with torch.device(args.device):
        return transformers.Qwen2ForCausalLM(config)


def _chunk_logprobs_without_entropy(hidden, lm_head_weight, targets, temperature):
    logits = (hidden @ lm_head_weight.T).float() / temperature
    logprobs = logits.gather(-1, targets[:, None]).squeeze(-1) - logits.logsumexp(dim=-1)
    return logprobs, torch.zeros_like(logprobs)


def profiled(step, cuda: bool, label: str, kernels: int = 15) -> None:
    """Run `step` under torch's profiler and print the kernels that took the most time (or why
    not: a failed profile must not lose the variant's timings)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    try:
        with torch.profiler.profile(activities=activities) as profile:
            step()
            if cuda:
                torch.cuda.synchronize()
    except Exception as e:
        print(f"# profile, {label}: failed, {type(e).__name__}: {str(e).splitlines()[0][:300]}",
              flush=True)
        return
    print(f"# profile, {label}", flush=True)
    print(profile.key_averages().table(sort_by="self_cuda_time_total" if cuda
                                       else "self_cpu_time_total", row_limit=kernels,
                                       max_name_column_width=60), flush=True)


def measure(args, variant: str, policy, optimizer, model, batches, micro_batch_tokens: int
            ) -> list[dict]:
    cfg = update.UpdateConfig(minibatches=1, micro_batch_tokens=micro_batch_tokens,
                              logprob_chunk_tokens=4096)
    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    rows = []
    for name, batch in batches:
        sequences = update.row_lengths(batch).tolist()
        start = time.perf_counter()
        update.ppo_update(policy, optimizer, batch, update.batch_logprobs(policy, batch, cfg), cfg)
        sync()
        warm_s = time.perf_counter() - start
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        old = update.batch_logprobs(policy, batch, cfg)
        sync()
        logprob_s = time.perf_counter() - start
        start = time.perf_counter()
        update.ppo_update(policy, optimizer, batch, old, cfg)
        sync()
        update_s = time.perf_counter() - start
        achieved = update_flops(model, batch) / update_s
        peak = peak_tflops() if cuda else None
        rows.append({"batch": name, "tokens": sum(sequences), "first call s": round(warm_s, 1),
                     "tokens/s (fwd+bwd+AdamW)": round(sum(sequences) / update_s),
                     "MFU": f"{100 * achieved / peak / 1e12:.1f}%" if peak else "n/a",
                     "log-prob pass tokens/s": round(sum(sequences) / logprob_s),
                     "peak GiB": round(torch.cuda.max_memory_allocated() / 2**30, 1)
                     if cuda else "n/a"})
        if args.profile:
            profiled(lambda: update.ppo_update(policy, optimizer, batch, old, cfg), cuda,
                     f"{variant}, {name}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(line for line in __doc__.splitlines() if line.startswith("    python")))
    parser.add_argument("--only", nargs="+", choices=VARIANTS, default=list(VARIANTS),
                        help="run only these variants")
    parser.add_argument("--rows", type=int, default=32, help="full-length rows in the batch")
    parser.add_argument("--prompt-len", type=int, default=512, help="prompt tokens per row")
    parser.add_argument("--response-len", type=int, default=1536, help="response tokens per row")
    parser.add_argument("--skewed-cap", type=int, default=16384,
                        help="longest response of the skewed batch (the paper's 16K)")
    parser.add_argument("--micro-batch-tokens", type=int, default=32768,
                        help="tokens per pass where the variant does not say (the paper preset's)")
    parser.add_argument("--device", default="cuda", help="cuda, or cpu for a dry run")
    parser.add_argument("--tiny", action="store_true", help="a small model: the code path only")
    parser.add_argument("--profile", action="store_true",
                        help="also profile each variant's update and print its top kernels")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: no CUDA GPU usable by torch here; --device cpu --tiny for a dry run")
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision="bf16", cpu=args.device == "cpu")
    model = build(args)
    vocab = model.config.vocab_size
    batches = [("full-length rows", random_batch(args.rows, args.prompt_len, args.response_len,
                                                 vocab)),
               ("skewed lengths", skewed_rows(args, vocab))]
    plain_policy = update.Policy(model)
    optimizer = torch.optim.AdamW(plain_policy.parameters(), lr=1e-6)
    policy, optimizer = accelerator.prepare(plain_policy, optimizer)
    chunk = update._chunk_logprobs
    results = []
    for variant in [v for v in VARIANTS if v in args.only]:
        every, tokens, entropy, compiled = VARIANTS[variant]
        if every is None:
            model.gradient_checkpointing_disable()
        else:
            run.checkpoint_layers(model, every)  # the trainer's --checkpoint-every
        update._chunk_logprobs = chunk if entropy else _chunk_logprobs_without_entropy
        compile_start = time.perf_counter()
        if "chunk" in compiled:
            update._chunk_logprobs = torch.compile(update._chunk_logprobs, dynamic=True)
        if "layers" in compiled:
            run.compile_layers(plain_policy)  # the trainer's --compile-layers
        try:
            rows = measure(args, variant, policy, optimizer, model, batches,
                           tokens or args.micro_batch_tokens)
        except torch.OutOfMemoryError:
            optimizer.zero_grad(set_to_none=True)  # what the failed step left for the next
            rows = [{"error": "out of GPU memory"}]
        except Exception as e:  # one failed variant must not hide the others' numbers
            rows = [{"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}]
        for row in rows:
            row = {"variant": variant, **row,
                   "variant wall s": round(time.perf_counter() - compile_start, 1)}
            print(json.dumps(row), flush=True)
            results.append(row)
        if args.device == "cuda":
            torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
