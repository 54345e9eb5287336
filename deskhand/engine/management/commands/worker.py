"""``python manage.py worker``: the one process kind that executes workflows.

Start-up, in this order: take the executor id's lease (``deskhand.infra.fleet.lease``: a
session advisory lock, or exit with one sentence if a live process holds it), then
launch DBOS (which recovers this id's own pending runs), then loop: take over dead
workers' runs every ``DESKHAND_TAKEOVER_SCAN_SEC``, reconcile every
``--reconcile-every``. Workers keep their Django connections (``CONN_MAX_AGE`` 60
unless ``DESKHAND_CONN_MAX_AGE`` says otherwise): a step then costs no connection
set-up (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import psycopg
from django.conf import settings
from django.core.management.base import CommandError
from django.db import close_old_connections

from deskhand.domain.cli import DeskhandCommand
from deskhand.infra import events
from deskhand.infra.edge.errors import is_database_unavailable
from deskhand.infra.edge.outage import ReconnectLog, quiet_connection_noise


class Command(DeskhandCommand):
    help = "Run a DBOS worker: execute queued runs, recover this executor's runs, take over dead workers', reconcile."
    # Django's checks open a connection (a GeneratedField asks the server's version); the
    # worker runs them itself once the database is reachable, so an outage at start-up is
    # waited out rather than reported.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--executor-id",
            default=os.environ.get("DESKHAND_EXECUTOR_ID", "worker-1"),
            help="Stable, unique id: a restarted worker recovers the runs of the same id (env DESKHAND_EXECUTOR_ID).",
        )
        parser.add_argument(
            "--reconcile-every", type=float, default=5.0, help="Seconds between reconciler passes."
        )
        parser.add_argument(
            "--id-wait",
            type=float,
            default=None,
            metavar="S",
            help="How long to wait for the executor id to be free (default: the takeover grace).",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        from agent.ops.reconciler import reconcile
        from deskhand.engine.bootstrap import launch_executor, stop_executor
        from deskhand.engine.recovery import StagedRecovery, sweep_now
        from deskhand.engine.takeover import Scanner
        from deskhand.engine.workarounds.executor_recovery import (
            pending_of,
            recover_own_stranded,
        )
        from deskhand.engine.workarounds.staged_recovery import stage_own_pending, staged_id
        from deskhand.infra.dbos.client import DBOSSetupError
        from deskhand.infra.fleet.lease import IdTaken, Lease, install

        executor_id = opts["executor_id"]
        if not executor_id or any(c.isspace() for c in executor_id) or len(executor_id) > 128:
            raise CommandError("--executor-id must be a non-empty id without spaces (128 at most).")
        if "DESKHAND_CONN_MAX_AGE" not in os.environ:
            settings.DATABASES["default"]["CONN_MAX_AGE"] = 60
        grace = settings.DESKHAND_TAKEOVER_GRACE_SEC
        lease = Lease.from_settings(executor_id)
        # The one command that outlives a database outage: it waits, one line per attempt.
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        quiet_connection_noise()
        outage = ReconnectLog(self._say, every=settings.DESKHAND_HEARTBEAT_SEC)
        while True:
            try:
                lease.acquire(wait=grace + 2 if opts["id_wait"] is None else opts["id_wait"])
                break
            except IdTaken as exc:
                raise CommandError(f"{exc}; this worker did not start") from None
            except psycopg.OperationalError as exc:
                outage.failed(exc)
                if stop.wait(outage.every):
                    self._say(f"worker {executor_id} stopped before the database was reachable")
                    return
        outage.reached()
        self.check()
        install(lease)
        retaken_at = time.monotonic()  # launching counts: a crash may have stranded runs

        def retaken() -> None:
            nonlocal retaken_at
            sweep_now()
            retaken_at = time.monotonic()

        lease.on_retaken = retaken
        lease.on_unreachable = outage.failed
        lease.on_reachable = outage.reached
        lease.start()
        # Our own pending runs are handed back in stages, decided ones first, not all at once
        # by DBOS's startup recovery (docs/scaling.md, "A restart with thousands parked").
        version = settings.DESKHAND_APP_VERSION
        stage_own_pending(executor_id, version)
        staged = pending_of(staged_id(executor_id), version)  # with any a crash left staged
        try:
            launch_executor(executor_id)
        except DBOSSetupError as exc:
            lease.release()
            raise CommandError(str(exc)) from None
        stager = StagedRecovery(
            executor_id,
            version,
            lease.confirmed,
            batch=settings.DESKHAND_RECOVERY_BATCH,
            max_replaying=settings.DESKHAND_RECOVERY_MAX_REPLAYING,
        )
        stager.start()
        quiet_connection_noise()  # again: DBOS has added its own log handler at launch
        self.stdout.write(
            f"worker {executor_id} ready (version {version}, DBOS launched, queue listening;"
            f" {staged} of its runs to recover in stages)",
            ending="\n",
        )
        self.stdout.flush()
        scanner = Scanner(lease)
        scan_every = settings.DESKHAND_TAKEOVER_SCAN_SEC
        tick = min(scan_every, opts["reconcile_every"], 1.0)
        next_scan = next_reconcile = next_stranded = time.monotonic()
        while not stop.wait(tick):
            now = time.monotonic()
            if now >= next_scan:
                next_scan = now + scan_every
                try:
                    close_old_connections()
                    stranded = []
                    if (
                        now >= next_stranded
                        or now - retaken_at < settings.DESKHAND_STRANDED_WINDOW_SEC
                    ):
                        next_stranded = now + settings.DESKHAND_STRANDED_CHECK_SEC
                        stranded = recover_own_stranded(executor_id, version)
                    if stranded:
                        events.emit(
                            "worker.stranded_recovered", executor_id=executor_id, runs=len(stranded)
                        )
                        self.stdout.write(f"re-enqueued {len(stranded)} of its own stranded runs")
                    for took in scanner.scan():
                        self.stdout.write(
                            f"took over {took.executor_id} ({took.why}): {took.recovered} runs"
                            + (f", {took.left} still pending" if took.left else "")
                        )
                except Exception as exc:  # a scan must never take the worker down
                    if not is_database_unavailable(exc):  # an outage has its own lines
                        self.stderr.write(f"takeover scan failed: {type(exc).__name__}: {exc}")
            if now >= next_reconcile:
                next_reconcile = now + opts["reconcile_every"]
                try:
                    close_old_connections()
                    counts = reconcile()
                    if any(counts.values()):
                        self.stdout.write(f"reconciled: {counts}")
                except Exception as exc:  # the reconciler must never take the worker down
                    if not is_database_unavailable(exc):
                        self.stderr.write(f"reconciler pass failed: {type(exc).__name__}: {exc}")
        self.stdout.write(f"worker {executor_id} stopping")
        events.emit("worker.stopping", executor_id=executor_id)
        stager.stop.set()
        scanner.close()
        stop_executor(workflow_completion_timeout_sec=2)
        lease.release()

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()
