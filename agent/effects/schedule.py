"""The reconciliation schedule: a DBOS scheduled workflow in the worker.

``effects.reconciliation`` fires every five minutes (``RECONCILE_CRON``). Its input is
the time the firing was scheduled for, which every step is handed as ``now`` — so a
recovered firing replays with the same clock, and a test triggers it with any. Steps:

1. ``effects.merchants`` — which merchants refund at a provider
2. ``effects.reconcile_merchant`` — one per merchant (``agent.effects.reconcile``); a read
   of the provider that fails is retried, and findings are upserts, so a retry or a second
   worker's firing adds nothing twice.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from dbos import DBOS
from django.db import close_old_connections

from agent.effects.reconcile import merchants_to_reconcile, reconcile_merchant

SCHEDULE_NAME = "effects-reconciliation"
RECONCILE_CRON = "0 */5 * * * *"


def _as_datetime(value: Any) -> dt.datetime:
    when = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


@DBOS.step(name="effects.merchants")
def merchants_step(now_iso: str) -> list[int]:
    close_old_connections()
    try:
        return merchants_to_reconcile(dt.datetime.fromisoformat(now_iso))
    finally:
        close_old_connections()


@DBOS.step(name="effects.reconcile_merchant", retries_allowed=True, max_attempts=3)
def reconcile_merchant_step(merchant_id: int, now_iso: str) -> dict[str, int]:
    close_old_connections()
    try:
        return reconcile_merchant(merchant_id, now=dt.datetime.fromisoformat(now_iso))
    finally:
        close_old_connections()


@DBOS.workflow(name="effects.reconciliation")
def reconciliation(scheduled_at: Any, context: Any) -> dict[str, dict[str, int]]:
    """Compare every payments merchant's ledger with its provider, as of ``scheduled_at``."""
    now = _as_datetime(scheduled_at).isoformat()
    return {str(m): reconcile_merchant_step(m, now) for m in merchants_step(now)}


def register_schedule() -> None:
    """Create or update the schedule (idempotent; every worker may call it at launch)."""
    # The workflow returns what it found (for tests and the DBOS history), not None.
    schedule = {
        "schedule_name": SCHEDULE_NAME,
        "workflow_fn": reconciliation,
        "schedule": RECONCILE_CRON,
    }
    DBOS.apply_schedules([schedule])  # type: ignore[list-item]
