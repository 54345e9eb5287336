"""DBOS's own queue (recovery, schedules) polled every ``DESKHAND_QUEUE_POLL_SEC``, not every second.

**DBOS behaviour changed.** DBOS 3.4 fixes its internal queue's ``_polling_interval_sec``
at one second (``DBOSRegistry.get_internal_queue``), and every poll of a queue counts this
executor's active workflows in a Python loop over all of them (``count_for_queue``), parked
runs included. The interval is set on that in-memory ``Queue``; the queue thread re-reads it
before each wait, and the queue kick (``queue_kick``) wakes it like the others.

**What it buys** (``bench``, see docs/benchmarks.md, "What the workarounds buy"):
not yet measured.

**Retired by** a ``DBOSConfig`` key for the internal queue's polling interval.
"""

from __future__ import annotations


def set_internal_queue_poll(seconds: float) -> None:
    """Poll DBOS's own queue every ``seconds`` instead of every second."""
    from dbos._dbos import _get_dbos_instance

    _get_dbos_instance()._registry.get_internal_queue()._polling_interval_sec = float(seconds)


def internal_queue_poll_seconds() -> float:
    from dbos._dbos import _get_dbos_instance

    return float(_get_dbos_instance()._registry.get_internal_queue()._polling_interval_sec)
