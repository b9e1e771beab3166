"""A data-parallel run's end, round after round: no process may hang leaving its process group.

    python tests/teardown_rounds.py STORE_DIR ROUNDS

Spawns 2 processes (gloo on CPU); each runs ROUNDS rounds of how a DDP run of train_brorl.py ends:
a model prepared in DDP by accelerate, backward passes, a last collective, then `Run.close` and the
run gone. Torch frees a DDP module's reducer holding the GIL: were the reducer the process group's
last owner, it would destroy the group and wait, GIL held, for gloo's worker threads, one of which
needs the GIL to free the last collective's tensors. Closed that way, this hung within 6 rounds in
each try. Each round meets at a fresh file store in STORE_DIR.
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


def one_round(store: str) -> None:
    accelerator = Accelerator(cpu=True, kwargs_handlers=[
        InitProcessGroupKwargs(init_method=store, timeout=timedelta(seconds=60))])
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(4)])
    policy, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    run = Run(accelerator, Path(store), [], [], None, policy, None, optimizer, None, 0, 0, None)
    del policy, optimizer, model
    for _ in range(2):
        run.policy(torch.randn(4, 64)).sum().backward()
        dist.all_reduce(torch.ones(()))
    run.close()  # then the run goes, as when train_brorl.py returns


def rounds(rank: int, store_dir: str, n_rounds: int) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(PROCESSES),
                      LOCAL_WORLD_SIZE=str(PROCESSES), OMP_NUM_THREADS="1")
    for n in range(n_rounds):
        one_round(f"file://{store_dir}/round{n}")
        AcceleratorState._reset_state(reset_partial_state=True)  # the next round starts afresh
        print(f"process {rank}: round {n} ended", flush=True)


if __name__ == "__main__":
    store_dir, n_rounds = sys.argv[1], int(sys.argv[2])
    mp.spawn(rounds, args=(store_dir, n_rounds), nprocs=PROCESSES)
