"""The reconciler: make every Run row tell the truth about its workflow.

Runs in the worker every few seconds. It maps DBOS terminal states (error,
cancelled, recovery attempts exceeded) onto runs still marked open, fails
runs whose workflow never came to exist (the web process died between
creating the row and enqueueing), and re-sends recorded decisions whose send
never happened (same idempotency key, so a decision is delivered once).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.utils import timezone

from agent.models import OPEN_STATUSES, Run, RunStatus, StopReason
from agent.runs import run_mark_cancelled, run_mark_failed
from approvals.models import STEER_TOPIC, Approval, ApprovalStatus, StaffNote

log = logging.getLogger(__name__)

ENQUEUE_GRACE = dt.timedelta(seconds=30)


def _workflow_statuses(run_ids: list[str]) -> dict[str, Any]:
    from deskhand.dbos_setup import client

    out: dict[str, Any] = {}
    for i in range(0, len(run_ids), 500):
        chunk = run_ids[i : i + 500]
        for wf in client().list_workflows(workflow_ids=chunk, load_input=False, load_output=False):
            out[wf.workflow_id] = wf
    return out


def reconcile(now: dt.datetime | None = None) -> dict[str, int]:
    now = now or timezone.now()
    counts = {"enqueue_lost": 0, "error": 0, "cancelled": 0, "recovery_exhausted": 0, "resent": 0}
    open_ids = [
        str(pk) for pk in Run.objects.filter(status__in=OPEN_STATUSES).values_list("pk", flat=True)
    ]
    workflows = _workflow_statuses(open_ids) if open_ids else {}
    for run_id in open_ids:
        wf = workflows.get(run_id)
        if wf is None:
            run = Run.objects.get(pk=run_id)
            lost = run.status == RunStatus.QUEUED and run.created_at < now - ENQUEUE_GRACE
            if lost and run_mark_failed(
                run_id=run_id,
                reason=StopReason.ENQUEUE_LOST,
                detail="the run was created but never handed to a worker",
            ):
                counts["enqueue_lost"] += 1
            continue
        if wf.status == "ERROR":
            if run_mark_failed(
                run_id=run_id, reason=StopReason.ERROR, detail=f"workflow failed: {wf.error}"[:2000]
            ):
                counts["error"] += 1
        elif wf.status == "MAX_RECOVERY_ATTEMPTS_EXCEEDED":
            if run_mark_failed(
                run_id=run_id,
                reason=StopReason.RECOVERY_EXHAUSTED,
                detail="the workflow crashed too many times",
            ):
                counts["recovery_exhausted"] += 1
        elif wf.status == "CANCELLED" and run_mark_cancelled(
            run_id=run_id, by="DBOS (the workflow was cancelled outside Deskhand)"
        ):
            counts["cancelled"] += 1
    counts["resent"] = resend_undelivered()
    resend_recent_notes()  # idempotent; not counted, it re-sends every recent note each pass
    return counts


def resend_undelivered() -> int:
    from approvals.services import approval_send

    sent = 0
    stale = timezone.now() - dt.timedelta(seconds=2)
    for approval in Approval.objects.filter(
        delivered_at__isnull=True, decided_at__lt=stale, run__status__in=OPEN_STATUSES
    ).exclude(status=ApprovalStatus.PENDING)[:500]:
        try:
            approval_send(approval)
            sent += 1
        except Exception:
            log.exception("re-sending decision for approval %s failed", approval.id)
    return sent


def resend_recent_notes() -> int:
    """Re-send recent staff notes to open runs. Sends are keyed ``note:<id>``, so a note
    that was delivered is not delivered again; one whose send failed arrives now."""
    from deskhand.dbos_setup import client

    now = timezone.now()
    sent = 0
    notes = StaffNote.objects.filter(
        run__status__in=OPEN_STATUSES,
        created_at__lt=now - dt.timedelta(seconds=2),
        created_at__gte=now - dt.timedelta(hours=1),
    )[:500]
    for note in notes:
        try:
            client().send(
                str(note.run_id),
                {"note_id": note.pk},
                STEER_TOPIC,
                idempotency_key=f"note:{note.pk}",
            )
            sent += 1
        except Exception:
            log.exception("re-sending staff note %s failed", note.pk)
    return sent
