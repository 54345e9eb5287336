"""DBOS bootstrap: how a worker (or a test) launches the DBOS executor.

Process model: only ``manage.py worker`` launches DBOS (it executes
workflows, with a stable executor id). The web process and CLI commands
enqueue, send and cancel through ``deskhand.dbos_client`` and never launch a
second executor. DBOS's system tables live in the ``dbos`` schema of the *Django*
database — checked at start-up, so a misconfiguration can never fall back to
DBOS's default SQLite file.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from dbos import DBOS, DBOSConfig, DBOSPortableJSONSerializer
from django.conf import settings

# The URL rules are shared with the client side; they live there, and only this way round.
from deskhand.dbos_client import DBOSSetupError, app_name, check_system_database, database_url

__all__ = [
    "DBOSSetupError",
    "app_name",
    "check_system_database",
    "config",
    "database_url",
    "kick_queues",
    "launch_executor",
    "migrate_system_schema",
    "model_queue",
    "queues_kicked_while_waiting",
    "register_model_queues",
    "register_queues",
    "stop_executor",
]


def config(executor_id: str, **overrides: Any) -> DBOSConfig:
    url = database_url()
    check_system_database(url)
    cfg: DBOSConfig = {
        "name": app_name(),
        "system_database_url": url,
        "application_version": settings.DESKHAND_APP_VERSION,
        "executor_id": executor_id,
        "serializer": DBOSPortableJSONSerializer(),
        "run_migrations": True,
        "notification_listener_polling_interval_sec": 0.1,
        # DBOS's notifier thread wakes every ``notification_coalesce_sec`` (0.01 by default:
        # 1% of a core, idle) to flush NOTIFYs for workflow events and streams, neither of
        # which Deskhand uses; send/recv (approvals, notes, model results) wake through the
        # notifications table's own trigger and never wait for it.
        "notification_coalesce_sec": 0.5,
        # Parked runs hold no thread (async recv); the cap keeps the pool bounded.
        "max_executor_threads": int(os.environ.get("DESKHAND_MAX_EXECUTOR_THREADS", "32")),
        "sys_db_pool_size": int(os.environ.get("DESKHAND_SYS_DB_POOL", "10")),
    }
    cfg.update(otlp())  # type: ignore[typeddict-item]
    cfg.update(overrides)  # type: ignore[typeddict-item]
    return cfg


def otlp() -> dict[str, Any]:
    """DBOS's OpenTelemetry export, switched on by ``DESKHAND_OTLP=1`` (docs/operations.md).

    Endpoints come from ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``..._LOGS_ENDPOINT``
    (comma-separated); the exporter packages are the ``otel`` extra.
    """
    if os.environ.get("DESKHAND_OTLP", "").strip().lower() not in {"1", "true", "yes", "on"}:
        return {"enable_otlp": False}
    import importlib.util

    try:
        found = importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") and (
            importlib.util.find_spec("opentelemetry.sdk")
        )
    except ModuleNotFoundError:
        found = None
    if not found:
        raise DBOSSetupError(
            "DESKHAND_OTLP is on but the OpenTelemetry exporter is not installed"
            " (pip install 'deskhand[otel]')"
        )

    def endpoints(name: str) -> list[str]:
        return [e.strip() for e in os.environ.get(name, "").split(",") if e.strip()]

    traces = endpoints("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if not traces:
        raise DBOSSetupError(
            "DESKHAND_OTLP is on but OTEL_EXPORTER_OTLP_TRACES_ENDPOINT names no endpoint"
        )
    return {
        "enable_otlp": True,
        "otlp_traces_endpoints": traces,
        "otlp_logs_endpoints": endpoints("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"),
        "otlp_attributes": {"deskhand.app_version": settings.DESKHAND_APP_VERSION},
    }


def register_queues(poll_sec: float | None = None) -> None:
    # Partitioned by merchant; the cap is generous because a run parked at the
    # gate still counts as in flight, and thousands may be parked at once.
    DBOS.register_queue(
        settings.DESKHAND_QUEUE,
        partition_concurrency=int(os.environ.get("DESKHAND_MERCHANT_CONCURRENCY", "10000")),
        polling_interval_sec=poll_sec if poll_sec is not None else settings.DESKHAND_QUEUE_POLL_SEC,
        on_conflict="always_update",
    )


def model_queue(provider: str) -> str | None:
    """The queue a provider's model calls wait on, or None: that provider is not limited."""
    return f"model-{provider}" if provider in settings.DESKHAND_MODEL_RPM else None


def register_model_queues(
    rpm: dict[str, int] | None = None, period: float | None = None, poll_sec: float | None = None
) -> None:
    """One queue per rate-limited provider: at most RPM starts per period, on every worker.

    DBOS keeps the limiter in ``dbos.queues`` and counts starts across all processes, so
    the limit is the fleet's, not a worker's. Unpartitioned: the limit is the provider
    account's. ``always_update``: the settings of the worker that started last win.
    """
    for provider, limit in (rpm if rpm is not None else settings.DESKHAND_MODEL_RPM).items():
        DBOS.register_queue(
            f"model-{provider}",
            limiter={
                "limit": limit,
                "period": period or settings.DESKHAND_MODEL_LIMIT_PERIOD_SEC,
            },
            polling_interval_sec=poll_sec or settings.DESKHAND_MODEL_QUEUE_POLL_SEC,
            on_conflict="always_update",
        )


def kick_queues() -> None:
    """Make this worker's queue threads poll now (after enqueueing work it may take itself)."""
    _kicker.kick()


def queues_kicked_while_waiting() -> AbstractContextManager[None]:
    """While the body runs, this worker's queues poll at least once a second."""
    return _kicker.kicked_while()


def launch_executor(executor_id: str, *, unleased: bool = False, **overrides: Any) -> None:
    """Launch DBOS in this process as the executor ``executor_id`` (worker and tests only).

    The process must hold the id's lease first (``deskhand.fleet.lease``): an executor
    without one looks dead to every other worker's takeover scan, which re-runs its runs
    while it still executes them, and each run it loses keeps a coroutine here polling for
    the outcome once a second (LESSONS #35). Only a test's private executor, on a database
    no worker scans, passes ``unleased=True``.

    Parked runs: each waiting ``recv`` re-checks the database on its own only every
    ``DESKHAND_RECV_RECHECK_SEC``; one sweep per process every ``DESKHAND_RECV_SWEEP_SEC``
    does it for all of them at once (docs/scaling.md, "Parked runs").
    """
    from deskhand.fleet import lease

    held = lease.current()
    if not unleased and (held is None or held.executor_id != executor_id):
        raise DBOSSetupError(
            f"executor {executor_id} has no lease: take it (deskhand.fleet.lease.Lease) before launching"
        )
    import agent.workflow  # noqa: F401  (registers the workflow before launch)
    from agent.effects.schedule import register_schedule as register_reconciliation
    from agent.retention_sweep import register_schedule as register_retention
    from approvals.sweep import register_schedule  # registers the escalation sweep before launch
    from deskhand import dbos_internals

    DBOS(config=config(executor_id, **overrides))
    dbos_internals.kickable_from_launch()
    dbos_internals.set_internal_queue_poll(settings.DESKHAND_QUEUE_POLL_SEC)
    DBOS.launch()
    dbos_internals.stretch_recv_recheck(settings.DESKHAND_RECV_RECHECK_SEC)
    register_queues()
    register_model_queues()
    register_schedule()
    register_reconciliation()
    register_retention()
    _sweeper.start(settings.DESKHAND_RECV_SWEEP_SEC)
    _kicker.start()


class _Sweeper:
    """The one thread per process that re-checks every parked run's inbox (one query)."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.wake = threading.Event()

    def start(self, every: float) -> None:
        if self.thread is not None and self.thread.is_alive():
            return
        self.stop = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(every,), name="deskhand-recv-sweep", daemon=True
        )
        self.thread.start()

    def _run(self, every: float) -> None:
        from django.db import close_old_connections

        from deskhand import dbos_internals

        while not self.stop.is_set():
            self.wake.wait(every)
            self.wake.clear()
            if self.stop.is_set():
                return
            try:
                close_old_connections()
                dbos_internals.sweep_waiting_recvs()
            except Exception as exc:  # a sweep that fails is retried next time
                logging.getLogger(__name__).warning("recv sweep failed: %s", exc)
            finally:
                close_old_connections()

    def halt(self) -> None:
        self.stop.set()
        self.wake.set()
        if self.thread is not None:
            self.thread.join(5)
        self.thread = None


_sweeper = _Sweeper()


class _Kicker:
    """One LISTEN per worker on ``deskhand_queue``: work enqueued anywhere starts a poll here now.

    DBOS polls its queues on a timer; a short interval answers fast and costs CPU all day,
    a long one is cheap and slow. With this the interval (``DESKHAND_QUEUE_POLL_SEC``) is
    only the fallback for a lost NOTIFY, and pickup waits for a notification, not a tick.
    """

    channel = "deskhand_queue"

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.event: Any = None
        self.waiting = 0  # model calls of this process waiting on a queue (``kicked_while``)
        self._waiting_lock = threading.Lock()

    @contextmanager
    def kicked_while(self) -> Iterator[None]:
        """Kick this worker's queues once a second while the body waits.

        A call held by a queue's limiter starts only when some worker polls after its slot
        frees. Polling every queue fast all day for that cost ~10% of a core per idle
        worker; this polls fast only while a call of this process is actually waiting.
        """
        with self._waiting_lock:
            self.waiting += 1
        try:
            yield
        finally:
            with self._waiting_lock:
                self.waiting -= 1

    def start(self) -> None:
        from deskhand import dbos_internals

        self.event = dbos_internals.install_queue_kick()
        if self.event is None or (self.thread is not None and self.thread.is_alive()):
            return
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="deskhand-queue-kick", daemon=True)
        self.thread.start()

    def kick(self) -> None:
        if self.event is not None:
            self.event.kick()

    def _run(self) -> None:
        import psycopg

        from deskhand.fleet.lease import libpq_params

        while not self.stop.is_set():
            try:
                with psycopg.connect(
                    **libpq_params(), autocommit=True, application_name="deskhand-queue-kick"
                ) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    self.kick()  # anything enqueued while we were not listening
                    while not self.stop.is_set():
                        for _ in conn.notifies(timeout=1.0, stop_after=1):
                            self.kick()
                        if self.waiting:
                            self.kick()
            except Exception as exc:
                if not self.stop.is_set():
                    logging.getLogger(__name__).warning("queue kick listener: %s", exc)
                    self.stop.wait(1.0)

    def halt(self) -> None:
        self.stop.set()
        if self.thread is not None and self.thread.is_alive():
            # Wake the listener now rather than at its next one-second timeout (a stopping
            # worker, and every test that stops the in-process executor, waited that second).
            # Other workers on the channel take it as one more kick: a queue poll, no more.
            self._wake()
            self.thread.join(3)
        self.thread = None

    def _wake(self) -> None:
        import psycopg

        from deskhand.fleet.lease import libpq_params

        params = {**libpq_params(), "connect_timeout": 2}
        try:
            with psycopg.connect(
                **params, autocommit=True, application_name="deskhand-queue-kick"
            ) as conn:
                conn.execute(f"NOTIFY {self.channel}")
        except Exception:  # the database is gone: the timeout ends the wait instead
            pass


_kicker = _Kicker()


class StagedRecovery(threading.Thread):
    """Hands a restarted worker's own parked runs back to its queue a batch at a time.

    DBOS's startup recovery would re-enqueue thousands at once; replaying them together
    takes a minute or more on one core, and a run whose decision arrived while the worker
    was down waits somewhere in that crowd. Staged (``dbos_internals.stage_own_pending``),
    they are released ``batch`` at a time while fewer than ``max_replaying`` replay in
    this process or wait, released, to be dequeued; runs with a message waiting first, at
    the start and in every later batch, so a decision that arrives mid-way jumps the rest.
    Only while the lease holds.
    """

    def __init__(
        self,
        executor_id: str,
        app_version: str,
        confirmed: Any,
        batch: int = 32,
        max_replaying: int = 64,
    ) -> None:
        super().__init__(name="deskhand-staged-recovery", daemon=True)
        self.executor_id, self.app_version = executor_id, app_version
        self.confirmed, self.batch, self.max_replaying = confirmed, batch, max_replaying
        self.stop = threading.Event()
        self.released = 0

    def run(self) -> None:
        import time

        from django.db import close_old_connections

        from deskhand import dbos_internals, events

        t0 = time.monotonic()
        # Released but not yet dequeued: not running here yet, so ``replaying()`` misses
        # them. Uncounted, the next batches went out before the first was picked up, and
        # one poll of the (unpartitioned, oldest-first) internal queue then took them all
        # with the decided run behind older ones.
        queued: list[str] = []
        while not self.stop.is_set():
            try:
                if not self.confirmed():
                    self.stop.wait(0.05)
                    continue
                close_old_connections()
                queued = dbos_internals.still_enqueued(queued)
                if dbos_internals.replaying() + len(queued) >= self.max_replaying:
                    self.stop.wait(0.05)
                    continue
                released, left = dbos_internals.release_staged(
                    self.executor_id, self.app_version, self.batch
                )
                queued += released
                self.released += len(released)
                _kicker.kick()
                if left == 0:
                    events.emit(
                        "worker.recovered",
                        executor_id=self.executor_id,
                        runs=self.released,
                        seconds=round(time.monotonic() - t0, 2),
                    )
                    return
                self.stop.wait(0.05)
            except Exception as exc:  # the database may be restarting: try again shortly
                logging.getLogger(__name__).warning("staged recovery: %s", exc)
                self.stop.wait(1.0)
            finally:
                close_old_connections()


def sweep_now() -> None:
    """Re-check every parked run's inbox at once (after a reconnect: NOTIFYs may be lost)."""
    _sweeper.wake.set()


def stop_executor(workflow_completion_timeout_sec: int = 2) -> None:
    """Stop this process's executor, letting active workflows finish for up to the timeout."""
    _sweeper.halt()
    _kicker.halt()
    DBOS.destroy(workflow_completion_timeout_sec=workflow_completion_timeout_sec)


def migrate_system_schema(alias: str = "default") -> None:
    """Create or upgrade DBOS's schema in the Django database (from a Django migration)."""
    url = database_url(alias)
    check_system_database(url, alias)
    DBOS.migrate(url)
