"""rollout.pack_rollouts at paper-like shape: 1,024 sampled responses of up to a few thousand
tokens into padded tensors, against padding through nested Python lists (what it did before).

    python bench/pack_rollouts.py
    python bench/pack_rollouts.py --rows 1024 --max-len 16384
"""

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rollout  # noqa: E402


class NoTexts:
    """A tokenizer that skips decoding: only the tensors are timed."""

    pad_token_id = 0

    def batch_decode(self, responses, skip_special_tokens):
        return [""] * len(responses)


def nested_list_pad(rows: list[list], pad, dtype=None) -> torch.Tensor:
    width = max(1, max(map(len, rows)))
    return torch.tensor([list(r) + [pad] * (width - len(r)) for r in rows], dtype=dtype)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1024, help="responses")
    parser.add_argument("--max-len", type=int, default=4096, help="longest response (tokens)")
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, args.max_len + 1, (args.rows,), generator=generator).tolist()
    responses = [torch.randint(150_000, (n,), generator=generator).tolist() for n in lengths]
    logprobs = [(-torch.rand(n, generator=generator)).tolist() for n in lengths]
    prompt_ids, group = [[1, 2, 3]], [0] * args.rows
    start = time.perf_counter()
    packed = rollout.pack_rollouts(NoTexts(), prompt_ids, group, responses, logprobs,
                                   [False] * args.rows)
    flat_s = time.perf_counter() - start
    start = time.perf_counter()
    ids = nested_list_pad(responses, 0)
    mask = nested_list_pad([[1] * len(r) for r in responses], 0)
    values = nested_list_pad(logprobs, 0.0, torch.float32)
    nested_s = time.perf_counter() - start
    assert (torch.equal(ids, packed.response_ids) and torch.equal(mask, packed.response_mask)
            and torch.equal(values, packed.logprobs))
    print(f"{args.rows} rows, {sum(lengths):,} tokens: pack_rollouts {flat_s:.2f} s, "
          f"nested lists {nested_s:.2f} s (same tensors)")


if __name__ == "__main__":
    main()
