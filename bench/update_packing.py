"""Packed vs padded micro-batches on skewed lengths: tokens/s of the update's forward + backward
and of the log-prob pass (forward only), side by side in one run.

The paper's responses (up to 16K tokens) are skewed: many short, a tail at the cap. Lengths here
are log-normal with a cap, the budget twice the cap (the paper preset's 32,768 for 16K). Both
paths share the model, the rows, the chunked output layer and activation checkpointing:
- padded: what a trainer without packing does (and brorl did): rows sorted by length, a
  micro-batch filled while rows x (longest prompt + longest response) fits the budget, each row
  left/right-padded to that width, transformers' `sdpa` with a 2-D padding mask;
- packed: `update.micro_batches` (first-fit decreasing on real tokens), one `update.Pack` per
  micro-batch, `update.packed_attention` (on CPU, causal SDPA per group of rows of similar lengths).
Tokens/s counts real tokens only, over this process's CPU time (1 thread by
default). The model is the review's CPU stand-in for the 1.5B's ratios:
4 layers, hidden 256, 4/2 heads, vocabulary 2,048 (its output layer ~18% of the body, as at 1.5B).

    python bench/update_packing.py                       # 64 rows, cap 2,048, budget 4,096
    python bench/update_packing.py --rows 16 --cap 512   # a quick look
"""

import argparse
import sys
import time
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rollout  # noqa: E402
import update  # noqa: E402


def padded_micro_batches(batch: update.TrainBatch, rows: list[int], max_tokens: int
                         ) -> list[list[int]]:
    """Rows sorted by length, a micro-batch filled while rows x (longest prompt + longest
    response) fits `max_tokens`; a longer row alone."""
    prompt = batch.prompt_mask.sum(-1).tolist()
    response = batch.response_mask.sum(-1).tolist()
    order = sorted(rows, key=lambda i: (prompt[i] + response[i], response[i]), reverse=True)
    batches, current, width_p, width_r = [], [], 0, 0
    for i in order:
        p, r = max(width_p, prompt[i]), max(width_r, response[i])
        if current and (len(current) + 1) * (p + r) > max_tokens:
            batches.append(current)
            current, p, r = [], prompt[i], response[i]
        current.append(i)
        width_p, width_r = p, r
    return batches + [current] if current else batches


def padded_token_logprobs(model, batch: update.TrainBatch, rows: list[int], chunk_tokens: int
                          ) -> torch.Tensor:
    """[rows, r] log-probs of a padded micro-batch: [b, longest prompt + longest response]."""
    p = int(batch.prompt_mask[rows].sum(-1).max())
    r = int(batch.response_mask[rows].sum(-1).max())
    device = model.device
    ids = torch.cat([batch.prompt_ids[rows, -p:], batch.response_ids[rows, :r]], -1).to(device)
    mask = torch.cat([batch.prompt_mask[rows, -p:], batch.response_mask[rows, :r]], -1).to(device)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    hidden = model.base_model(input_ids=ids, attention_mask=mask,
                              position_ids=positions, use_cache=False).last_hidden_state
    live = mask[:, -r:].bool()
    return update.chunked_logprobs(model, hidden[:, -r - 1 : -1][live], ids[:, -r:][live],
                                   live, 1.0, chunk_tokens)[0]


def skewed_batch(rows: int, cap: int, vocab: int, seed: int, prompt_median: int = 100,
                 response_median: int = 300) -> update.TrainBatch:
    """Log-normal lengths: prompts around `prompt_median` tokens (σ 0.6, at most cap / 4),
    responses around `response_median` (σ 1.0, at most cap)."""
    g = torch.Generator().manual_seed(seed)

    def lengths(median: float, sigma: float, most: int) -> list[int]:
        drawn = (torch.randn(rows, generator=g, dtype=torch.float64) * sigma).exp() * median
        return drawn.round().clamp(1, most).long().tolist()

    prompts = [torch.randint(3, vocab, (n,), generator=g).tolist()
               for n in lengths(prompt_median, 0.6, cap // 4)]
    responses = [torch.randint(3, vocab, (n,), generator=g).tolist()
                 for n in lengths(response_median, 1.0, cap)]
    prompt_ids, prompt_mask = rollout.left_pad(prompts, 0)
    return update.TrainBatch(prompt_ids, prompt_mask, rollout.right_pad(responses, 0),
                             rollout.right_pad([[1] * len(r) for r in responses], 0),
                             torch.randn(rows, generator=g))


def side_by_side(model, batch: update.TrainBatch, budget: int, chunk_tokens: int = 4096,
                 repeats: int = 2, synchronize=lambda: None, clock=time.process_time) -> dict:
    """Seconds of each path over the whole batch, forward + backward and forward only (the fastest
    of `repeats`, alternating), and how many tokens each computes. Sets `model`'s attention to
    the packed one (calls without a pack, the padded path's, stay transformers' sdpa). The clock:
    this process's CPU time by default (on a shared CPU, what other jobs take is not counted);
    wall time for a GPU."""
    rows = list(range(len(batch.advantages)))
    padded_bins = padded_micro_batches(batch, rows, budget)
    packed_bins = update.micro_batches(batch, rows, budget)
    policy = update.Policy(model)

    def padded(rows):
        return padded_token_logprobs(model, batch, rows, chunk_tokens)

    def packed(rows):
        return policy(update.pack_rows(batch, rows).to(model.device), 1.0, chunk_tokens)[0]

    def timed_pass(forward, bins: list[list[int]], backward: bool) -> float:
        synchronize()
        start = clock()
        for rows in bins:
            if backward:
                forward(rows).sum().backward()
            else:
                with torch.no_grad():
                    forward(rows)
        synchronize()
        return clock() - start

    timed_pass(padded, padded_bins[-1:], True)  # warm-up: first calls allocate
    timed_pass(packed, packed_bins[-1:], True)
    result = {"real tokens": int(batch.prompt_mask.sum() + batch.response_mask.sum()),
              "padded tokens": sum(len(b) * int(batch.prompt_mask[b].sum(-1).max()
                                                + batch.response_mask[b].sum(-1).max())
                                   for b in padded_bins),
              "padded micro-batches": len(padded_bins), "packed micro-batches": len(packed_bins)}
    for name, backward in (("forward + backward", True), ("forward", False)):
        times = [(timed_pass(padded, padded_bins, backward),
                  timed_pass(packed, packed_bins, backward)) for _ in range(repeats)]
        result[name] = tuple(min(column) for column in zip(*times))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=64, help="rollouts in the batch")
    parser.add_argument("--cap", type=int, default=2048, help="longest response (tokens)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the lengths and tokens")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--repeats", type=int, default=2,
                        help="timings per path, alternating; the fastest is reported")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    vocab = 2048
    config = transformers.Qwen2Config(
        vocab_size=vocab, hidden_size=256, intermediate_size=704, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2 * args.cap,
        tie_word_embeddings=False)
    model = transformers.Qwen2ForCausalLM(config)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    batch = skewed_batch(args.rows, args.cap, vocab, args.seed)
    result = side_by_side(model, batch, 2 * args.cap, repeats=args.repeats)
    real, padded = result["real tokens"], result["padded tokens"]
    print(f"{args.rows} rows, {real:,} real tokens (prompts ~100, responses ~300 tokens, "
          f"log-normal, cap {args.cap}), budget {2 * args.cap:,}, fp32, {args.threads} "
          f"thread(s), activation checkpointing; padded: {result['padded micro-batches']} "
          f"micro-batches computing {padded:,} tokens ({padded / real:.2f}x real); packed: "
          f"{result['packed micro-batches']}")
    print("| pass | padded tokens/s | packed tokens/s | packed / padded |")
    print("| --- | --- | --- | --- |")
    for name in ("forward + backward", "forward"):
        padded_s, packed_s = result[name]
        print(f"| {name} | {real / padded_s:,.0f} | {real / packed_s:,.0f} | "
              f"{padded_s / packed_s:.2f}x |")


if __name__ == "__main__":
    main()
