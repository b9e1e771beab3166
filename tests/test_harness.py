"""The test harness: a launch that hangs fails its test with every process's stack, and leaves no
process behind."""

import psutil
import pytest

from conftest import run_script

# a launcher whose worker runs in a session of its own, as torchrun starts them
HANGING_LAUNCHER = """
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", '''
import time
def worker_waits_for_a_peer():
    time.sleep(600)
worker_waits_for_a_peer()
'''], start_new_session=True)
def launcher_watches_its_worker():
    time.sleep(600)
launcher_watches_its_worker()
"""


def test_a_hung_launch_fails_with_the_stacks_of_the_launcher_and_its_workers():
    with pytest.raises(AssertionError, match="still running after 5 s") as failure:
        run_script("-c", HANGING_LAUNCHER, timeout=5)
    printed = str(failure.value)
    assert "launcher_watches_its_worker" in printed and "worker_waits_for_a_peer" in printed
    worker = [p for p in psutil.process_iter(["cmdline"])
              if "worker_waits_for_a_peer()" in " ".join(p.info["cmdline"] or [])]
    assert not worker, "the worker outlived its launch"
