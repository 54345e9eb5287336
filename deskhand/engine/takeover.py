"""Dead-worker takeover: a live worker resumes the runs of an executor that is gone.

Every worker scans every few seconds (``scan``). A candidate is an executor id with
``PENDING`` run workflows at *this* worker's application version (DBOS recovers and
dequeues only its own version). Its runs are taken over when either

* **it is dead**: its advisory lock is free and its ``last_seen`` (database clock) is
  older than the grace period — or it ran on this host and its process is gone; or
* **it moved on**: the id's live holder runs another application version (a deploy
  restarted the slot on new code), so nobody at this version will ever recover them.

Taking over, under a per-(id, version) advisory lock so only one worker does it:
lock the dead id (so it cannot come back mid-takeover), clear its incarnation in the
registry (a process that reconnects later finds itself replaced and stops), then
``executor_recovery.recover_executor`` re-enqueues its workflows, checks what is still
pending and retries. Whatever a failure leaves (Postgres restarting mid-way, this
worker dying) is still ``PENDING`` under the dead id with a free lock and a stale
``last_seen``, so the next scan, here or elsewhere, takes it over again.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import psycopg

from deskhand.engine.workarounds import executor_recovery
from deskhand.engine.workarounds.staged_recovery import base_executor
from deskhand.infra import events
from deskhand.infra.fleet.lease import REGISTRY, Lease, lock_key, process_gone

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Takeover:
    executor_id: str
    why: str  # "dead" or "moved_on"
    recovered: int
    left: int
    seconds: float


class Scanner:
    """Takes executors over for one worker, on a connection of its own (not the lease's:
    a long takeover must never hold up the heartbeat)."""

    def __init__(self, lease: Lease, recover: Any = None) -> None:
        self.lease = lease
        self.recover = recover
        self.conn: psycopg.Connection[Any] | None = None

    def scan(self) -> list[Takeover]:
        """One pass: take over every executor whose runs at our version nobody will resume."""
        if not self.lease.confirmed():
            return []  # a worker that may itself be cut off takes nothing over
        recover = self.recover or executor_recovery.recover_executor
        done: list[Takeover] = []
        candidates = executor_recovery.pending_executors(
            self.lease.app_version, self.lease.executor_id
        )
        for executor_id in candidates:
            try:
                if self.conn is None or self.conn.closed:
                    self.conn = self.lease.connect()
                result = _take_over(self.conn, self.lease, executor_id, recover)
            except psycopg.Error as exc:
                log.warning("takeover of %s interrupted: %s", executor_id, exc)
                with contextlib.suppress(Exception):
                    if self.conn is not None:
                        self.conn.close()
                self.conn = None
                continue
            if result is not None:
                done.append(result)
        return done

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self.conn is not None:
                self.conn.close()
        self.conn = None


def _take_over(
    conn: psycopg.Connection[Any], lease: Lease, candidate: str, recover: Any
) -> Takeover | None:
    # A restarting worker stages its own runs under "<id>#staged": they are that id's.
    executor_id = base_executor(candidate)
    if executor_id == lease.executor_id:
        return None
    row = conn.execute(
        f"SELECT incarnation, app_version, host, pid,"
        f" last_seen IS NULL OR last_seen < now() - make_interval(secs => %s)"
        f" FROM {REGISTRY} WHERE executor_id = %s",
        [lease.grace, executor_id],
    ).fetchone()
    if row is None:
        # An id nobody registered (a worker from before the registry, a test executor):
        # start its clock now; it is taken over once the grace has passed with its lock free.
        conn.execute(
            f"INSERT INTO {REGISTRY} (executor_id, last_seen, app_version, host, taken_over_by,"
            " runs_taken_over) VALUES (%s, now(), '', '', '', 0) ON CONFLICT DO NOTHING",
            [executor_id],
        )
        return None
    incarnation, version, host, pid, stale = row
    moved_on = incarnation is not None and version != lease.app_version and not stale
    if not moved_on and not (stale or process_gone(host, pid)):
        return None
    mutex = lock_key(executor_id, lease.app_version, "takeover")
    if not _try(conn, mutex):
        return None  # another worker is taking it over right now
    took_id_lock = False
    try:
        if not moved_on:
            if not _try(conn, lock_key(executor_id)):
                return None  # alive after all (or coming back): not ours to take
            took_id_lock = True
            # Under its lock: still stale (or gone)? Then no incarnation of it may run again.
            cur = conn.execute(
                f"UPDATE {REGISTRY} SET incarnation = NULL, taken_over_at = now(),"
                " taken_over_by = %s WHERE executor_id = %s AND (last_seen IS NULL"
                " OR last_seen < now() - make_interval(secs => %s) OR (host = %s AND pid = %s))",
                [lease.executor_id, executor_id, lease.grace, host, pid],
            )
            if cur.rowcount != 1 or not (stale or process_gone(host, pid)):
                return None
        t0 = time.monotonic()
        recovered, left = recover(candidate, lease.app_version)
        took = Takeover(
            executor_id, "moved_on" if moved_on else "dead", recovered, left, time.monotonic() - t0
        )
        conn.execute(
            f"UPDATE {REGISTRY} SET runs_taken_over = runs_taken_over + %s, taken_over_at = now(),"
            " taken_over_by = %s WHERE executor_id = %s",
            [recovered, lease.executor_id, executor_id],
        )
        events.emit(
            "takeover.done",
            executor_id=executor_id,
            by=lease.executor_id,
            why=took.why,
            app_version=lease.app_version,
            recovered=recovered,
            left=left,
            seconds=round(took.seconds, 3),
        )
        return took
    finally:
        with contextlib.suppress(psycopg.Error):
            if took_id_lock:
                conn.execute("SELECT pg_advisory_unlock(%s)", [lock_key(executor_id)])
            conn.execute("SELECT pg_advisory_unlock(%s)", [mutex])


def _try(conn: psycopg.Connection[Any], key: int) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
    return bool(row and row[0])
