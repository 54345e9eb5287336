"""When an outbound delivery that failed is tried again: one schedule for every outbox.

The staff notifications (``approvals.outbox``) and the replies relayed to a help desk
(``deskhand.apikeys.relay``) are both delivered at least once by a row that waits for its
``next_attempt_at``. They back off the same way so an endpoint that is down is knocked on
as often from either, and a change to the schedule is made once.
"""

from __future__ import annotations

import datetime as dt

BACKOFF_BASE = 5.0  # seconds before the first retry
BACKOFF_CAP = 3600.0  # never wait longer than an hour between tries


def backoff(attempts: int) -> dt.timedelta:
    """How long to wait after the ``attempts``-th failure: doubling from 5 s, capped at 1 h."""
    return dt.timedelta(seconds=min(BACKOFF_BASE * 2 ** max(attempts - 1, 0), BACKOFF_CAP))
