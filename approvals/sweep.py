"""The escalation sweep: a DBOS scheduled workflow in the worker.

``approvals.escalation_sweep`` fires once a minute (``SWEEP_CRON``). Its only
step calls ``approvals_escalate_due`` with the time the firing was scheduled
for — an input of the workflow, so a recovered sweep replays with the same
clock. Several workers may share the schedule: DBOS names each firing's
workflow after its scheduled time, so a minute is swept once, and the
service's row locks make a race between sweeps harmless anyway.

Steps:
1. ``approvals.escalate_due`` — escalate every approval past its merchant's SLA
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from dbos import DBOS
from django.db import close_old_connections

from approvals.escalation import approvals_escalate_due

SCHEDULE_NAME = "approvals-escalation"
SWEEP_CRON = "0 * * * * *"  # second 0 of every minute


def _as_datetime(value: Any) -> dt.datetime:
    # The portable JSON serializer hands datetimes back as RFC 3339 strings.
    when = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


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


def register_schedule() -> None:
    """Create or update the sweep's schedule (idempotent; every worker may call it at launch)."""
    DBOS.apply_schedules(
        # The sweep returns the ids it escalated (for tests and the DBOS history), not None.
        [{"schedule_name": SCHEDULE_NAME, "workflow_fn": escalation_sweep, "schedule": SWEEP_CRON}]  # type: ignore[typeddict-item]
    )
