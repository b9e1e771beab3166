"""One GPU, one command: what the paper-scale step costs on it, before renting eight.

No download: a model of the paper's base model's shape (Qwen2 1.5B: 28 layers, hidden 1536,
vocabulary 151,936, untied output layer) is built from its config with random weights, which is
all speed and memory need. Each row of the table is one measurement:

- update: the trainer's policy-gradient step (update.batch_logprobs for π_old, then
  update.ppo_update) on fp32 master weights with bf16 autocast (accelerate's mixed precision, what
  a one-GPU `accelerate launch --mixed_precision bf16` run takes) and activation checkpointing:
  tokens/s, MFU (6 FLOPs per decoder weight per real token, per output-layer weight per response
  token, plus causal attention; against the GPU's dense bf16 peak), peak memory; on full-length
  rows and on a skewed batch (log-normal lengths up to 16K, as the paper's responses); and how
  far the first mini-batch's ratio π_θ/π_old is from 1 before any step (π_old is computed in the
  update's own micro-batches: 0 when gradients on and off run the same kernels);
- packing: forward + backward and forward only over the skewed batch, padded micro-batches
  (transformers' sdpa with a padding mask) against packed ones (torch's varlen FlashAttention-2),
  side by side (bench/update_packing.py's comparison on the GPU);
- fsdp2: the same step with the policy sharded by run.fully_shard_policy (the trainer's FSDP2 path)
  on a one-process NCCL group, and whether its log-probs stay fp32; then with its decoder layers
  compiled before sharding (the trainer's `--compile-layers` under FSDP2);
- generate: the hf engine (rollout.generate) at N=16 and N=512 with equal samples, fp32 weights
  (what the trainer samples with when vLLM is absent) and a bf16 copy;
- checkpoint: run.save_checkpoint of the policy and AdamW state, and accelerate's load_state back;
- vllm (when vLLM is installed): rollout.VLLMEngine in bf16 beside the fp32 trainer model, N=16 vs
  N=512 with equal samples, then what the trainer does after each update: sleep, wake with the
  changed weights streamed in, generate, and the gap between the engine's log-probs and the
  trainer's (bf16 autocast) on what it sampled.

    python bench/gpu_check.py                  # about 5 minutes on one H100
    python bench/gpu_check.py --only update generate --json /tmp/gpu.json

It stops in one line on a machine without a usable CUDA GPU.
"""

import argparse
import importlib.util
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rollout  # noqa: E402
import update  # noqa: E402
from bench.update_packing import side_by_side, skewed_batch  # noqa: E402

# DeepSeek-R1-Distill-Qwen-1.5B's config.json: the shape of the paper's ProRLv2 base model
QWEN2_1P5B = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                  num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                  max_position_embeddings=131072, rope_theta=10000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=False)
# dense bf16 peak TFLOP/s by device name (vendor data sheets)
PEAK_BF16_TFLOPS = {"H100 PCIe": 756, "H100 NVL": 835, "H100": 989, "H200": 989, "A100": 312,
                    "L40S": 362, "B200": 2250}
SECTIONS = ("update", "packing", "fsdp2", "generate", "checkpoint", "vllm")


def peak_tflops() -> float | None:
    name = torch.cuda.get_device_name()
    return next((v for key, v in PEAK_BF16_TFLOPS.items() if key in name), None)


def build_model(layers: int):
    import transformers

    config = transformers.Qwen2Config(**{**QWEN2_1P5B, "num_hidden_layers": layers})
    with torch.device("cuda"):
        model = transformers.Qwen2ForCausalLM(config)
    return model


class IdTokenizer:
    """What rollout.generate needs of a tokenizer, for a model without one."""

    pad_token_id, eos_token_id = 0, 1

    def batch_decode(self, rows, skip_special_tokens=True):
        return [" ".join(map(str, row)) for row in rows]


def random_batch(rows: int, prompt_len: int, response_len: int, vocab: int) -> update.TrainBatch:
    g = torch.Generator().manual_seed(0)
    return update.TrainBatch(
        prompt_ids=torch.randint(2, vocab, (rows, prompt_len), generator=g),
        prompt_mask=torch.ones(rows, prompt_len, dtype=torch.long),
        response_ids=torch.randint(2, vocab, (rows, response_len), generator=g),
        response_mask=torch.ones(rows, response_len, dtype=torch.long),
        advantages=torch.randn(rows, generator=g))


def update_flops(model, batch: update.TrainBatch) -> float:
    """Forward + backward FLOPs of the update over `batch`'s real tokens: 6 per entry of a decoder
    layer's weight matrices for every token, 6 per output-layer weight for every response token
    (the only positions the update scores), and causal attention (QKᵀ and AV over half the context
    on average, times 3). Norms, biases and activations are not counted."""
    config = model.config
    layer_weights = sum(p.numel() for p in model.base_model.layers.parameters() if p.dim() == 2)
    lengths = update.row_lengths(batch).double()
    attention = 6 * config.num_hidden_layers * config.hidden_size * lengths
    return float((lengths * (6 * layer_weights + attention)).sum()
                 + 6 * model.get_output_embeddings().weight.numel() * batch.response_mask.sum())


def skewed_rows(args, vocab: int) -> update.TrainBatch:
    """About as many real tokens as the full-length batch, in lengths like the paper's: prompts
    around 256 tokens, responses around 2K, log-normal, at most `--skewed-cap`."""
    mean_response = 2048 * math.exp(0.5)  # a log-normal's mean: median x e^(σ²/2), σ = 1
    rows = max(2, round(args.rows * (args.prompt_len + args.response_len)
                        / (256 * math.exp(0.18) + mean_response)))
    return skewed_batch(rows, args.skewed_cap, vocab, seed=0, prompt_median=256,
                        response_median=2048)


def timed(fn, *args, **kwargs):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    torch.cuda.synchronize()
    return out, time.perf_counter() - start


def first_pass_log_ratio(policy, optimizer, batch: update.TrainBatch, old: torch.Tensor,
                         cfg: update.UpdateConfig) -> float:
    """max |log π_θ − log π_old| over the update's first micro-batch before any step: π_old as
    update.batch_logprobs computes it (no gradients), π_θ as update.ppo_update does (training mode,
    gradients on), the same rows in the same pack (one mini-batch, as `update_rows` runs). 0: the
    first mini-batch's ratio is exactly 1."""
    rows = update.micro_batches(batch, list(range(len(batch.advantages))),
                                cfg.micro_batch_tokens)[0]
    pack = update.pack_rows(batch, rows)
    policy.train()
    logprobs, _ = policy(pack.to(next(policy.parameters()).device), cfg.temperature,
                         cfg.logprob_chunk_tokens)
    (logprobs.sum() * 0.0).backward()  # the backward FSDP2's forward prepared for
    optimizer.zero_grad(set_to_none=True)
    policy.eval()
    drift = logprobs.detach().float().cpu() - old[rows, : pack.live.shape[1]]
    return float(drift[pack.live].abs().max())


def update_rows(args, policy, optimizer, model, label: str) -> list[dict]:
    cfg = update.UpdateConfig(minibatches=1, micro_batch_tokens=args.micro_batch_tokens,
                              logprob_chunk_tokens=4096)
    vocab = model.config.vocab_size
    rows = []
    for batch, lengths in ((random_batch(args.rows, args.prompt_len, args.response_len, vocab),
                            "full-length rows"), (skewed_rows(args, vocab), "skewed lengths")):
        sequences = update.row_lengths(batch).tolist()
        tokens = sum(sequences)
        update.ppo_update(policy, optimizer, batch, update.batch_logprobs(policy, batch, cfg), cfg)
        old, logprob_s = timed(update.batch_logprobs, policy, batch, cfg)
        first_pass = first_pass_log_ratio(policy, optimizer, batch, old, cfg)
        torch.cuda.reset_peak_memory_stats()
        stats, update_s = timed(update.ppo_update, policy, optimizer, batch, old, cfg)
        peak = peak_tflops()
        achieved = update_flops(model, batch) / update_s
        # batch_logprobs returns fp32 whatever the compute: an output rounded to bf16 shows as
        # every value bf16-representable
        bf16_rounded = bool((old == old.bfloat16().float()).all())
        rows.append({"check": f"{label}, {lengths}", "rows": len(sequences), "tokens": tokens,
                     "longest": max(sequences),
                     "tokens/s (fwd+bwd+AdamW)": round(tokens / update_s),
                     "MFU": f"{100 * achieved / peak / 1e12:.1f}%" if peak else "n/a",
                     "log-prob pass tokens/s": round(tokens / logprob_s),
                     "peak GiB": round(torch.cuda.max_memory_allocated() / 2**30, 1),
                     "log-probs rounded to bf16": bf16_rounded,
                     "first pass max |log ratio|": float(f"{first_pass:.3g}"),
                     "finite loss": math.isfinite(stats["loss"])})
    return rows


def check_packing(args) -> list[dict]:
    model = build_model(args.layers)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    batch = skewed_rows(args, model.config.vocab_size)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        result = side_by_side(model, batch, args.micro_batch_tokens, repeats=1,
                              synchronize=torch.cuda.synchronize, clock=time.perf_counter)
    del model
    torch.cuda.empty_cache()
    real = result["real tokens"]
    return [{"check": f"packing, skewed lengths, {name} (bf16 autocast)",
             "padded tokens/s": round(real / result[name][0]),
             "packed tokens/s": round(real / result[name][1]),
             "packed / padded": round(result[name][0] / result[name][1], 2),
             "padded computes x real": round(result["padded tokens"] / real, 2)}
            for name in ("forward + backward", "forward")]


def check_update(args) -> list[dict]:
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision="bf16")
    model = build_model(args.layers)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    policy = update.Policy(model)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    policy, optimizer = accelerator.prepare(policy, optimizer)
    rows = update_rows(args, policy, optimizer, model, "update (fp32 master, bf16 autocast)")
    del policy, optimizer, model
    accelerator.free_memory()
    return rows


def check_fsdp2(args) -> list[dict]:
    import torch.distributed as dist

    from run import compile_layers, fully_shard_policy

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    dist.init_process_group("nccl", rank=0, world_size=1)
    rows = []
    try:
        for compiled in (False, True):
            model = build_model(args.layers)
            model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False})
            policy = update.Policy(model)
            if compiled:
                compile_layers(policy)  # before sharding, as run.fsdp2_models
            policy = fully_shard_policy(policy)
            optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
            rows += update_rows(args, policy, optimizer, model, "fsdp2, 1 process (bf16 params"
                                + (", compiled layers)" if compiled else ")"))
            del policy, optimizer, model
    finally:
        dist.destroy_process_group()
    torch.cuda.empty_cache()
    return rows


def check_generate(args) -> list[dict]:
    model = build_model(args.layers).eval()
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        model.to(dtype)
        for n in (16, 512):
            prompts = [[2 + (p * 7919 + t) % 5000 for t in range(args.gen_prompt_len)]
                       for p in range(args.gen_samples // n)]
            params = rollout.SamplingParams(n=n, max_new_tokens=args.gen_tokens,
                                            max_batch_seqs=args.gen_samples)
            generator = torch.Generator().manual_seed(0)
            torch.cuda.reset_peak_memory_stats()
            out, seconds = timed(rollout.generate, model, IdTokenizer(), prompts, params,
                                 generator)
            samples = len(out.texts)
            rows.append({"check": f"generate hf, {str(dtype).split('.')[1]}, N={n} x "
                                  f"{len(prompts)} prompts",
                         "samples/s": round(samples / seconds, 1),
                         "tokens/s": round(int(out.response_mask.sum()) / seconds),
                         "peak GiB": round(torch.cuda.max_memory_allocated() / 2**30, 1)})
    del model
    torch.cuda.empty_cache()
    return rows


def check_checkpoint(args) -> list[dict]:
    from accelerate import Accelerator

    from run import save_checkpoint

    accelerator = Accelerator(mixed_precision="bf16")
    model = build_model(args.layers)
    policy = update.Policy(model)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    policy, optimizer = accelerator.prepare(policy, optimizer)
    cfg = update.UpdateConfig(minibatches=1, micro_batch_tokens=4096)
    batch = random_batch(2, 16, 16, model.config.vocab_size)
    update.ppo_update(policy, optimizer, batch, update.batch_logprobs(policy, batch, cfg), cfg)
    with tempfile.TemporaryDirectory(dir=args.scratch) as folder:
        _, save_s = timed(save_checkpoint, Path(folder), 1, accelerator, policy,
                          _SavableTokenizer(), {"step": 1}, keep=1)
        checkpoint = Path(folder) / "checkpoints" / "step_000001"
        size = sum(f.stat().st_size for f in checkpoint.rglob("*") if f.is_file())
        _, load_s = timed(accelerator.load_state, checkpoint / "state")
    del policy, optimizer, model
    accelerator.free_memory()
    return [{"check": "checkpoint (policy + AdamW, fp32)", "save s": round(save_s, 1),
             "load s": round(load_s, 1), "size GB": round(size / 1e9, 1)}]


def check_vllm(args) -> list[dict]:
    if importlib.util.find_spec("vllm") is None:
        return [{"check": "vllm",
                 "skipped": "not installed (pip install -r requirements-vllm.txt)"}]
    import tiny_model

    model = build_model(args.layers)
    # vLLM loads a tokenizer and checks prompt ids against it; ids are all this check uses
    tokenizer = tiny_model.build_tokenizer()
    prompts = [[2 + (p * 7919 + t) % (len(tokenizer) - 2) for t in range(args.gen_prompt_len)]
               for p in range(args.gen_samples // 16)]
    rows = []
    with tempfile.TemporaryDirectory(dir=args.scratch) as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        engine = rollout.VLLMEngine(folder, dtype="bfloat16",
                                    max_model_len=args.gen_prompt_len + args.gen_tokens,
                                    max_num_seqs=args.gen_samples,
                                    gpu_memory_utilization=args.vllm_memory)
        for n in (16, 512):
            params = rollout.SamplingParams(n=n, max_new_tokens=args.gen_tokens)
            out, seconds = timed(engine.generate, IdTokenizer(), prompts[:args.gen_samples // n],
                                 params)
            rows.append({"check": f"generate vllm, bf16, N={n} x {args.gen_samples // n} prompts",
                         "samples/s": round(len(out.texts) / seconds, 1),
                         "tokens/s": round(int(out.response_mask.sum()) / seconds)})
        with torch.no_grad():  # an update's worth of change, so a reload that did nothing shows
            for param in model.parameters():
                param.add_(torch.randn_like(param), alpha=1e-3)
        _, sleep_s = timed(engine.sleep)
        _, wake_s = timed(engine.wake_up, model)
        params = rollout.SamplingParams(n=16, max_new_tokens=args.gen_tokens)
        out = engine.generate(IdTokenizer(), prompts[:4], params)
        cfg = update.UpdateConfig(micro_batch_tokens=args.micro_batch_tokens)
        batch = update.TrainBatch(out.prompt_ids, out.prompt_mask, out.response_ids,
                                  out.response_mask, torch.zeros(len(out.texts)))
        with torch.autocast("cuda", dtype=torch.bfloat16):
            trainer = update.batch_logprobs(update.Policy(model), batch, cfg)
        gap = update.sampler_mismatch(trainer, out.logprobs, out.response_mask)
        rows.append({"check": "vllm sleep -> reload -> wake -> generate",
                     "sleep s": round(sleep_s, 1), "wake + reload s": round(wake_s, 1),
                     **{key: float(f"{value:.3g}") for key, value in gap.items()}})
        engine.close()
    del model
    torch.cuda.empty_cache()
    return rows


class _SavableTokenizer(IdTokenizer):
    def save_pretrained(self, folder):
        Path(folder, "tokenizer_config.json").write_text("{}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n".join(line for line in __doc__.splitlines() if line.startswith("    python")))
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                        help="run only these checks")
    parser.add_argument("--layers", type=int, default=QWEN2_1P5B["num_hidden_layers"],
                        help="decoder layers of the 1.5B-shaped model (fewer: a quicker look)")
    parser.add_argument("--rows", type=int, default=32, help="rollouts in the update's batch")
    parser.add_argument("--prompt-len", type=int, default=512, help="prompt tokens per row")
    parser.add_argument("--response-len", type=int, default=1536, help="response tokens per row")
    parser.add_argument("--skewed-cap", type=int, default=16384,
                        help="longest response of the skewed batch (the paper's 16K)")
    parser.add_argument("--micro-batch-tokens", type=int, default=32768,
                        help="tokens per forward/backward pass (the paper preset's)")
    parser.add_argument("--gen-samples", type=int, default=512,
                        help="samples per generation check (N=16 and N=512 alike)")
    parser.add_argument("--gen-prompt-len", type=int, default=256, help="prompt tokens")
    parser.add_argument("--gen-tokens", type=int, default=256, help="tokens generated per sample")
    parser.add_argument("--vllm-memory", type=float, default=0.5,
                        help="vLLM's gpu_memory_utilization in the vllm check")
    parser.add_argument("--scratch", default=None,
                        help="where the checkpoint and vllm checks write")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("error: no CUDA GPU usable by torch here (nvidia-smi, and a driver >= 580 for the "
                 "pinned torch): gpu_check measures a GPU")
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    rows = []
    for section in args.only:
        start = time.time()
        try:
            new = globals()[f"check_{section}"](args)
        except Exception as e:  # one failed check must not hide the others' numbers
            new = [{"check": section, "error": f"{type(e).__name__}: {str(e).splitlines()[0]}"}]
        for row in new:
            row["wall s"] = round(time.time() - start, 1)
            print(json.dumps(row), flush=True)
        rows += new
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
