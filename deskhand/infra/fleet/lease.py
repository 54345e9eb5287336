"""The executor lease: proof that this process, and no other, is the executor ``executor_id``.

DBOS recovers a workflow by executor id, so two live processes with one id run the
same workflows twice (dbos-notes §7), and a dead worker's runs wait until a process
with its id comes back. Liveness is proven with something a dead process cannot hold:
a **session-level Postgres advisory lock** on the id, held on a connection of its own.
Postgres drops it when the process dies (its socket closes) or its session is cut.

A dropped lock is not yet a dead worker: a Postgres restart drops every session lock at
once. So the worker also writes ``last_seen`` (the database's clock) to its
``fleet.Worker`` row every ``heartbeat`` seconds, and only while it holds the lock;
another worker takes its runs over only once the lock is free *and* ``last_seen`` is
older than the grace period (``deskhand.engine.takeover``). The two halves that keep
one id to one executor:

* **The gate.** Step bodies run only while the lease is confirmed (``guard()`` in
  ``deskhand.engine.workflow``): a heartbeat that fails, or one older than half the grace, closes
  it. A worker that lost its lock therefore stops executing steps well before anyone
  may take its runs over.
* **Re-take before executing.** After a reconnect the worker takes its lock again and
  checks that the registry still names its incarnation. If the lock is held by another
  process, or a takeover cleared its incarnation, it has been replaced: it stops at once
  (``os._exit``, so nothing more of it runs) and its supervisor starts a fresh one.

A worker that starts while its id's lock is held refuses to start; one that finds the
lock free but a fresh ``last_seen`` from another host waits the grace out (that holder
may be alive and reconnecting). A predecessor on this host whose process is gone is
known dead at once, so a restart after a crash does not wait.

Over 400 lines because the lease, its heartbeat and the step gate are one protocol: each
part's correctness depends on the others' timing.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from django.db import connections

from deskhand.infra import events

log = logging.getLogger(__name__)

REGISTRY = "fleet_worker"


class IdTaken(RuntimeError):
    """The executor id is held by a live process; the message is one sentence."""


def lock_key(*parts: str) -> int:
    """A stable signed 64-bit advisory-lock key for ``parts`` (same in every process)."""
    digest = hashlib.sha256("\x1f".join(("deskhand.executor", *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def libpq_params(alias: str = "default") -> dict[str, Any]:
    """Keyword arguments for ``psycopg.connect`` that reach the Django database as Django does."""
    sd = connections[alias].settings_dict
    if sd["ENGINE"] == "deskhand.infra.embedded_db":
        from deskhand.infra import embedded_pg

        embedded_pg.ensure_running()
    django_only = {
        "assume_role",
        "context",
        "cursor_factory",
        "isolation_level",
        "pool",
        "prepare_threshold",
        "server_side_binding",
    }
    params: dict[str, Any] = {
        k: v for k, v in (sd.get("OPTIONS") or {}).items() if k not in django_only and v is not None
    }
    params.update(
        {
            k: v
            for k, v in {
                "host": sd.get("HOST") or None,
                "port": int(sd["PORT"]) if sd.get("PORT") else None,
                "user": sd.get("USER") or None,
                "password": sd.get("PASSWORD") or None,
                "dbname": sd["NAME"],
            }.items()
            if v is not None
        }
    )
    return params


def locality() -> str:
    """Where a pid means something: this kernel's boot and this pid namespace."""
    boot = ""
    with contextlib.suppress(OSError):
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    ns = ""
    with contextlib.suppress(OSError):
        ns = os.readlink("/proc/self/ns/pid")
    return f"{socket.gethostname()}|{boot}|{ns}"


def process_gone(where: str, pid: int | None) -> bool:
    """Whether the process ``pid`` recorded at ``where`` is certainly not running (this host only)."""
    if not pid or where != locality():
        return False
    if pid == os.getpid():
        return True  # our own pid was recorded by a predecessor in a recycled namespace
    try:
        with open(f"/proc/{pid}/status") as fh:
            state = next((ln.split()[1] for ln in fh if ln.startswith("State:")), "")
        return state == "Z"  # a zombie holds no connection
    except FileNotFoundError:
        return True
    except OSError:
        return False


def _default_replaced(sentence: str) -> None:
    # Nothing more of this process may run: not DBOS's shutdown, not a step in another thread.
    os.write(2, f"{sentence}\n".encode())
    os._exit(3)


class Lease:
    """The session advisory lock of one executor id, with its registry row and the step gate."""

    def __init__(
        self,
        executor_id: str,
        app_version: str,
        *,
        grace: float,
        heartbeat: float = 1.0,
        on_replaced: Callable[[str], None] = _default_replaced,
        connect: Callable[[], psycopg.Connection[Any]] | None = None,
    ) -> None:
        if heartbeat * 2 >= grace:
            raise ValueError("the heartbeat must be well under half the grace period")
        self.executor_id = executor_id
        self.app_version = app_version
        self.grace = grace
        self.heartbeat = heartbeat
        self.key = lock_key(executor_id)
        self.incarnation = uuid.uuid4()
        self.on_replaced = on_replaced
        self._params = libpq_params()
        self.connect = connect or self._default_connect
        self.conn: psycopg.Connection[Any] | None = None
        self.lock = threading.RLock()  # one user of the connection at a time
        self._confirmed_at = 0.0
        self._open = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.replaced = False
        # Called after a reconnect re-took the lock (NOTIFYs sent meanwhile may be lost).
        self.on_retaken: Callable[[], None] | None = None
        # Told of each heartbeat that could not reach the server, and of each that could
        # (the worker's one line per reconnect attempt: deskhand.infra.fleet.outage).
        self.on_unreachable: Callable[[BaseException], None] | None = None
        self.on_reachable: Callable[[], None] | None = None

    # --- the connection -----------------------------------------------------------

    def _default_connect(self) -> psycopg.Connection[Any]:
        conn = psycopg.connect(
            **self._params,
            autocommit=True,
            application_name=f"deskhand-lease:{self.executor_id}"[:63],
            connect_timeout=max(1, int(self.heartbeat * 2)),
            keepalives=1,
            keepalives_idle=max(1, int(self.grace / 4)),
            keepalives_interval=1,
            keepalives_count=2,
        )
        # A session whose process froze or whose host vanished is cut by the server: its lock
        # then frees itself. The heartbeat keeps a live session from ever being this idle.
        with contextlib.suppress(psycopg.Error):
            conn.execute(f"SET idle_session_timeout = '{int(self.grace * 500)}ms'")
        return conn

    def _reconnect(self) -> psycopg.Connection[Any]:
        if self.conn is not None:
            with contextlib.suppress(Exception):
                self.conn.close()
        self.conn = None
        self.conn = self.connect()
        return self.conn

    def _try_lock(self, conn: psycopg.Connection[Any], key: int) -> bool:
        row = conn.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()
        return bool(row and row[0])

    # --- start: take the id ---------------------------------------------------------

    @classmethod
    def from_settings(cls, executor_id: str) -> Lease:
        """The lease a process executing as ``executor_id`` holds, timed by the settings."""
        from django.conf import settings

        return cls(
            executor_id,
            settings.DESKHAND_APP_VERSION,
            grace=settings.DESKHAND_TAKEOVER_GRACE_SEC,
            heartbeat=settings.DESKHAND_HEARTBEAT_SEC,
        )

    def acquire(self, wait: float) -> None:
        """Take the id, or raise ``IdTaken`` after ``wait`` seconds; the gate opens on success."""
        deadline = time.monotonic() + wait
        why = ""
        while True:
            with self.lock:
                conn = self.conn or self._reconnect()
                if self._try_lock(conn, self.key):
                    why = self._claim_row(conn)
                    if not why:
                        self._confirmed_at = time.monotonic()
                        self._open.set()
                        events.emit(
                            "worker.started",
                            executor_id=self.executor_id,
                            app_version=self.app_version,
                            pid=os.getpid(),
                        )
                        return
                    conn.execute("SELECT pg_advisory_unlock(%s)", [self.key])
                else:
                    why = self._holder_sentence(conn)
            if time.monotonic() >= deadline:
                raise IdTaken(why)
            time.sleep(min(0.5, max(0.05, deadline - time.monotonic())))

    def _claim_row(self, conn: psycopg.Connection[Any]) -> str:
        """With the lock held: write our incarnation, unless a predecessor may still be alive."""
        with conn.transaction():
            row = conn.execute(
                f"SELECT incarnation, host, pid, last_seen > now() - make_interval(secs => %s)"
                f" FROM {REGISTRY} WHERE executor_id = %s FOR UPDATE",
                [self.grace, self.executor_id],
            ).fetchone()
            if row is not None:
                incarnation, host, pid, fresh = row
                if incarnation is not None and fresh and not process_gone(host, pid):
                    return (
                        f"executor id {self.executor_id} was held until moments ago by pid {pid}"
                        f" on {host.split('|')[0] or 'another host'}, which may still be alive;"
                        f" waited for its grace period ({self.grace:g} s)"
                    )
            conn.execute(
                f"INSERT INTO {REGISTRY} (executor_id, incarnation, app_version, host, pid,"
                " started_at, last_seen, stopped_at, taken_over_by, runs_taken_over)"
                " VALUES (%s, %s, %s, %s, %s, now(), now(), NULL, '', 0)"
                " ON CONFLICT (executor_id) DO UPDATE SET incarnation = excluded.incarnation,"
                " app_version = excluded.app_version, host = excluded.host, pid = excluded.pid,"
                " started_at = now(), last_seen = now(), stopped_at = NULL",
                [self.executor_id, self.incarnation, self.app_version, locality(), os.getpid()],
            )
        return ""

    def _holder_sentence(self, conn: psycopg.Connection[Any]) -> str:
        row = conn.execute(
            f"SELECT host, pid, app_version, started_at FROM {REGISTRY} WHERE executor_id = %s",
            [self.executor_id],
        ).fetchone()
        if row is None:
            return f"executor id {self.executor_id} is held by another live process"
        host, pid, version, started = row
        return (
            f"executor id {self.executor_id} is held by a live worker (pid {pid} on"
            f" {host.split('|')[0] or 'an unknown host'}, version {version or 'unknown'},"
            f" started {started:%Y-%m-%d %H:%M:%S} UTC); two processes must never share an id"
        )

    # --- running: heartbeat, re-take, gate -------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="deskhand-lease", daemon=True)
        self._thread.start()

    def _beat(self) -> bool:
        """Renew ``last_seen``; False if the registry no longer names our incarnation."""
        assert self.conn is not None
        cur = self.conn.execute(
            f"UPDATE {REGISTRY} SET last_seen = now() WHERE executor_id = %s AND incarnation = %s",
            [self.executor_id, self.incarnation],
        )
        return cur.rowcount == 1

    def _run(self) -> None:
        while not self._stop.wait(self.heartbeat):
            self.beat_once()

    def beat_once(self) -> None:
        """One heartbeat: renew, or reconnect and re-take; close the gate while unconfirmed."""
        with self.lock:
            try:
                if self.conn is None or self.conn.closed:
                    self._retake()
                elif not self._beat():
                    self._replaced("a takeover cleared this worker's incarnation")
                    return
                self._confirmed_at = time.monotonic()
                self._open.set()
            except psycopg.Error as exc:
                if self._open.is_set():
                    events.emit(
                        "worker.lease_lost", executor_id=self.executor_id, error=type(exc).__name__
                    )
                self._open.clear()
                with contextlib.suppress(Exception):
                    if self.conn is not None:
                        self.conn.close()
                self.conn = None
                if self.on_unreachable is not None and isinstance(exc, psycopg.OperationalError):
                    self.on_unreachable(exc)
                return
        if self.on_reachable is not None:
            self.on_reachable()

    def _retake(self) -> None:
        conn = self._reconnect()
        if not self._try_lock(conn, self.key):
            self._replaced("another process holds this executor id's lock")
            return
        if not self._beat():
            self._replaced("a takeover cleared this worker's incarnation")
            return
        events.emit("worker.lease_retaken", executor_id=self.executor_id)
        if self.on_retaken is not None:
            self.on_retaken()

    def _replaced(self, why: str) -> None:
        self._open.clear()
        self.replaced = True
        self._stop.set()
        events.emit("worker.replaced", executor_id=self.executor_id, reason=why)
        self.on_replaced(
            f"worker {self.executor_id} stops: {why} (it was taken over while cut off);"
            " nothing more of this process runs."
        )

    def confirmed(self) -> bool:
        """Whether this process may execute: lock held and confirmed within half the grace."""
        return self._open.is_set() and time.monotonic() - self._confirmed_at < self.grace / 2

    def wait_confirmed(self, poll: float = 0.05) -> None:
        """Block a step body until the lease is confirmed (for ever, if the worker is replaced)."""
        while not self.confirmed():
            if self._stop.is_set() and not self.replaced:
                return  # stopping cleanly: let DBOS's own shutdown decide
            time.sleep(poll)

    # --- stop -------------------------------------------------------------------------

    def release(self) -> None:
        """A clean stop: clear our incarnation (a restart need not wait) and drop the lock.

        A released lease stops gating this process's steps too: its gate would never open
        again, so a step left to run would wait forever."""
        if current() is self:
            install(None)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.heartbeat * 3)
        with self.lock:
            if self.conn is None or self.conn.closed:
                return
            with contextlib.suppress(psycopg.Error):
                self.conn.execute(
                    f"UPDATE {REGISTRY} SET incarnation = NULL, stopped_at = now()"
                    " WHERE executor_id = %s AND incarnation = %s",
                    [self.executor_id, self.incarnation],
                )
                self.conn.execute("SELECT pg_advisory_unlock(%s)", [self.key])
            with contextlib.suppress(Exception):
                self.conn.close()
            self.conn = None
        events.emit("worker.stopped", executor_id=self.executor_id)


_current: Lease | None = None


def install(lease: Lease | None) -> None:
    """Make ``lease`` the one ``guard()`` waits on in this process (``None``: no gate)."""
    global _current
    _current = lease


def current() -> Lease | None:
    return _current


def guard() -> None:
    """Called before every step body: wait while this worker's lease is not confirmed."""
    lease = _current
    if lease is not None and not lease.confirmed():
        lease.wait_confirmed()
