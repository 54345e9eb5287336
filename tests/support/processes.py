"""A command run to its end, or killed with everything it started.

``subprocess.run(..., timeout=...)`` kills only the process it started: a bench whose
phase spawned worker processes leaves them running when the clock runs out, orphaned,
polling a scratch database that is gone and loading every later test (LESSONS #54). Here
the command gets its own session, and a timeout kills the whole process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any


def run_all_or_kill(
    argv: list[str], *, timeout: float, **kwargs: Any
) -> subprocess.CompletedProcess:
    """``subprocess.run`` with text output captured, in a session of its own; on timeout
    every process of that session is SIGKILLed and ``subprocess.TimeoutExpired`` raised
    with what the command had printed."""
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        **kwargs,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise subprocess.TimeoutExpired(argv, timeout, output=out, stderr=err) from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)
