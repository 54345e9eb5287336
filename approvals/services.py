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
    """The approval cannot take this decision (already decided, expired, run ended); a 409."""


class SteerRefused(Exception):
    """The note cannot be left (empty, too long, run ended); the message says why."""


def approval_send(approval: Approval) -> None:
    """Deliver the recorded decision to the waiting run (idempotent by approval id)."""
    from deskhand.dbos_setup import client

    client().send(
        str(approval.run_id),
        {"approval_id": str(approval.id), "decision": approval.status},
        approval.topic,
        idempotency_key=f"decision:{approval.id}",
    )
    Approval.objects.filter(pk=approval.pk, delivered_at__isnull=True).update(
        delivered_at=timezone.now()
    )


def approval_decide(
    *, approval: Approval, user: Any, approve: bool, reason: str = "", channel: str = Channel.CLI
) -> Approval:
    """Record one decision, ever, then send it to the run.

    Refusals, in order: a user with no role at the merchant gets ``NotVisible``
    (the approval must look as if it did not exist); a viewer gets
    ``NotAllowed`` with a sentence naming the rule; an approval already decided
    or expired, or whose run has ended, gets ``DecisionRefused`` (a 409).
    """
    require_actor(user, approval.merchant_id, "approve or deny irreversible actions")
    reason = reason.strip()
    if len(reason) > 500:
        raise DecisionRefused("the reason is longer than 500 characters.")
    refusal = ""
    with transaction.atomic():
        locked = (
            Approval.objects.select_for_update(of=("self",))
            .select_related("run")
            .get(pk=approval.pk)
        )
        if locked.status != ApprovalStatus.PENDING:
            raise DecisionRefused(
                f"approval {locked.id} is already {locked.status}; a decision is made once."
            )
        now = timezone.now()
        if locked.expires_at <= now:
            # Recorded (and committed) before refusing, so the waiting run learns it too.
            approval_expire(locked, why="expired before it was decided")
            refusal = f"approval {locked.id} expired at {locked.expires_at:%Y-%m-%d %H:%M:%S %Z}; it can no longer be decided."
        elif locked.run.status in TERMINAL_STATUSES:
            approval_expire(locked, why=f"its run ended ({locked.run.status})")
            refusal = f"run {locked.run_id} has already ended ({locked.run.status}); its approvals can no longer be decided."
        else:
            locked.status = ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED
            locked.decided_by = user
            locked.decided_at = now
            locked.reason = reason
            locked.channel = channel
            locked.save(update_fields=["status", "decided_by", "decided_at", "reason", "channel"])
            AuditEvent.objects.create(
                merchant_id=locked.merchant_id,
                actor=user,
                action="approval.approve" if approve else "approval.deny",
                run_id=locked.run_id,
                channel=channel,
                detail={
                    "approval": str(locked.id),
                    "tool": locked.tool,
                    "args_hash": locked.args_hash,
                    "preview": locked.preview,
                    "reason": reason,
                },
            )
    if locked.run.status not in TERMINAL_STATUSES:
        _send_quietly(locked)  # an expiry is sent too: the waiting run wakes and ends at once
    if refusal:
        raise DecisionRefused(refusal)
    return locked


def approval_expire(locked: Approval, *, why: str) -> None:
    """Expire a pending approval (the caller holds its row lock) and audit it as the system's act."""
    locked.status = ApprovalStatus.EXPIRED
    locked.save(update_fields=["status"])
    AuditEvent.objects.create(
        merchant_id=locked.merchant_id,
        actor=None,
        action="approval.expired",
        run_id=locked.run_id,
        channel=Channel.SYSTEM,
        detail={
            "approval": str(locked.id),
            "tool": locked.tool,
            "preview": locked.preview,
            "why": why,
        },
    )


def _send_quietly(approval: Approval) -> None:
    try:
        approval_send(approval)
    except Exception:  # the decision is recorded; the reconciler re-sends it with the same key
        log.exception(
            "sending decision for approval %s failed; the reconciler will retry", approval.id
        )


def run_steer(*, run: Run, user: Any, body: str, channel: str = Channel.CLI) -> StaffNote:
    """Leave a note for a live run; the loop hands it to the model at its next turn.

    The note is recorded (with its audit event) before it is sent; the message
    on the run's "steer" topic carries only the note's id, and the loop reads
    the note itself from the database, as staff guidance fenced apart from
    anything the customer wrote.
    """
    from deskhand.dbos_setup import client

    require_actor(user, run.merchant_id, "steer runs")
    body = body.strip()
    if not body:
        raise SteerRefused("a note needs some text.")
    if len(body) > 4000:
        raise SteerRefused("a note may be at most 4000 characters.")
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.status in TERMINAL_STATUSES:
            raise SteerRefused(
                f"run {run.id} is already {locked.status}; notes reach only live runs."
            )
        note = StaffNote.objects.create(run=locked, author=user, body=body, channel=channel)
        AuditEvent.objects.create(
            merchant_id=locked.merchant_id,
            actor=user,
            action="run.steer",
            run=locked,
            channel=channel,
            detail={"note": note.pk, "body": body},
        )
    try:
        client().send(
            str(run.id), {"note_id": note.pk}, STEER_TOPIC, idempotency_key=f"note:{note.pk}"
        )
    except Exception:  # the note is recorded; the reconciler re-sends it with the same key
        log.exception("sending staff note %s failed; the reconciler will retry", note.pk)
    return note
