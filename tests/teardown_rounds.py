"""A data-parallel run's end, round after round: no process may hang leaving its process group.

    python tests/teardown_rounds.py STORE_DIR ROUNDS [--keep-policy]

Spawns 2 processes (gloo on CPU); each runs ROUNDS rounds of how a DDP run of train_brorl.py ends:
a model prepared in DDP by accelerate, backward passes, a last collective, then `Run.close` and the
run gone. Torch frees a DDP module's reducer holding the GIL: were the reducer the process group's
last owner, it would destroy the group and wait, GIL held, for gloo's worker threads, one of which
needs the GIL to free the last collective's tensors. Closed that way (the policy freed after
`accelerator.end_training()`), this hung in round 0 or 1 in each of 3 tries. Each round meets at a
fresh file store in STORE_DIR. --keep-policy: a reference to the policy outlives the run, which
`Run.close` must refuse.
"""

import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import InitProcessGroupKwargs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from run import Run  # noqa: E402

PROCESSES = 2


def one_round(store: str, out: Path, keep_policy: bool) -> None:
    accelerator = Accelerator(cpu=True, kwargs_handlers=[
        InitProcessGroupKwargs(init_method=store, timeout=timedelta(seconds=60))])
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)])
    policy, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    run = Run(accelerator, out, [], [], None, policy, None, optimizer, None, 0, 0, None, None)
    kept = policy if keep_policy else None
    del policy, optimizer, model
    for _ in range(2):
        run.policy(torch.randn(4, 64)).sum().backward()
        dist.all_reduce(torch.ones(()))
    run.close()  # then the run goes, as when train_brorl.py returns
    del kept


def rounds(rank: int, store_dir: str, n_rounds: int, keep_policy: bool) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(PROCESSES),
                      LOCAL_WORLD_SIZE=str(PROCESSES), OMP_NUM_THREADS="1")
    for n in range(n_rounds):
        one_round(f"file://{store_dir}/round{n}", Path(store_dir), keep_policy)
        AcceleratorState._reset_state(reset_partial_state=True)  # the next round starts afresh
        print(f"process {rank}: round {n} ended", flush=True)


if __name__ == "__main__":
    store_dir, n_rounds = sys.argv[1], int(sys.argv[2])
    Path(store_dir).mkdir(parents=True, exist_ok=True)
    mp.spawn(rounds, args=(store_dir, n_rounds, "--keep-policy" in sys.argv), nprocs=PROCESSES)
