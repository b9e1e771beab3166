"""Generation throughput at N=16 vs N=512 rollouts per prompt, at equal total samples.

The paper (Table 2) measures 36.5 samples/s at N=16 and 72.4 at N=512 on H100s: with many samples
per prompt, the prompt is prefilled once and shared, and decoding runs in larger batches. This
runs the same comparison with rollout.py's engines on this machine, by default with the embedded
tiny model and the toy task's prompts; with several engines, side by side in one run.

    python bench/rollout_throughput.py
    python bench/rollout_throughput.py --few-shot 16     # long prompts: 16 solved examples first
    python bench/rollout_throughput.py --engines hf vllm --few-shot 16
    python bench/rollout_throughput.py --model PATH --total 2048 --max-new-tokens 64
"""

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import rollout  # noqa: E402
from rollout import load_policy  # noqa: E402
from tasks import load_tasks  # noqa: E402
from tiny_model import ensure_tiny_model  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny",
                        help="model directory or hub name ('tiny': the embedded model)")
    parser.add_argument("--data",
                        default=str(Path(__file__).parent.parent / "data" / "arith_train.jsonl"),
                        help="prompts")
    parser.add_argument("--total", type=int, default=8192,
                        help="samples per measurement (equal for every N)")
    parser.add_argument("--ns", type=int, nargs="+", default=[16, 512],
                        help="rollouts per prompt to compare")
    parser.add_argument("--max-new-tokens", type=int, default=8, help="response length limit")
    parser.add_argument("--max-batch-seqs", type=int, default=2048,
                        help="most sequences decoded at once")
    parser.add_argument("--few-shot", type=int, default=0,
                        help="prepend this many solved training problems to every prompt "
                             "(longer prompts)")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats (best is reported)")
    parser.add_argument("--engines", nargs="+", choices=["hf", "vllm"], default=["hf"],
                        help="rollout engines to compare")
    args = parser.parse_args()
    model_path = str(ensure_tiny_model()) if args.model == "tiny" else args.model
    model, tokenizer = load_policy(model_path)
    tasks = load_tasks(args.data)
    prefix = "".join(f"{t['prompt']}\\boxed{{{t['answer']}}}\n"
                     for t in tasks[-args.few_shot:]) if args.few_shot else ""
    rows = []
    for engine in args.engines:
        policy = model if engine == "hf" else rollout.VLLMEngine(
            model_path, dtype="float32", max_num_seqs=max(args.max_batch_seqs, *args.ns))
        for n in args.ns:
            prompts = rollout.encode_prompts(tokenizer, [prefix + t["prompt"]
                                              for t in tasks[: args.total // n]], True)
            params = rollout.SamplingParams(n=n, max_new_tokens=args.max_new_tokens,
                                            max_batch_seqs=args.max_batch_seqs)
            # warm-up
            rollout.generate(policy, tokenizer, prompts[:1], params,
                             torch.Generator().manual_seed(0))
            best = min(
                _timed(lambda: rollout.generate(policy, tokenizer, prompts, params,
                                                torch.Generator().manual_seed(r)))
                for r in range(args.repeats)
            )
            rows.append((engine, n, len(prompts), len(prompts) * n / best))
    print(f"generation, {args.total} samples, prompts of ~{len(prompts[0])} tokens, "
          f"max {args.max_new_tokens} new tokens, {torch.get_num_threads()} threads")
    print("| engine | N per prompt | prompts | samples/s |\n| --- | --- | --- | --- |")
    for engine, n, prompts, rate in rows:
        print(f"| {engine} | {n} | {prompts} | {rate:.0f} |")
    for engine in args.engines:
        rates = [rate for e, _, _, rate in rows if e == engine]
        print(f"{engine}: N={args.ns[-1]} / N={args.ns[0]} throughput: {rates[-1] / rates[0]:.2f}x")


def _timed(fn) -> float:
    start = time.time()
    fn()
    return time.time() - start


if __name__ == "__main__":
    main()
