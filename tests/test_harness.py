"""The test harness: a launch that hangs fails its test with every process's stack, and leaves no
process behind."""

import psutil
import pytest

from conftest import run_script

# a launcher whose worker runs in a session of its own, as torchrun starts them
LAUNCHER = """
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
# the same worker, left behind: its launcher exits at once
LAUNCHER_GONE = LAUNCHER.replace("launcher_watches_its_worker()\n", "")


def hung(launcher: str) -> str:
    """The stacks a launch that hangs fails with."""
    with pytest.raises(AssertionError, match="still running after 5 s") as failure:
        run_script("-c", launcher, timeout=5)
    assert not [p for p in psutil.process_iter(["cmdline"])
                if "worker_waits_for_a_peer()" in " ".join(p.info["cmdline"] or [])], \
        "the worker outlived its launch"
    return str(failure.value).split("stacks (stderr):")[1]  # the command's text holds the names


def test_a_hung_launch_fails_with_the_stacks_of_the_launcher_and_its_workers():
    stacks = hung(LAUNCHER)
    assert "in launcher_watches_its_worker" in stacks and "in worker_waits_for_a_peer" in stacks


def test_a_worker_whose_launcher_is_gone_is_stopped_too():
    assert "in worker_waits_for_a_peer" in hung(LAUNCHER_GONE)
