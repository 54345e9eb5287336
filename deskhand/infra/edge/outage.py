"""A worker while Postgres is down: one line per reconnect attempt, and nothing else.

Every other management command gives up with one sentence when the database is not
reachable; the worker is meant to outlive an outage. During one, though, each of
its threads — DBOS's queue pollers, scheduler and notification listener, our queue
kick listener, the takeover scan, the reconciler — fails once a second and says so,
some with a full traceback: an operator sees a wall of text and cannot tell whether
the worker is waiting or broken. So:

* ``ReconnectLog`` is the worker's one voice about the outage: the lease heartbeat
  (and, at start-up, the lease's first connection) reports each failed attempt to
  reach the server — one line each, numbered — and the first success after them
  ("reachable again … resumed").
* ``ConnectionNoise`` is a logging filter that drops the polling loops' reports of
  the same condition (a known loop's record whose exception or text is a connection
  failure), so those lines are the only ones an outage writes.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable

from deskhand.infra.edge.errors import database_detail, is_database_unavailable

_CONNECTION_TROUBLE = re.compile(
    r"OperationalError|InterfaceError|connection is bad|connection failed|connection refused"
    r"|server closed the connection|consuming input failed|could not connect"
    r"|the database system is (?:shutting down|starting up|in recovery|not yet accepting)"
    r"|terminating connection due to administrator command|connection is closed",
    re.IGNORECASE,
)


class ReconnectLog:
    """Counts failed attempts to reach the database and writes one line for each."""

    def __init__(self, write: Callable[[str], None], every: float) -> None:
        self.write = write
        self.every = every
        self.attempts = 0
        self.down_since = 0.0
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self.attempts > 0

    def failed(self, exc: BaseException) -> None:
        with self._lock:
            if not self.attempts:
                self.down_since = time.monotonic()
            self.attempts += 1
            n = self.attempts
        self.write(
            f"database not reachable, reconnect attempt {n} failed ({database_detail(exc)});"
            f" next attempt in {self.every:g} s"
        )

    def reached(self) -> None:
        """A connection worked: if it follows failures, say the worker goes on."""
        with self._lock:
            if not self.attempts:
                return
            n, self.attempts = self.attempts, 0
            seconds = time.monotonic() - self.down_since
        self.write(
            f"database reachable again after {n} failed attempt{'s' if n != 1 else ''}"
            f" ({seconds:.0f} s); worker resumed"
        )


#: The polling loops that report every failed poll (DBOS 3.4's, and our queue kick listener).
#: Only these are held back: a one-off error during an outage — a workflow DBOS could
#: not recover, say — is still logged in full.
POLLING_LOOPS = (
    "Exception encountered in queue thread",
    "Exception taking the background_jobs lock",
    "Exception listing queues",
    "Exception reloading queue",
    "Exception polling schedules",
    "Notification listener error",
    "queue kick listener",
)


class ConnectionNoise(logging.Filter):
    """Drops a polling loop's report that it could not reach the database."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:  # a record that cannot format is not ours to judge
            return True
        if not text.startswith(POLLING_LOOPS):
            return True
        if record.exc_info and is_database_unavailable(record.exc_info[1]):
            return False
        return not _CONNECTION_TROUBLE.search(text)


_NOISE = ConnectionNoise()


def quiet_connection_noise() -> None:
    """Put the filter on every handler the worker's lines go through (DBOS adds its own
    at launch, so this is called again then; adding the same filter twice is a no-op)."""
    for logger in (logging.getLogger(), logging.getLogger("dbos")):
        logger.addFilter(_NOISE)
        for handler in logger.handlers:
            handler.addFilter(_NOISE)
