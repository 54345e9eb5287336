"""Writes for the consent gate: decide, steer. Each records who, when and through what.

A decision is recorded in a Django transaction first, and only then sent to
the run with DBOS ``send`` keyed by the approval id — so a double click or a
retried request delivers once, and a decision whose send was lost is re-sent
by the reconciler with the same key.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from agent.models import TERMINAL_STATUSES, Run
from approvals.models import STEER_TOPIC, Approval, ApprovalStatus, AuditEvent, Channel, StaffNote
from deskhand.desk.permissions import require_actor

log = logging.getLogger(__name__)


class DecisionRefused(Exception):
    """The approval cannot take this decision (already decided, expired); a 409."""


class SteerRefused(Exception):
    pass


def approval_send(approval: Approval) -> None:
    """Deliver the recorded decision to the waiting run (idempotent by approval id)."""
    from deskhand.dbos_setup import client

    client().send(
        str(approval.run_id),
        {"approval_id": str(approval.id), "decision": approval.status},
        approval.topic,
        idempotency_key=f"decision:{approval.id}",
    )
    Approval.objects.filter(pk=approval.pk, delivered_at__isnull=True).update(delivered_at=timezone.now())


def approval_decide(*, approval: Approval, user: Any, approve: bool, reason: str = "", channel: str = Channel.CLI) -> Approval:
    """Record one decision, ever, then send it to the run."""
    require_actor(user, approval.merchant_id, "approve or deny irreversible actions")
    reason = reason.strip()
    if len(reason) > 500:
        raise DecisionRefused("the reason is longer than 500 characters.")
    with transaction.atomic():
        locked = Approval.objects.select_for_update().get(pk=approval.pk)
        if locked.status != ApprovalStatus.PENDING:
            raise DecisionRefused(f"approval {locked.id} is already {locked.status}; a decision is made once.")
        if locked.expires_at <= timezone.now():
            locked.status = ApprovalStatus.EXPIRED
            locked.save(update_fields=["status"])
            AuditEvent.objects.create(merchant_id=locked.merchant_id, actor=None, action="approval.expired", run_id=locked.run_id, channel=Channel.SYSTEM, detail={"approval": str(locked.id)})
            transaction.on_commit(lambda: approval_send(locked))
            raise DecisionRefused(f"approval {locked.id} expired at {locked.expires_at:%Y-%m-%d %H:%M %Z}; it can no longer be decided.")
        locked.status = ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED
        locked.decided_by = user
        locked.decided_at = timezone.now()
        locked.reason = reason
        locked.channel = channel
        locked.save(update_fields=["status", "decided_by", "decided_at", "reason", "channel"])
        AuditEvent.objects.create(
            merchant_id=locked.merchant_id, actor=user, action="approval.approve" if approve else "approval.deny",
            run_id=locked.run_id, channel=channel,
            detail={"approval": str(locked.id), "tool": locked.tool, "args_hash": locked.args_hash, "preview": locked.preview, "reason": reason},
        )
    try:
        approval_send(locked)
    except Exception:  # the decision is recorded; the reconciler re-sends it
        log.exception("sending decision for approval %s failed; the reconciler will retry", locked.id)
    return locked


def run_steer(*, run: Run, user: Any, body: str, channel: str = Channel.CLI) -> StaffNote:
    """Leave a note for a live run; the loop hands it to the model at its next turn."""
    from deskhand.dbos_setup import client

    require_actor(user, run.merchant_id, "steer runs")
    body = body.strip()
    if not body:
        raise SteerRefused("a note needs some text.")
    if len(body) > 4000:
        raise SteerRefused("a note may be at most 4000 characters.")
    if run.status in TERMINAL_STATUSES:
        raise SteerRefused(f"run {run.id} is already {run.status}; notes reach only live runs.")
    with transaction.atomic():
        note = StaffNote.objects.create(run=run, author=user, body=body, channel=channel)
        AuditEvent.objects.create(merchant_id=run.merchant_id, actor=user, action="run.steer", run=run, channel=channel, detail={"note": note.pk})
    client().send(str(run.id), {"note_id": note.pk}, STEER_TOPIC, idempotency_key=f"note:{note.pk}")
    return note
