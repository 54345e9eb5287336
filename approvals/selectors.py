"""Reads for approvals: the inbox, the CLI listing, one approval as a user may see it, the audit trail."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from django.db.models import QuerySet

from approvals.models import Approval, ApprovalStatus, AuditEvent
from deskhand.domain.desk.permissions import NotVisible, require_member


def approvals_list(
    *, merchant_slug: str | None = None, pending_only: bool = False
) -> QuerySet[Approval]:
    """Approvals, newest first; escalated pending ones are flagged by ``escalated_at``."""
    qs = Approval.objects.select_related(
        "merchant", "run__ticket", "decided_by", "policy"
    ).order_by("-requested_at")
    if merchant_slug:
        qs = qs.filter(merchant__slug=merchant_slug)
    if pending_only:
        qs = qs.filter(status=ApprovalStatus.PENDING)
    return qs


def approval_for_user(*, user: Any, approval_id: uuid.UUID | str) -> Approval:
    """The approval if ``user`` has a role at its merchant; ``NotVisible`` (a 404) otherwise.

    An unknown id and another merchant's approval are indistinguishable.
    """
    approval = Approval.objects.select_related("merchant", "run").filter(pk=approval_id).first()
    if approval is None:
        raise NotVisible("not found")
    require_member(user, approval.merchant_id)
    return approval


def approval_row(approval: Approval, *, now: dt.datetime) -> dict[str, Any]:
    """One approval as the CLI prints it (``--json``: exactly this object)."""
    return {
        "id": str(approval.id),
        "merchant": approval.merchant.slug,
        "run_id": str(approval.run_id),
        "ticket": approval.run.ticket.reference,
        "tool": approval.tool,
        "status": approval.status,
        "preview": approval.preview,
        "arguments": approval.arguments,
        # What the lineage and earlier runs on the ticket had already done to this order or
        # customer when it was requested: the card shows it beside the call.
        "prior_effects": approval.prior_effects,
        "args_hash": approval.args_hash,
        "requested_at": approval.requested_at.isoformat(),
        "age_seconds": int((now - approval.requested_at).total_seconds()),
        "expires_at": approval.expires_at.isoformat(),
        "expires_in_seconds": int((approval.expires_at - now).total_seconds()),
        "escalated": approval.escalated_at is not None,
        "escalated_at": approval.escalated_at.isoformat() if approval.escalated_at else None,
        "decided_by": approval.decider or None,
        "decided_at": approval.decided_at.isoformat() if approval.decided_at else None,
        "reason": approval.reason or None,
        "channel": approval.channel or None,
        # What was approved (the proposal, or a narrower call a person chose) and, for a
        # merchant rule's decision, which version and rule.
        "approved_arguments": approval.approved_arguments,
        "approved_hash": approval.approved_hash or None,
        "changed": approval.changed,
        "policy": approval.decided_by_label if approval.policy_id else None,
    }


def run_audit(*, run_id: uuid.UUID | str) -> list[AuditEvent]:
    """The human (and system) acts on one run, oldest first: for the run page and the admin."""
    return list(AuditEvent.objects.filter(run_id=run_id).order_by("created_at", "id"))


def duration(seconds: float) -> str:
    """Compact and human: 45s, 12m, 3h05m, 2d04h."""
    s = int(abs(seconds))
    if s < 60:
        text = f"{s}s"
    elif s < 3600:
        text = f"{s // 60}m"
    elif s < 86400:
        text = f"{s // 3600}h{(s % 3600) // 60:02d}m"
    else:
        text = f"{s // 86400}d{(s % 86400) // 3600:02d}h"
    return text if seconds >= 0 else f"-{text}"
