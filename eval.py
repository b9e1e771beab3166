"""Score a policy on a task file: pass@1 (the mean reward over K samples per problem, the paper's
protocol) and the unbiased pass@k of Chen et al. 2021 (arXiv 2107.03374) for k = 1, 2, 4, ..., K.

Works on any checkpoint directory (a `save_pretrained` folder: the trainer's `checkpoints/step_*/model`,
the tiny model, a downloaded hub model) without the trainer:

    python eval.py --model runs/demo/checkpoints/step_000060/model --data data/arith_test.jsonl --samples 16
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

import reward
import rollout
from common import InputError, load_policy, load_tasks


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased estimate of P(at least one of k samples is correct) from n samples with c correct:
    1 - C(n-c, k) / C(n, k), computed as a stable product (Chen et al. 2021, Fig. 3).

    >>> pass_at_k(4, 1, 1), pass_at_k(4, 1, 2), pass_at_k(4, 0, 4), pass_at_k(4, 3, 2)
    (0.25, 0.5, 0.0, 1.0)
    """
    if k > n:
        raise ValueError(f"k={k} exceeds the number of samples n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def k_values(samples: int) -> list[int]:
    """Powers of two up to `samples`, and `samples` itself."""
    ks = [2**i for i in range(samples.bit_length()) if 2**i <= samples]
    return ks if ks[-1] == samples else ks + [samples]


def evaluate(model, tokenizer, tasks: list[dict], samples: int, temperature: float = 0.6, top_p: float = 0.95,
             max_new_tokens: int = 16, seed: int = 0, chat_template: bool = True, max_batch_seqs: int = 1024,
             verify_workers: int = 2, verify_config: reward.VerifyConfig | None = None) -> dict:
    """pass@1 and pass@k over `tasks`, K = `samples` rollouts per problem, plus per-problem counts."""
    start = time.time()
    params = rollout.SamplingParams(n=samples, temperature=temperature, top_p=top_p,
                                    max_new_tokens=max_new_tokens, max_batch_seqs=max_batch_seqs)
    prompt_ids = rollout.encode_prompts(tokenizer, [t["prompt"] for t in tasks], chat_template)
    rollouts = rollout.generate(model, tokenizer, prompt_ids, params, torch.Generator().manual_seed(seed))
    stats = reward.VerifyStats()
    items = [(tasks[g]["task"], text, tasks[g]["answer"]) for g, text in zip(rollouts.group.tolist(), rollouts.texts)]
    rewards = torch.tensor(reward.score_batch(items, verify_workers, verify_config, stats)).view(len(tasks), samples)
    correct = (rewards == 1.0).sum(dim=1).tolist()
    return {
        "problems": len(tasks),
        "samples": samples,
        "pass1": float(rewards.mean()),
        "pass_at_k": {str(k): float(np.mean([pass_at_k(samples, c, k) for c in correct])) for k in k_values(samples)},
        "correct_per_problem": correct,
        "verifier_timeouts": stats.timeouts,
        "verifier_errors": stats.errors,
        "seconds": time.time() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="checkpoint directory (save_pretrained layout) or hub name")
    parser.add_argument("--data", required=True, help="jsonl task file (prompt, answer, task)")
    parser.add_argument("--samples", type=int, default=16, help="samples per problem K (pass@1 is their mean)")
    parser.add_argument("--temperature", type=float, default=0.6, help="sampling temperature (paper: 0.6)")
    parser.add_argument("--top-p", type=float, default=0.95, help="nucleus sampling mass (paper: 0.95)")
    parser.add_argument("--max-new-tokens", type=int, default=16, help="response length limit")
    parser.add_argument("--max-problems", type=int, default=0, help="score only the first M problems (0: all)")
    parser.add_argument("--no-chat-template", action="store_true", help="feed prompts raw even if the tokenizer has a chat template")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    parser.add_argument("--verify-workers", type=int, default=2, help="verifier processes / concurrent code sandboxes")
    parser.add_argument("--verify-timeout", type=float, default=5.0, help="hard limit per distinct answer, seconds")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    try:
        if args.samples < 1 or args.temperature <= 0 or not 0 < args.top_p <= 1:
            raise InputError("need --samples >= 1, --temperature > 0 and 0 < --top-p <= 1")
        if args.verify_workers < 1 or args.verify_timeout <= 0:
            raise InputError("need --verify-workers >= 1 and --verify-timeout > 0")
        tasks = load_tasks(args.data)
        for index, task in enumerate(tasks):
            try:
                reward.validate_answer(task["task"], task["answer"])
            except ValueError as e:
                raise InputError(f"{args.data}: task record {index + 1}: {e}") from None
        tasks = tasks[: args.max_problems] if args.max_problems > 0 else tasks
        model, tokenizer = load_policy(args.model)
    except InputError as e:
        sys.exit(f"error: {e}")
    result = evaluate(model, tokenizer, tasks, args.samples, args.temperature, args.top_p, args.max_new_tokens,
                      args.seed, not args.no_chat_template, verify_workers=args.verify_workers,
                      verify_config=reward.VerifyConfig(timeout=args.verify_timeout))
    result.update(model=args.model, data=args.data, temperature=args.temperature, top_p=args.top_p)
    print(f"{args.data}: {result['problems']} problems x {args.samples} samples, "
          f"{result['problems'] / result['seconds']:.1f} problems/s")
    print(f"pass@1 {100 * result['pass1']:.2f}")
    for k, value in result["pass_at_k"].items():
        print(f"pass@{k:<4} {100 * value:.2f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
