"""Retention: a finished run keeps its words for its merchant's ``retention_days``, then loses them.

``retention_sweep(now=...)`` is what the scheduled DBOS workflow
(``deskhand.engine.schedules``) runs once a day, with the time the firing was
scheduled for; a test hands it any clock it likes. For each merchant, every run
that finished more than ``Merchant.retention_days`` before ``now`` and still has
its words is, in batches:

1. stripped of its DBOS history (``dbos_client.delete_finished_workflows``: the
   checkpointed model replies and tool results, its status row, its messages) —
   a run whose workflow DBOS still holds as able to act is left for the next sweep;
2. redacted (``agent.privacy.redaction.run_redact``, marker ``[redacted]``): step payloads
   and transcripts, approvals' wording, staff notes, audit details, the summary's
   account. The ledger is kept whole — it is the merchant's accounts — and so are
   amounts, orders, times, approvers and argument hashes.

The run page then says what was redacted and when; replay and fork refuse it.
Then inbound mail's raw bytes past ``DESKHAND_INBOUND_RAW_RETENTION_DAYS`` are dropped
(``deskhand.domain.mail.retention.inbound_prune``; the row keeps its facts). Finally the sweeps'
own history (one workflow per firing, a minute apart for the escalation sweep) and the
intake's (one workflow per message and per line; they carry ids, never words) are trimmed
to ``DESKHAND_SWEEP_HISTORY_DAYS``.

Each run is its own transaction, and the sweep is idempotent: a sweep that dies
half way is simply finished by the next one.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.conf import settings
from django.db.models import Q

from agent.models import TERMINAL_STATUSES, Run
from agent.models.privacy import RedactionReason
from agent.privacy.redaction import RedactionRefused, run_redact
from deskhand.domain.desk.models import Merchant
from deskhand.domain.mail.retention import inbound_prune
from deskhand.infra.dbos import client as dbos_client
from deskhand.infra.dbos.names import CUSTOMER_LINE_WORKFLOW, INBOUND_WORKFLOW

log = logging.getLogger(__name__)

# The scheduled workflows whose firings are trimmed (deskhand.engine.schedules): every
# schedule the worker registers (a test holds that).
SWEEP_WORKFLOWS = [
    "approvals.escalation_sweep",
    "privacy.retention_sweep",
    "effects.reconciliation",
]


def expired_runs(merchant: Merchant, now: dt.datetime) -> Any:
    """The merchant's finished runs past its retention period that still have their words."""
    cutoff = now - dt.timedelta(days=merchant.retention_days)
    return (
        Run.objects.filter(merchant=merchant, status__in=TERMINAL_STATUSES, redactions__isnull=True)
        .filter(Q(finished_at__lt=cutoff) | Q(finished_at__isnull=True, created_at__lt=cutoff))
        .order_by("pk")
    )


def retention_sweep(*, now: dt.datetime, batch: int = 200) -> dict[str, Any]:
    """Redact every run past its merchant's retention period as of ``now``; what was done."""
    report: dict[str, Any] = {"runs_redacted": 0, "dbos_deleted": 0, "left_for_later": 0}
    for merchant in Merchant.objects.order_by("pk"):
        last = None
        while True:
            runs = expired_runs(merchant, now)
            if last is not None:
                runs = runs.filter(pk__gt=last)
            chunk = list(runs[:batch])
            if not chunk:
                break
            last = chunk[-1].pk
            ids = [str(r.pk) for r in chunk]
            active = {w for w, s in dbos_client.workflow_states(ids).items() if s.active}
            deleted = set(dbos_client.delete_finished_workflows(ids))
            report["dbos_deleted"] += len(deleted)
            for run in chunk:
                if str(run.pk) in active:
                    report["left_for_later"] += 1  # its workflow is still finishing
                    continue
                try:
                    run_redact(
                        run,
                        reason=RedactionReason.RETENTION,
                        now=now,
                        dbos_deleted=str(run.pk) in deleted,
                        extra={"retention_days": merchant.retention_days},
                    )
                except RedactionRefused:
                    report["left_for_later"] += 1
                    continue
                report["runs_redacted"] += 1
    pruned = inbound_prune(now=now)
    report["inbound_raw_emptied"] = pruned["emptied"]
    report["inbound_deleted"] = pruned["deleted"]
    before = now - dt.timedelta(days=settings.DESKHAND_SWEEP_HISTORY_DAYS)
    report["sweep_history_deleted"] = dbos_client.delete_workflow_history(SWEEP_WORKFLOWS, before)
    report["intake_history_deleted"] = dbos_client.delete_workflow_history(
        [INBOUND_WORKFLOW, CUSTOMER_LINE_WORKFLOW], before
    )
    if any(v for k, v in report.items() if k != "left_for_later"):
        log.info("retention sweep as of %s: %s", now.isoformat(), report)
    return report
