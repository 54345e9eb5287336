"""``python manage.py worker``: the one process kind that executes workflows."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections


class Command(BaseCommand):
    help = "Run a DBOS worker: execute queued runs, recover this executor's runs, reconcile."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--executor-id",
            default=os.environ.get("DESKHAND_EXECUTOR_ID", "worker-1"),
            help="Stable, unique id: a restarted worker recovers the runs of the same id (env DESKHAND_EXECUTOR_ID).",
        )
        parser.add_argument(
            "--reconcile-every", type=float, default=5.0, help="Seconds between reconciler passes."
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        from dbos import DBOS

        from agent.reconcile import reconcile
        from deskhand.dbos_setup import DBOSSetupError, launch_executor

        executor_id = opts["executor_id"]
        if not executor_id or any(c.isspace() for c in executor_id):
            raise CommandError("--executor-id must be a non-empty id without spaces.")
        try:
            launch_executor(executor_id)
        except DBOSSetupError as exc:
            raise CommandError(str(exc)) from None
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write(
            f"worker {executor_id} ready (DBOS launched, queue listening)", ending="\n"
        )
        self.stdout.flush()
        while not stop.wait(opts["reconcile_every"]):
            try:
                close_old_connections()
                counts = reconcile()
                if any(counts.values()):
                    self.stdout.write(f"reconciled: {counts}")
            except Exception as exc:  # the reconciler must never take the worker down
                self.stderr.write(f"reconciler pass failed: {type(exc).__name__}: {exc}")
        self.stdout.write(f"worker {executor_id} stopping")
        DBOS.destroy(workflow_completion_timeout_sec=2)
