"""One BroRL update as every process of `accelerate launch` runs it; the test compares 1 and 2
processes.

    python tests/data_parallel_update.py MODEL_DIR OUT.pt   # 1 process
    accelerate launch --config_file configs/ddp_cpu.yaml \\
        tests/data_parallel_update.py MODEL_DIR OUT.pt

The global batch is 4 prompts x 3 rollouts with fixed random tokens and rewards. Process r takes
prompts r, r + P, ... (as train_brorl.py does), so with 2 processes the shares differ in tokens; the
advantages are REINFORCE++-baseline (whitened over the whole batch through update.all_sum), the rows
are re-dealt across processes by cost (update.deal_rows) and the micro-batches are small, so
gradient accumulation without sync is exercised. Writes the updated
parameters (main process).
"""

import json
import sys
import weakref
from pathlib import Path

import torch
from accelerate import Accelerator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import rollout  # noqa: E402
import update  # noqa: E402
from rollout import load_policy  # noqa: E402
from run import end_process_group  # noqa: E402

PROMPTS, ROLLOUTS = 4, 3


def global_batch(pad_id: int) -> tuple[list[list[int]], list[list[int]], torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 90, (int(torch.randint(2, 6, (1,),
                                                       generator=g)),), generator=g).tolist()
               for _ in range(PROMPTS)]
    responses = [torch.randint(3, 90, (int(torch.randint(1, 9, (1,),
                                                         generator=g)),), generator=g).tolist()
                 for _ in range(PROMPTS * ROLLOUTS)]
    rewards = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0], [1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    return prompts, responses, rewards


def main() -> None:
    model_dir, out = sys.argv[1], Path(sys.argv[2])
    accelerator = Accelerator(cpu=True)
    rank, processes = accelerator.process_index, accelerator.num_processes
    model, tokenizer = load_policy(model_dir)
    policy = update.Policy(model)
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.5)
    policy, optimizer = accelerator.prepare(policy, optimizer)

    prompts, responses, rewards = global_batch(tokenizer.pad_token_id)
    mine = list(range(PROMPTS))[rank::processes]
    rows = [p * ROLLOUTS + j for p in mine for j in range(ROLLOUTS)]
    advantages = update.reinforce_pp_baseline_advantages(
        rewards[mine].flatten(), torch.arange(len(mine)).repeat_interleave(ROLLOUTS))
    prompt_ids, prompt_mask = rollout.left_pad([prompts[r // ROLLOUTS] for r in rows],
                                               tokenizer.pad_token_id)
    batch = update.TrainBatch(prompt_ids, prompt_mask,
                              rollout.right_pad([responses[r] for r in rows],
                                                tokenizer.pad_token_id),
                              rollout.right_pad([[1] * len(responses[r]) for r in rows], 0),
                              advantages)
    cfg = update.UpdateConfig(minibatches=1, micro_batch_tokens=20, max_grad_norm=1e9)
    # rows re-dealt by cost (with 2 processes, rows move between them; with 1, nothing moves)
    linear_cost = accelerator.unwrap_model(policy).linear_cost
    own = update.row_costs(batch, linear_cost)
    batch = update.deal_rows(batch, linear_cost)
    dealt = update.row_costs(batch, linear_cost)
    old = update.batch_logprobs(policy, batch, cfg)
    # a sampler whose gap to π_old differs from token to token
    sampler = old - 0.01 * batch.response_ids.float()
    mismatch = update.sampler_mismatch(old, sampler, batch.response_mask)
    stats = update.ppo_update(policy, optimizer, batch, old - 0.1, cfg)  # ratios != 1: clipping
    out.with_name(f"{out.stem}.rank{rank}.json").write_text(json.dumps(
        {"rows": [len(own), len(dealt)], "cost": [float(own.sum()), float(dealt.sum())],
         "tokens": int(batch.response_mask.sum()), "stats": {**stats, **mismatch}}))
    if accelerator.is_main_process:
        torch.save({k: v.detach().clone()
                    for k, v in accelerator.unwrap_model(policy).model.state_dict().items()}, out)
    prepared = weakref.ref(policy)
    del policy, optimizer  # before the process group (run.end_process_group)
    end_process_group(accelerator, prepared)


if __name__ == "__main__":
    main()
