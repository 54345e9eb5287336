"""What was done to runs' workflows with DBOS's own tools, and what Deskhand did about it.

The writers are the reconciler (``agent.ops.reconciler``) and a run workflow that starts
with no run (``agent.replay.fork.workflow_adopt``); the readers are ``manage.py health``,
the console's attention queue and ``manage.py workflow_findings``. One row per workflow
and kind (``WorkflowFinding``): seen again, it is the same row (``last_seen_at`` moves on).
Nothing here changes a run; it only records, reads and settles findings.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from agent.models import Run, WorkflowFinding, WorkflowFindingKind

SETTLED_BY_DESKHAND = "Deskhand"
RECENT = 20


class FindingRefused(Exception):
    """A finding that cannot be settled (absent, or already settled); the message says why."""


def finding_record(
    *,
    workflow_id: str,
    kind: WorkflowFindingKind,
    detail: str,
    run: Run | None = None,
    forked_from: Run | None = None,
    dbos_status: str = "",
    settled: str = "",
) -> WorkflowFinding:
    """Record (or see again) what was found about one workflow.

    ``settled``: the finding needs nobody (e.g. a fork that became a run) and is written
    settled by Deskhand with this as its resolution; otherwise it stays open for a person.
    """
    now = timezone.now()
    about = run or forked_from
    merchant_id = about.merchant_id if about is not None else None
    fields: dict[str, Any] = {
        "merchant_id": merchant_id,
        "run": run,
        "forked_from": forked_from,
        "dbos_status": dbos_status[:40],
        "detail": detail,
        "found_at": now,
        "last_seen_at": now,
    }
    if settled:
        fields.update(resolved_at=now, resolved_by=SETTLED_BY_DESKHAND, resolution=settled)
    try:
        with transaction.atomic():
            finding, created = WorkflowFinding.objects.get_or_create(
                workflow_id=workflow_id, kind=kind, defaults=fields
            )
    except IntegrityError:  # recorded meanwhile by another pass or worker
        finding, created = WorkflowFinding.objects.get(workflow_id=workflow_id, kind=kind), False
    if not created:
        WorkflowFinding.objects.filter(pk=finding.pk).update(
            last_seen_at=now, dbos_status=dbos_status[:40] or finding.dbos_status
        )
    return finding


def finding_resolve(*, pk: int, by: str, note: str) -> WorkflowFinding:
    """A person settles an open finding: who and what they did. Nothing else changes."""
    with transaction.atomic():
        finding = WorkflowFinding.objects.select_for_update().filter(pk=pk).first()
        if finding is None:
            raise FindingRefused(f"there is no workflow finding {pk}.")
        if finding.resolved_at is not None:
            raise FindingRefused(
                f"workflow finding {pk} was already settled by {finding.resolved_by}."
            )
        finding.resolved_at, finding.resolved_by, finding.resolution = timezone.now(), by, note
        finding.save(update_fields=["resolved_at", "resolved_by", "resolution"])
    return finding


def open_workflow_findings(
    merchant_id: int | None = None, limit: int = 200
) -> list[WorkflowFinding]:
    qs = WorkflowFinding.objects.filter(resolved_at__isnull=True)
    if merchant_id is not None:
        qs = qs.filter(merchant_id=merchant_id)
    return list(qs.select_related("merchant").order_by("-found_at", "-pk")[:limit])


def finding_row(f: WorkflowFinding) -> dict[str, Any]:
    """One finding as ``health --json`` and ``workflow_findings --json`` print it."""
    return {
        "id": f.pk,
        "workflow_id": f.workflow_id,
        "kind": f.kind,
        "merchant": f.merchant.slug if f.merchant_id and f.merchant else None,
        "run_id": str(f.run_id) if f.run_id else None,
        "forked_from": str(f.forked_from_id) if f.forked_from_id else None,
        "dbos_status": f.dbos_status or None,
        "detail": f.detail,
        "found_at": f.found_at.isoformat(),
        "resolved_at": f.resolved_at.isoformat() if f.resolved_at else None,
        "resolved_by": f.resolved_by or None,
        "resolution": f.resolution or None,
    }


def workflow_findings_summary(since: dt.timedelta = dt.timedelta(days=7)) -> dict[str, Any]:
    """What ``health --json`` reports: open findings by kind and each one's sentence, and the
    most recent findings of the last ``since`` (settled ones too: what became of a fork)."""
    open_qs = WorkflowFinding.objects.filter(resolved_at__isnull=True)
    by_kind = {
        row["kind"]: row["n"] for row in open_qs.order_by().values("kind").annotate(n=Count("id"))
    }
    recent = (
        WorkflowFinding.objects.filter(found_at__gte=timezone.now() - since)
        .select_related("merchant")
        .order_by("-found_at", "-pk")[:RECENT]
    )
    return {
        "open": sum(by_kind.values()),
        "by_kind": by_kind,
        "findings": [finding_row(f) for f in open_workflow_findings(limit=RECENT)],
        "recent": [finding_row(f) for f in recent],
    }
