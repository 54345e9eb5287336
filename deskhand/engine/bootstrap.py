"""DBOS bootstrap: how a worker (or a test) launches the DBOS executor.

Process model: only ``manage.py worker`` launches DBOS (it executes workflows, with a
stable executor id). The web process and CLI commands enqueue, send and cancel through
``deskhand.infra.dbos.client`` and never launch a second executor. DBOS's system tables live in
the ``dbos`` schema of the *Django* database — checked at start-up, so a misconfiguration
can never fall back to DBOS's default SQLite file.
"""

from __future__ import annotations

import os
from typing import Any

from dbos import DBOS, DBOSConfig, DBOSPortableJSONSerializer
from django.conf import settings

from deskhand.engine import queues, recovery
from deskhand.engine.schedules import register_schedules
from deskhand.engine.workarounds import internal_queue_poll, queue_kick, recv_recheck
from deskhand.infra.dbos.client import DBOSSetupError, app_name, check_system_database, database_url
from deskhand.infra.fleet import lease


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


def launch_executor(executor_id: str, *, unleased: bool = False, **overrides: Any) -> None:
    """Launch DBOS in this process as the executor ``executor_id`` (worker and tests only).

    The process must hold the id's lease first (``deskhand.infra.fleet.lease``): an executor
    without one looks dead to every other worker's takeover scan, which re-runs its runs
    while it still executes them, and each run it loses keeps a coroutine here polling for
    the outcome once a second (LESSONS #35). Only a test's private executor, on a database
    no worker scans, passes ``unleased=True``.

    Parked runs: each waiting ``recv`` re-checks the database on its own only every
    ``DESKHAND_RECV_RECHECK_SEC``; one sweep per process every ``DESKHAND_RECV_SWEEP_SEC``
    does it for all of them at once (docs/scaling.md, "Parked runs").
    """
    held = lease.current()
    if not unleased and (held is None or held.executor_id != executor_id):
        raise DBOSSetupError(
            f"executor {executor_id} has no lease: take it (deskhand.infra.fleet.lease.Lease) before launching"
        )
    # The workflows and schedules registered themselves when the engine app loaded
    # (deskhand.engine.apps): every process agrees on them, launched or not.
    DBOS(config=config(executor_id, **overrides))
    queue_kick.kickable_from_launch()
    internal_queue_poll.set_internal_queue_poll(settings.DESKHAND_QUEUE_POLL_SEC)
    DBOS.launch()
    recv_recheck.stretch_recv_recheck(settings.DESKHAND_RECV_RECHECK_SEC)
    queues.register_queues()
    queues.register_model_queues()
    register_schedules()
    recovery.start_recv_sweep(settings.DESKHAND_RECV_SWEEP_SEC)
    queues.start_kicker()


def stop_executor(workflow_completion_timeout_sec: int = 2) -> None:
    """Stop this process's executor, letting active workflows finish for up to the timeout."""
    recovery.halt_recv_sweep()
    queues.halt_kicker()
    DBOS.destroy(workflow_completion_timeout_sec=workflow_completion_timeout_sec)
