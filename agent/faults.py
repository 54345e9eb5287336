"""Fault injection for tests: named points where a test may crash the process.

There is no environment switch and no setting: a fault is installed only by
test code calling ``install`` in the process it wants to break (for a worker
subprocess, the test's own launcher script installs it before launch).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

_hooks: dict[tuple[str, str], Callable[[], None]] = {}


def install(point: str, tool: str, action: Callable[[], None]) -> None:
    _hooks[(point, tool)] = action


def clear() -> None:
    _hooks.clear()


def at(point: str, tool: str) -> None:
    action = _hooks.get((point, tool)) or _hooks.get((point, "*"))
    if action is not None:
        action()


def sigkill_self() -> None:
    """Die the way a power cut kills a worker: no cleanup, no checkpoint."""
    os.kill(os.getpid(), signal.SIGKILL)
