"""Escalation: an approval nobody has answered within the merchant's SLA escalates, once.

DBOS's durable timers record absolute wall-clock times that no test clock can
move, so escalation is not a timer per approval: it is a periodic sweep (a
DBOS scheduled workflow in the worker, ``deskhand/engine/schedules.py``) that calls
``approvals_escalate_due`` with the time it was scheduled for. The clock is an
argument, so tests drive the same code with a manual clock.

An escalation raises the ticket's priority one level, stamps
``Approval.escalated_at`` (which every approval listing shows) and writes an
``approval.escalated`` audit event, and emails the merchant's owners (one
notification row each, in the same transaction). It does not write to the run's step log:
step rows are numbered by the run's own deterministic loop, and a row written
from outside the workflow could take a number the loop is about to use. The
run records the escalation in its step log when it resumes (``gate_resume``).
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid

from django.db import transaction
from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, QuerySet, Value

from approvals.audit import audit_record
from approvals.models import Approval, ApprovalStatus, Channel
from approvals.notifications import NotificationEvent, notify_approval
from deskhand.domain.desk.models import Priority
from deskhand.domain.desk.services import ticket_set_priority

log = logging.getLogger(__name__)

_LEVELS = [Priority.LOW, Priority.NORMAL, Priority.HIGH, Priority.URGENT]


def priority_above(priority: str) -> str:
    """One level up, and urgent stays urgent."""
    try:
        i = _LEVELS.index(Priority(priority))
    except ValueError:
        return Priority.HIGH
    return _LEVELS[min(i + 1, len(_LEVELS) - 1)]


def approvals_due(*, now: dt.datetime) -> QuerySet[Approval]:
    """Pending, not yet escalated, not yet expired, and older than their merchant's SLA."""
    sla = ExpressionWrapper(
        F("merchant__approval_sla_seconds") * Value(dt.timedelta(seconds=1)),
        output_field=DurationField(),
    )
    return (
        Approval.objects.filter(
            status=ApprovalStatus.PENDING, escalated_at__isnull=True, expires_at__gt=now
        )
        .alias(due_at=ExpressionWrapper(F("requested_at") + sla, output_field=DateTimeField()))
        .filter(due_at__lte=now)
        .order_by("requested_at")
    )


def approvals_escalate_due(*, now: dt.datetime) -> list[Approval]:
    """Escalate every approval past its SLA at ``now``; each exactly once. Returns those escalated."""
    escalated: list[Approval] = []
    for approval_id in list(approvals_due(now=now).values_list("pk", flat=True)[:500]):
        approval = _escalate_one(approval_id, now)
        if approval is not None:
            escalated.append(approval)
    return escalated


def _escalate_one(approval_id: uuid.UUID, now: dt.datetime) -> Approval | None:
    with transaction.atomic():
        approval = (
            Approval.objects.select_for_update(of=("self",))
            .select_related("merchant", "run__ticket")
            .get(pk=approval_id)
        )
        # Re-checked under the row lock: two sweeps (two workers) escalate once between them,
        # and a decision that landed since the query is not escalated after the fact.
        if approval.status != ApprovalStatus.PENDING or approval.escalated_at is not None:
            return None
        ticket = approval.run.ticket
        before = ticket.priority
        after = priority_above(before)
        ticket_set_priority(ticket=ticket, priority=after)
        approval.escalated_at = now
        approval.save(update_fields=["escalated_at"])
        waited = (now - approval.requested_at).total_seconds()
        audit_record(
            merchant_id=approval.merchant_id,
            actor=None,
            action="approval.escalated",
            run_id=approval.run_id,
            channel=Channel.SYSTEM,
            detail={
                "approval": str(approval.id),
                "tool": approval.tool,
                "preview": approval.preview,
                "ticket": ticket.reference,
                "priority": {"from": before, "to": after},
                "sla_seconds": approval.merchant.approval_sla_seconds,
                "pending_seconds": int(waited),
            },
        )
        # The owners are told, in the escalation's own transaction (the outbox).
        notify_approval(approval, NotificationEvent.ESCALATED)
    log.info("escalated approval %s on %s after %ds pending", approval.id, ticket.reference, waited)
    return approval
