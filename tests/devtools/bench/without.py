"""``DESKHAND_BENCH_WITHOUT=name,…``: the bench with DBOS workarounds switched off, to measure what each buys.

Read only here, by the bench's own process before it launches its executor and by its worker
processes (``tests.devtools.load.worker``); the product reads no such flag. Each name is a
module of ``deskhand/engine/workarounds/`` (or a part of one), switched off by replacing
the function the bootstrap or the worker calls with one that does nothing:

* ``queue_kick`` — no kickable stop event, no LISTEN kicker: queues poll on their interval;
* ``launch_kick`` — kickable only after launch, as before ``kickable_from_launch``;
* ``internal_queue_poll`` — DBOS's own queue polls every second, its default;
* ``recv_recheck`` — each parked ``recv`` re-checks on DBOS's own 60-s timer (the sweep stays);
* ``staged_recovery`` — a restarted worker leaves its parked runs to DBOS's startup recovery.
"""

from __future__ import annotations

import os
from typing import Any

NAMES = ("queue_kick", "launch_kick", "internal_queue_poll", "recv_recheck", "staged_recovery")


def switched_off() -> list[str]:
    names = [
        n.strip() for n in os.environ.get("DESKHAND_BENCH_WITHOUT", "").split(",") if n.strip()
    ]
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        raise ValueError(
            f"DESKHAND_BENCH_WITHOUT: no workaround {', '.join(unknown)} ({', '.join(NAMES)})"
        )
    return names


def apply() -> list[str]:
    """Switch off what ``DESKHAND_BENCH_WITHOUT`` names in this process; the names."""
    from deskhand.engine.workarounds import (
        internal_queue_poll,
        queue_kick,
        recv_recheck,
        staged_recovery,
    )

    def nothing(*_: Any, **__: Any) -> None:
        return None

    names = switched_off()
    for name in names:
        if name in ("queue_kick", "launch_kick"):
            queue_kick.kickable_from_launch = nothing
        if name == "queue_kick":
            queue_kick.install_queue_kick = nothing
        if name == "internal_queue_poll":
            internal_queue_poll.set_internal_queue_poll = nothing
        if name == "recv_recheck":
            recv_recheck.stretch_recv_recheck = nothing
        if name == "staged_recovery":
            staged_recovery.stage_own_pending = lambda *_: 0
    return names
