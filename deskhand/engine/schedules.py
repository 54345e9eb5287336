"""The scheduled workflows a worker runs: escalation, payments reconciliation, retention.

Each is a DBOS scheduled workflow whose input is the time its firing was scheduled for,
handed to every step as ``now``: a recovered firing replays with the same clock, and a
test triggers one with any clock it likes. Several workers may share a schedule: DBOS
names each firing's workflow after its scheduled time, so a period is worked once, and
the services behind them are idempotent under their own row locks anyway. The workflows
here are orchestration only; the work is in the apps.

- ``approvals.escalation_sweep``, every minute — step ``approvals.escalate_due``:
  escalate every approval past its merchant's SLA (``approvals.escalation``).
- ``effects.reconciliation``, every five minutes — step ``effects.merchants`` (which
  merchants refund at a provider), then ``effects.reconcile_merchant`` per merchant
  (``agent.ledger.provider_reconciliation``); a read of the provider that fails is
  retried, and findings are upserts, so a retry or a second worker's firing adds nothing twice.
  The same step tries again every Shopify ``customers/redact`` of the merchant that waited
  for an open run (``agent.privacy.platform``).
- ``privacy.retention_sweep``, daily at 03:17 UTC — step ``privacy.retention``: redact
  every run past its merchant's retention period (``agent.privacy.retention``).

Schedule, workflow and step names are persisted by DBOS: ``deskhand.infra.dbos.names``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from dbos import DBOS
from django.db import close_old_connections

from agent.ledger.provider_reconciliation import merchants_to_reconcile, reconcile_merchant
from agent.privacy.platform import redactions_waiting
from agent.privacy.retention import retention_sweep
from approvals.escalation import approvals_escalate_due
from deskhand.infra.dbos.names import (
    ESCALATION_SCHEDULE,
    RECONCILIATION_SCHEDULE,
    RETENTION_SCHEDULE,
)
from deskhand.infra.retry import RECONCILE_STEP, dbos_step

ESCALATION_CRON = "0 * * * * *"  # second 0 of every minute
RECONCILIATION_CRON = "0 */5 * * * *"
RETENTION_CRON = "0 17 3 * * *"  # 03:17:00 UTC every day


def _as_datetime(value: Any) -> dt.datetime:
    # The portable JSON serializer hands datetimes back as RFC 3339 strings.
    when = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


# --- escalation -------------------------------------------------------------------------


@DBOS.step(name="approvals.escalate_due")
def escalate_due_step(now_iso: str) -> list[str]:
    close_old_connections()
    try:
        return [str(a.id) for a in approvals_escalate_due(now=dt.datetime.fromisoformat(now_iso))]
    finally:
        close_old_connections()


@DBOS.workflow(name="approvals.escalation_sweep")
def escalation_sweep(scheduled_at: Any, context: Any) -> list[str]:
    """Escalate approvals pending longer than their merchant's SLA, as of ``scheduled_at``."""
    return escalate_due_step(_as_datetime(scheduled_at).isoformat())


# --- payments reconciliation --------------------------------------------------------------


@DBOS.step(name="effects.merchants")
def merchants_step(now_iso: str) -> list[int]:
    close_old_connections()
    try:
        return merchants_to_reconcile(dt.datetime.fromisoformat(now_iso))
    finally:
        close_old_connections()


@DBOS.step(name="effects.reconcile_merchant", **dbos_step(RECONCILE_STEP))
def reconcile_merchant_step(merchant_id: int, now_iso: str) -> dict[str, int]:
    close_old_connections()
    try:
        counts = reconcile_merchant(merchant_id, now=dt.datetime.fromisoformat(now_iso))
        # Inside the same step (no new step, so no patch): a Shopify customers/redact that
        # waited for a run of the customer's to end is tried again (agent.privacy.platform).
        counts["redactions"] = redactions_waiting(merchant_id)
        return counts
    finally:
        close_old_connections()


@DBOS.workflow(name="effects.reconciliation")
def reconciliation(scheduled_at: Any, context: Any) -> dict[str, dict[str, int]]:
    """Compare every payments merchant's ledger with its provider, as of ``scheduled_at``."""
    now = _as_datetime(scheduled_at).isoformat()
    return {str(m): reconcile_merchant_step(m, now) for m in merchants_step(now)}


# --- retention ------------------------------------------------------------------------------


@DBOS.step(name="privacy.retention")
def retention_step(now_iso: str) -> dict[str, Any]:
    close_old_connections()
    try:
        return retention_sweep(now=dt.datetime.fromisoformat(now_iso))
    finally:
        close_old_connections()


@DBOS.workflow(name="privacy.retention_sweep")
def retention_workflow(scheduled_at: Any, context: Any) -> dict[str, Any]:
    """Redact what is past its retention period as of ``scheduled_at``."""
    return retention_step(_as_datetime(scheduled_at).isoformat())


def register_schedules() -> None:
    """Create or update the three schedules (idempotent; every worker calls it at launch).

    Each workflow returns what it did (for tests and the DBOS history), not None, which
    DBOS's typed schedule spec does not expect.
    """
    specs: list[Any] = [
        {
            "schedule_name": ESCALATION_SCHEDULE,
            "workflow_fn": escalation_sweep,
            "schedule": ESCALATION_CRON,
        },
        {
            "schedule_name": RECONCILIATION_SCHEDULE,
            "workflow_fn": reconciliation,
            "schedule": RECONCILIATION_CRON,
        },
        {
            "schedule_name": RETENTION_SCHEDULE,
            "workflow_fn": retention_workflow,
            "schedule": RETENTION_CRON,
        },
    ]
    DBOS.apply_schedules(specs)
