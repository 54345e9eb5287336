"""DBOS's own queue (recovery, schedules) polled every ``DESKHAND_QUEUE_POLL_SEC``, not every second.

**Changes** the internal queue's ``_polling_interval_sec``, fixed at 1 s in DBOS 3.4: every
poll of a queue walks all active workflows in Python (``count_for_queue``), parked runs too.
The queue thread re-reads it before each wait; the queue kick wakes it like the others.

**Buys** (``bench --quick``, with / without, % of a core): idle worker CPU 1.5-1.8 / 1.7-2.1
(medians 1.6 / 1.9, +19 %); with 300 parked, 1.3-1.8 / 1.6-2.6 (1.4 / 2.1, +50 %); with
2,000 parked over a 60-s window, 1.6 / 2.0 (+25 %; idle with none parked, 1.7 / 1.8).

**Retired by** a ``DBOSConfig`` key for the internal queue's polling interval.
"""

from __future__ import annotations


def set_internal_queue_poll(seconds: float) -> None:
    """Poll DBOS's own queue every ``seconds`` instead of every second."""
    from dbos._dbos import _get_dbos_instance

    _get_dbos_instance()._registry.get_internal_queue()._polling_interval_sec = float(seconds)
