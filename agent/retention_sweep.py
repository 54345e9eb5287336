"""The retention sweep: a DBOS scheduled workflow in the worker, once a day.

``privacy.retention_sweep`` fires at 03:17 UTC (``SWEEP_CRON``). Its only step
runs ``agent.retention.retention_sweep`` with the time the firing was scheduled
for — an input of the workflow, so a recovered sweep replays with the same clock,
and a test can start the workflow with any clock it likes. Several workers may
share the schedule: DBOS names each firing's workflow after its scheduled time,
so a day is swept once, and the sweep is idempotent anyway.

Steps:
1. ``privacy.retention`` — redact every run past its merchant's retention period
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from dbos import DBOS
from django.db import close_old_connections

from agent.retention import retention_sweep

SCHEDULE_NAME = "privacy-retention"
SWEEP_CRON = "0 17 3 * * *"  # 03:17:00 UTC every day


def _as_datetime(value: Any) -> dt.datetime:
    # The portable JSON serializer hands datetimes back as RFC 3339 strings.
    when = value if isinstance(value, dt.datetime) else dt.datetime.fromisoformat(str(value))
    return when if when.tzinfo else when.replace(tzinfo=dt.UTC)


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


def register_schedule() -> None:
    """Create or update the sweep's schedule (idempotent; every worker may call it at launch)."""
    # The sweep returns its report (for tests and the DBOS history), not None.
    fn: Any = retention_workflow
    DBOS.apply_schedules(
        [{"schedule_name": SCHEDULE_NAME, "workflow_fn": fn, "schedule": SWEEP_CRON}]
    )
