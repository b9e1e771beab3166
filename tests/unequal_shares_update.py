"""One step's log-prob and update passes on processes with deliberately unequal shares; the test
checks that every process runs the same number of forward passes.

    accelerate launch --config_file configs/ddp_cpu.yaml \\
        tests/unequal_shares_update.py MODEL_DIR OUT_DIR ddp
    accelerate launch --config_file configs/ddp_cpu.yaml \\
        tests/unequal_shares_update.py MODEL_DIR OUT_DIR fsdp2

Under FSDP every forward and backward gathers each layer's shards from all processes, so a process
that runs fewer passes leaves the others waiting in a collective. Process 0 holds 8 rows with long
responses (several micro-batches per mini-batch), process 1 holds 1 short row (one micro-batch in
one mini-batch, none in the other), no correct response for the shrinkage monitor, and in a second
update no kept group at all. `fsdp2` shards the policy as the trainer does (run.fully_shard_policy:
torch's `fully_shard`, over gloo on CPU); `ddp` lets accelerate wrap it in DDP. Each process writes
its forward-pass counts per phase to OUT_DIR/passes_RANK.json; a process that waits in a collective
for a pass another never runs fails after a 60 s process-group timeout.
"""

import json
import sys
import weakref
from datetime import timedelta
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import rollout  # noqa: E402
import update  # noqa: E402
from rollout import load_policy  # noqa: E402
from run import end_process_group, fully_shard_policy  # noqa: E402


def share(rank: int, pad_id: int) -> update.TrainBatch:
    """Process 0: 8 rows, responses of 6-12 tokens; process 1: 1 row of 2 tokens."""
    g = torch.Generator().manual_seed(rank)
    rows, length = (8, (6, 13)) if rank == 0 else (1, (2, 3))
    prompts = [torch.randint(3, 90, (4,), generator=g).tolist() for _ in range(rows)]
    responses = [torch.randint(3, 90, (int(torch.randint(*length, (1,),
                                                         generator=g)),), generator=g).tolist()
                 for _ in range(rows)]
    prompt_ids, prompt_mask = rollout.left_pad(prompts, pad_id)
    return update.TrainBatch(prompt_ids, prompt_mask, rollout.right_pad(responses, pad_id),
                             rollout.right_pad([[1] * len(r) for r in responses], 0),
                             torch.randn(rows, generator=g))


def main() -> None:
    model_dir, out_dir, mode = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    accelerator = Accelerator(cpu=True,
                              kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(seconds=60))])
    rank = accelerator.process_index

    model, tokenizer = load_policy(model_dir)
    policy = update.Policy(model)
    phase = {"name": "", "passes": {}}

    def count_pass(module, args):
        phase["passes"][phase["name"]] = phase["passes"].get(phase["name"], 0) + 1

    policy.register_forward_pre_hook(count_pass)
    if mode == "fsdp2":  # the trainer's own sharding (in fp32 here)
        policy = fully_shard_policy(policy, bf16=False)
        optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
    else:
        policy, optimizer = accelerator.prepare(policy,
                                                torch.optim.SGD(policy.parameters(), lr=0.1))

    batch = share(rank, tokenizer.pad_token_id)
    cfg = update.UpdateConfig(minibatches=2, micro_batch_tokens=40)
    nothing = update.TrainBatch(batch.prompt_ids[:0], batch.prompt_mask[:0], batch.response_ids[:0],
                                batch.response_mask[:0], batch.advantages[:0])
    watch = batch if rank == 0 else nothing  # the monitor's correct responses: process 1 has none
    phase["name"] = "monitor"
    before = update.batch_logprobs(policy, watch, cfg).sum(-1)
    phase["name"] = "old_logprobs"
    old = update.batch_logprobs(policy, batch, cfg)
    phase["name"] = "ppo_update"
    stats = update.ppo_update(policy, optimizer, batch, old - 0.1, cfg,
                              generator=torch.Generator().manual_seed(0))
    phase["name"] = "monitor_after"
    after = update.batch_logprobs(policy, watch, cfg).sum(-1)
    phase["name"] = "update_without_rows"  # a step where process 1 kept no group
    kept = batch if rank == 0 else nothing
    update.ppo_update(policy, optimizer, kept, update.batch_logprobs(policy, kept, cfg), cfg)
    assert len(before) == len(after) == len(watch.advantages)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"passes_{rank}.json").write_text(json.dumps({**phase["passes"],
                                                             "grad_norm": stats["grad_norm"]}))
    prepared = weakref.ref(policy)
    del policy, optimizer  # before the process group (run.end_process_group)
    end_process_group(accelerator, prepared)


if __name__ == "__main__":
    main()
