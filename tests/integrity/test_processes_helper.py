"""The tests' own subprocess helper kills what a timed-out command started, not only the command."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.processes import run_all_or_kill
from tests.support.waiting import until

# A command that starts a grandchild and then hangs: what a bench with worker processes does.
SPAWNS = (
    "import subprocess, sys, time; "
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
    "print(child.pid, flush=True); time.sleep(120)"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its parent counts as gone
        return f.read().split(") ")[1][0] != "Z"


def test_a_timeout_kills_the_grandchildren_too():
    with pytest.raises(subprocess.TimeoutExpired) as raised:
        run_all_or_kill([sys.executable, "-c", SPAWNS], timeout=3)
    grandchild = int(raised.value.output.split()[0])
    until(f"the grandchild {grandchild} to be gone", lambda: not _alive(grandchild))


def test_a_command_that_ends_gives_its_output_and_code():
    done = run_all_or_kill([sys.executable, "-c", "print('hi'); raise SystemExit(3)"], timeout=30)
    assert (done.returncode, done.stdout) == (3, "hi\n")
