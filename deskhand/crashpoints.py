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
(``agent.run.faults`` re-exports these and adds the tool and model faults).
"""

from __future__ import annotations

import enum
import os
import signal
from collections.abc import Callable


class Point(enum.StrEnum):
    """Every crash point (a schedule writes ``point:target[:nth]``)."""

    BEFORE_STEP = "before_step"
    """A durable step is about to run, the checkpoint before it written (target: the step's
    name). Sweep: every step of nw1, nw3, lu2, nw1-payments (CI: ``lu2``'s
    ``before_step:tool.issue_refund``); intake's ``before_step:mail.process``."""

    AFTER_STEP = "after_step"
    """A step committed its own writes and DBOS has not checkpointed its output (target: the
    step's name). Sweep: every step of every case (CI: ``nw1``'s ``after_step:model:2``, the
    customer's ``after_step:customer.park``, intake's ``after_step:customer.route``)."""

    BEFORE_WAIT = "before_wait"
    """Between the clock read a wait is derived from and the wait's own checkpoint (target:
    the topic's kind, ``approval`` or ``customer``). Sweep: customer's
    ``before_wait:customer``; ``tests/consent/test_expiry.py``."""

    BEFORE_TOOL = "before_tool"
    """A tool's handler is about to run, inside its transaction (target: the tool). No sweep:
    ``tests/durability/test_cancel.py`` holds a refund there while a cancel waits."""

    AFTER_EFFECT = "after_effect"
    """An irreversible effect is written and its step not yet committed (in-database), or made
    and recorded and its step row not yet written (another system). Sweep: every irreversible
    tool of nw1, lu2, nw1-payments (CI: ``nw1``'s ``after_effect:issue_refund``)."""

    AFTER_CLAIM = "after_claim"
    """An effect in another system: its pending claim committed, the other system not yet
    called. Sweep: nw1-payments (CI: ``after_claim:issue_refund``)."""

    AFTER_PROVIDER = "after_provider"
    """An effect in another system: made there, nothing here records it yet. Sweep:
    nw1-payments (CI: ``after_provider:issue_refund``)."""

    AFTER_COMMIT = "after_commit"
    """Committed and not yet handed on: an irreversible effect's step, not checkpointed
    (target: the tool; sweep: nw1, lu2, nw1-payments, CI ``lu2``'s
    ``after_commit:send_customer_email``); a customer's line routed to a new run, the run not
    yet enqueued (target ``customer.route``; intake, CI ``after_commit:customer.route:4``)."""

    AFTER_STORE = "after_store"
    """A received message (target ``inbound``) or a help desk's line (``customer_line``)
    committed, its workflow not yet enqueued. Sweep: intake's SMTP, Mailgun and help-desk
    schedules (CI: ``after_store:inbound:5``, ``helpdesk/after_store:customer_line:2``)."""

    AFTER_ENQUEUE = "after_enqueue"
    """A received message handed to its workflow, its sender not yet answered (target
    ``inbound``). Sweep: intake's ``after_enqueue:inbound`` and ``mailgun/after_enqueue``."""

    BEFORE_SEND = "before_send"
    """A notification claimed from the outbox, not yet sent (target: the transport). No
    sweep: ``tests/consent/test_notifications.py`` kills a worker there."""

    AFTER_SEND = "after_send"
    """A notification accepted by its receiver, ``sent_at`` not yet committed: it is sent
    again, with the same id. No sweep: ``tests/consent/test_notifications.py``."""


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
