"""The verifier pool where a caller's process or threads come and go: three scenarios, each
printing one JSON line.

    python tests/verifier_pool_lifetime.py

- interrupted: calls cut by Ctrl-C (SIGINT) while a worker holds a check, each followed by a call
  with a correct answer, and the worker processes of this process that the pool does not hold
  (none may be left);
- forked: a child made by os.fork() scores with a pool that must start its workers;
- after_main: calls on a non-daemon thread after the main thread has returned (the interpreter then
  waits for that thread, and shuts down what it can before it does).
"""

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import reward  # noqa: E402
import sandbox  # noqa: E402

OVERRUN = ("math", "\\boxed{(x+y+z+w)^{45}}", "2")  # past the 0.2 s timeout
SLOW = ("math", "\\boxed{(x+y+z)^{30}}", "2")  # ~0.75 s to check here: within a 5 s timeout
RIGHT = [("math", "\\boxed{x(x+1)}", "x^2+x"), ("math", "\\boxed{x(x+9)}", "x^2+9*x")]


def score(memory_mb: int, items: list, timeout: float = 0.2, workers: int = 2) -> dict:
    stats = reward.VerifyStats()
    config = reward.VerifyConfig(timeout=timeout, step_timeout=20, worker_memory_mb=memory_mb)
    return {"rewards": reward.score_batch(items, workers, config, stats), "errors": stats.errors}


def report(scenario: str, **result) -> None:
    print(json.dumps({"scenario": scenario, **result}), flush=True)


main, after = threading.get_ident(), []
for _ in range(3):
    threading.Timer(0.3, signal.pthread_kill, (main, signal.SIGINT)).start()
    try:
        score(1536, [SLOW], timeout=5, workers=1)
    except KeyboardInterrupt:
        after.append(score(1536, RIGHT[:1], workers=1))
held = {proc.pid for proc in reward.verifier_pool(1, 1536).procs if proc is not None}
report("interrupted", after=after, strays=len(set(sandbox._children(os.getpid())) - held))

child = os.fork()
if child == 0:
    signal.alarm(60)  # a hung child fails the scenario instead of hanging it
    os._exit(0 if score(1600, RIGHT)["rewards"] == [1.0, 1.0] else 1)
report("forked", status=os.waitpid(child, 0)[1])


def calls_after_main() -> None:
    time.sleep(0.3)
    for _ in range(2):
        try:
            report("after_main", **score(1536, [RIGHT[0], OVERRUN, RIGHT[1]]))
        except Exception as e:
            report("after_main", raised=repr(e))


threading.Thread(target=calls_after_main).start()
