"""Writes for the consent gate: decide, expire, withdraw. Each records who, when and through what.

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

from approvals.audit import audit_record
from approvals.models import Approval, ApprovalPolicy, ApprovalStatus, Channel
from deskhand.domain.desk.permissions import require_actor
from deskhand.infra import events
from deskhand.infra.dbos import client as dbos_client

log = logging.getLogger(__name__)


class DecisionRefused(Exception):
    """The approval cannot take this decision (already decided, expired, run ended); a 409."""


class ReasonRequired(DecisionRefused):
    """A denial with no reason: the agent reads the reason, so every channel must give one."""


DENY_REASON_REQUIRED = "a denial needs a reason: the agent reads it, and the audit trail keeps it."


def approval_send(approval: Approval) -> None:
    """Deliver the recorded decision to the waiting run (idempotent by approval id)."""
    dbos_client.send_decision(
        run_id=str(approval.run_id), approval_id=str(approval.id), decision=approval.status
    )
    Approval.objects.filter(pk=approval.pk, delivered_at__isnull=True).update(
        delivered_at=timezone.now()
    )


def approval_decide(
    *,
    approval: Approval,
    user: Any,
    approve: bool,
    reason: str = "",
    channel: str = Channel.CLI,
    approved_arguments: dict[str, Any] | None = None,
    approved_hash: str = "",
) -> Approval:
    """Record one decision, ever, then send it to the run.

    An approval records what was approved beside what was proposed: the proposal
    itself, or — ``approved_arguments``/``approved_hash``, computed by the caller
    that knows the tool registry (``agent.tools.narrowing``) — a narrower call a person
    chose. This app never imports the agent, so it cannot judge a narrowing; the
    run re-checks it before it acts (``execute_irreversible``).

    Refusals, in order: a user with no role at the merchant gets ``NotVisible``
    (the approval must look as if it did not exist); a viewer gets
    ``NotAllowed`` with a sentence naming the rule; an approval already decided,
    expired or withdrawn, or whose run has ended or is being cancelled, gets
    ``DecisionRefused`` (a 409). The run's state is read through the approval's
    own foreign key (``approval.run.is_active``): this app never imports the agent.
    """
    require_actor(user, approval.merchant_id, "approve or deny irreversible actions")
    reason = reason.strip()
    if len(reason) > 500:
        raise DecisionRefused("the reason is longer than 500 characters.")
    if approved_arguments is not None and not approve:
        raise DecisionRefused("a denial approves nothing, so it cannot carry changed arguments.")
    refusal = ""
    with transaction.atomic():
        locked = (
            Approval.objects.select_for_update(of=("self",))
            .select_related("run")
            .get(pk=approval.pk)
        )
        if locked.status == ApprovalStatus.WITHDRAWN:
            raise DecisionRefused(
                f"approval {locked.id} was withdrawn when its run was cancelled; it can no longer be decided."
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
        elif not locked.run.is_active:
            approval_expire(locked, why=f"its run ended ({locked.run.status})")
            state = (
                "is being cancelled"
                if locked.run.is_open
                else f"has already ended ({locked.run.status})"
            )
            refusal = f"run {locked.run_id} {state}; its approvals can no longer be decided."
        elif (refused_by_dbos := _workflow_ended_refusal(locked)) is not None:
            # Nothing is recorded: the reconciler closes the run (and its approvals) truthfully.
            raise DecisionRefused(refused_by_dbos)
        elif not approve and not reason:
            # Checked after the states above, so "already decided" still reads as such.
            raise ReasonRequired(DENY_REASON_REQUIRED)
        else:
            locked.status = ApprovalStatus.APPROVED if approve else ApprovalStatus.DENIED
            locked.decided_by = user
            locked.decided_at = now
            locked.reason = reason
            locked.channel = channel
            fields = ["status", "decided_by", "decided_at", "reason", "channel"]
            if approve:
                # What was approved, recorded once: the proposal, or the narrower call chosen.
                if approved_arguments is None:
                    approved_arguments, approved_hash = locked.arguments, locked.args_hash
                locked.approved_arguments = approved_arguments
                locked.approved_hash = approved_hash
                fields += ["approved_arguments", "approved_hash"]
            locked.save(update_fields=fields)
            changed = approve and locked.changed
            events.emit(
                "approval.decided",
                run_id=locked.run_id,
                approval_id=locked.id,
                merchant_id=locked.merchant_id,
                decision=locked.status,
                waited_s=round((now - locked.requested_at).total_seconds(), 3),
            )
            audit_record(
                merchant_id=locked.merchant_id,
                actor=user,
                action=(
                    "approval.approve_changed"
                    if changed
                    else "approval.approve"
                    if approve
                    else "approval.deny"
                ),
                run_id=locked.run_id,
                channel=channel,
                detail={
                    "approval": str(locked.id),
                    "tool": locked.tool,
                    "args_hash": locked.args_hash,
                    "preview": locked.preview,
                    "reason": reason,
                    **(
                        {
                            "proposed_arguments": locked.arguments,
                            "approved_arguments": locked.approved_arguments,
                            "approved_hash": locked.approved_hash,
                        }
                        if changed
                        else {}
                    ),
                },
            )
    if locked.run.is_active:
        _send_quietly(locked)  # an expiry is sent too: the waiting run wakes and ends at once
    if refusal:
        raise DecisionRefused(refusal)
    return locked


def _workflow_ended_refusal(locked: Approval) -> str | None:
    """Why no decision on ``locked`` can reach its run because DBOS says the run's workflow
    can no longer act, or ``None``.

    Our row says the run is active, but an operator may have cancelled the workflow with
    DBOS's own tools (``dbos workflow cancel``, a client) seconds ago: until the reconciler
    notices, a decision would be recorded and "approved" answered while nothing could act
    on it. So DBOS is asked, in this transaction (one indexed read of its table).
    """
    state = dbos_client.workflow_state(str(locked.run_id))
    if state is None or state.active:
        return None
    what = {
        "CANCELLED": "was cancelled in DBOS, outside Deskhand (e.g. `dbos workflow cancel`)",
        "SUCCESS": "has already ended in DBOS",
        "ERROR": "failed in DBOS" + (f" ({state.error})" if state.error else ""),
        "MAX_RECOVERY_ATTEMPTS_EXCEEDED": "crashed too many times and DBOS stopped retrying it",
    }.get(state.status, f"is {state.status} in DBOS")
    return (
        f"run {locked.run_id}'s workflow {what}, so nothing can act on a decision: approval "
        f"{locked.id} was not decided and nothing was recorded. The reconciler closes the run "
        "and its approvals within seconds."
    )


def approvals_decide_many(
    *, approvals: list[Approval], user: Any, approve: bool, reason: str = "", channel: str
) -> list[tuple[Approval, str]]:
    """Decide several approvals at once (the inbox's bulk action), each exactly as if alone.

    Each is its own decision: its own row lock and transaction, bound to its own hash,
    audited on its own, sent to its own run. One that can no longer be decided
    (decided meanwhile, expired, its run ended) does not stop the others; it comes
    back with the sentence that refused it. Returns ``(approval, refusal or "")``.
    """
    out: list[tuple[Approval, str]] = []
    for approval in approvals:
        try:
            out.append(
                (
                    approval_decide(
                        approval=approval,
                        user=user,
                        approve=approve,
                        reason=reason,
                        channel=channel,
                    ),
                    "",
                )
            )
        except DecisionRefused as exc:
            out.append((approval, str(exc)))
    return out


def approval_decide_by_policy(approval: Approval, *, policy: ApprovalPolicy, rule: int) -> None:
    """Record that the merchant's rule ``rule`` of ``policy`` approved this (just opened) call.

    Called by the gate in the transaction that opened the approval, after it matched the
    rule under the merchant's row lock. The row goes pending -> approved like any decision
    (the trigger checks the transition); nobody is sent anything, because the run reads
    the decision in its very next step, so it is marked delivered at once.
    """
    now = timezone.now()
    approval.status = ApprovalStatus.APPROVED
    approval.decided_by = None
    approval.decided_at = now
    approval.channel = Channel.POLICY
    approval.policy = policy
    approval.policy_rule = rule
    approval.approved_arguments = approval.arguments
    approval.approved_hash = approval.args_hash
    approval.delivered_at = now
    approval.save(
        update_fields=[
            "status",
            "decided_by",
            "decided_at",
            "channel",
            "policy",
            "policy_rule",
            "approved_arguments",
            "approved_hash",
            "delivered_at",
        ]
    )
    events.emit(
        "approval.decided",
        run_id=approval.run_id,
        approval_id=approval.id,
        merchant_id=approval.merchant_id,
        decision=approval.status,
        waited_s=0.0,
        policy_version=policy.version,
    )
    audit_record(
        merchant_id=approval.merchant_id,
        actor=None,
        action="approval.approve",
        run_id=approval.run_id,
        channel=Channel.POLICY,
        detail={
            "approval": str(approval.id),
            "tool": approval.tool,
            "args_hash": approval.args_hash,
            "preview": approval.preview,
            "policy_version": policy.version,
            "policy_rule": rule,
            "rule": (policy.rules[rule - 1] if 0 < rule <= len(policy.rules) else None),
        },
    )


def approval_expire(locked: Approval, *, why: str) -> None:
    """Expire a pending approval (the caller holds its row lock) and audit it as the system's act."""
    locked.status = ApprovalStatus.EXPIRED
    locked.save(update_fields=["status"])
    audit_record(
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


def approval_withdraw(locked: Approval, *, user: Any | None, channel: str, why: str) -> None:
    """Withdraw a pending approval because its run is being cancelled (the caller holds its row lock).

    Who and when are the decision columns (see ``Approval``): ``user`` is the
    person who cancelled, or ``None`` when the system did. Audited as their act.
    """
    locked.status = ApprovalStatus.WITHDRAWN
    locked.decided_by = user
    locked.decided_at = timezone.now()
    locked.channel = channel
    locked.save(update_fields=["status", "decided_by", "decided_at", "channel"])
    audit_record(
        merchant_id=locked.merchant_id,
        actor=user,
        action="approval.withdrawn",
        run_id=locked.run_id,
        channel=channel,
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
