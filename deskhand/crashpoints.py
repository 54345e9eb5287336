"""Named places where a test may kill the process: the crash points every layer shares.

The product calls ``at(point, target)`` at a boundary worth crashing on (between a commit
and what follows it); nothing happens unless test code in the same process called
``install`` or ``kill_at`` first. No flag, setting or environment variable turns one on:
only a launcher under ``tests/devtools`` installs them, in its own process.

It lives at the bottom of the layers so that the mail intake and the engine, which may
not import the agent, name their boundaries the same way the run's steps do
(``agent.run.faults`` re-exports these and adds the tool and model faults). The points:

- ``before_step`` / ``after_step`` — around every durable step, by step name; ``after_step``
  is the window between a step's own commit and DBOS's checkpoint of its output.
- ``before_tool`` / ``after_effect`` / ``after_commit`` / ``before_model`` — a run's tools
  and model (``agent.run.faults``).
- ``after_store:inbound`` — a received message is committed and not yet handed to a
  workflow; ``after_enqueue:inbound`` — handed on, the sender not yet answered.
- ``after_commit:customer.route`` — a customer's line routed (a run opened) and its
  run not yet enqueued; ``after_store:customer_line`` — a line from the API or a help desk
  committed and its routing workflow not yet enqueued.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

_hooks: dict[tuple[str, str], Callable[[], None]] = {}


def install(point: str, target: str, action: Callable[[], None]) -> None:
    _hooks[(point, target)] = action


def kill_at(point: str, target: str, nth: int = 1) -> None:
    """SIGKILL this process the ``nth`` time it reaches ``point`` for ``target``."""
    count = {"n": 0}

    def action() -> None:
        count["n"] += 1
        if count["n"] == nth:
            sigkill_self()

    install(point, target, action)


def at(point: str, target: str) -> None:
    action = _hooks.get((point, target)) or _hooks.get((point, "*"))
    if action is not None:
        action()


def installed() -> bool:
    return bool(_hooks)


def clear() -> None:
    _hooks.clear()


def sigkill_self() -> None:
    """Die the way a power cut kills a worker: no cleanup, no checkpoint."""
    os.kill(os.getpid(), signal.SIGKILL)
