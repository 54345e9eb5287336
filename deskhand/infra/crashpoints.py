"""Named places where a test may kill the process: the crash points every layer shares.

The product calls ``at(Point.X, target)`` at a boundary worth crashing on (between a commit
and what follows it); nothing happens unless test code in the same process called
``install`` or ``kill_at`` first. No flag, setting or environment variable turns one on:
only a launcher under ``tests/devtools`` installs them, in its own process.

``Point`` below is the one list of them: each member's docstring says the boundary it marks
and the crash-sweep schedules (``tests/devtools/crash*.py``, ``manage.py crash_sweep``) or
tests that kill there. A name not in it fails fast, at the call site and in a schedule, and
a point no schedule or test uses is removed (``tests/integrity/test_crashpoints.py``).

It lives at the bottom of the layers so that the mail intake and the engine, which may
not import the agent, name their boundaries the same way the run's steps do
(``agent.record.faults`` re-exports these and adds the tool and model faults).
"""

from __future__ import annotations

import enum
import os
import signal
from collections.abc import Callable


class Point(enum.StrEnum):
    """Every crash point: the boundary it marks (target), and the sweep's schedules there."""

    BEFORE_STEP = "before_step"
    """A step is about to run (its name). Every step of nw1/nw3/lu2; intake's mail.process."""

    AFTER_STEP = "after_step"
    """A step committed, DBOS has not checkpointed it (its name). Every case's every step."""

    BEFORE_WAIT = "before_wait"
    """The wait's clock read, its checkpoint not (``approval``/``customer``). The customer case."""

    BEFORE_TOOL = "before_tool"
    """A tool's handler is about to run in its transaction (the tool). ``test_cancel`` holds it."""

    AFTER_EFFECT = "after_effect"
    """An irreversible effect made, its step not committed (the tool). nw1, lu2, nw1-payments."""

    AFTER_CLAIM = "after_claim"
    """An external effect's pending claim committed, nothing sent (the tool). nw1-payments."""

    AFTER_PROVIDER = "after_provider"
    """The other system acted, nothing here records it (the tool). nw1-payments."""

    AFTER_COMMIT = "after_commit"
    """Committed, not handed on: an effect's step (the tool; nw1, lu2) or a run opened for a
    customer's line, not yet enqueued (``customer.route``; intake)."""

    AFTER_STORE = "after_store"
    """A message (``inbound``) or a help desk's line (``customer_line``) committed, its
    workflow not enqueued. Intake's SMTP, Mailgun and help-desk schedules."""

    AFTER_ENQUEUE = "after_enqueue"
    """A message handed to its workflow, its sender not answered (``inbound``). Intake."""

    BEFORE_SEND = "before_send"
    """A notification claimed, not sent (the transport). ``test_notifications`` kills here."""

    AFTER_SEND = "after_send"
    """A notification accepted, ``sent_at`` not committed (the transport). Likewise."""


_hooks: dict[tuple[str, str], Callable[[], None]] = {}


def point_named(name: str) -> Point:
    """The registered point of that name; an unknown name raises ``ValueError`` here."""
    try:
        return Point(name)
    except ValueError:
        raise ValueError(f"unknown crash point {name!r}; registered: {', '.join(Point)}") from None


def install(point: Point | str, target: str, action: Callable[[], None]) -> None:
    _hooks[(point_named(point), target)] = action


def kill_at(point: Point | str, target: str, nth: int = 1) -> None:
    """SIGKILL this process the ``nth`` time it reaches ``point`` for ``target``."""
    count = {"n": 0}

    def action() -> None:
        count["n"] += 1
        if count["n"] == nth:
            sigkill_self()

    install(point, target, action)


def at(point: Point, target: str) -> None:
    if point not in _POINTS:  # a typo would otherwise be a crash point no schedule can reach
        point_named(point)
    action = _hooks.get((point, target)) or _hooks.get((point, "*"))
    if action is not None:
        action()


_POINTS = frozenset(Point)


def installed() -> bool:
    return bool(_hooks)


def clear() -> None:
    _hooks.clear()


def sigkill_self() -> None:
    """Die the way a power cut kills a worker: no cleanup, no checkpoint."""
    os.kill(os.getpid(), signal.SIGKILL)
