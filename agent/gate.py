"""The approval gate as the run sees it: request, read the decision, resume.

Each function is one durable step. The run waits between ``gate_read`` calls
on the approval's DBOS topic, but a message only wakes it: authority is the
decision row in the database, re-read here and checked against this run, this
call and this exact argument hash before anything executes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.utils import timezone

from agent.models import Run, RunStatus, StepKind
from agent.steplog import log_step
from agent.tools import args_hash, get_tool
from approvals.models import Approval, ApprovalStatus


def gate_request(run_id: str, seq: int, call: dict[str, Any]) -> dict[str, Any]:
    """Open (or find) the approval for this call and park the run on it."""
    name, call_id, args = call["name"], call["id"], call["input"]
    tool = get_tool(name)
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("merchant").get(pk=run_id)
        now = timezone.now()
        approval, created = Approval.objects.get_or_create(
            run=run,
            tool_call_id=call_id,
            defaults={
                "merchant_id": run.merchant_id,
                "tool": name,
                "arguments": args,
                "args_hash": args_hash(name, args),
                "preview": tool.preview(args) if tool.preview else name,
                "requested_at": now,
                "expires_at": now + dt.timedelta(seconds=run.merchant.approval_ttl_seconds),
            },
        )
        if approval.status == ApprovalStatus.PENDING and run.status == RunStatus.RUNNING:
            run.status = RunStatus.AWAITING_APPROVAL
            run.save(update_fields=["status", "updated_at"])
        log_step(
            run_id=run_id, seq=seq, kind=StepKind.APPROVAL, tool=name, tool_call_id=call_id, risk=tool.risk.value,
            arguments=args,
            result={"event": "requested", "approval_id": str(approval.id), "preview": approval.preview,
                    "args_hash": approval.args_hash, "expires_at": approval.expires_at.isoformat()},
        )
    return {
        "approval_id": str(approval.id),
        "status": approval.status,
        "expires_at": approval.expires_at.isoformat(),
        "topic": approval.topic,
    }


def gate_read(approval_id: str) -> dict[str, Any]:
    """The decision on record (a message alone is never authority)."""
    a = Approval.objects.get(pk=approval_id)
    return {"status": a.status, "expires_at": a.expires_at.isoformat()}


def gate_resume(run_id: str, seq: int, call: dict[str, Any], approval_id: str, waited_seconds: float) -> dict[str, Any]:
    """Settle the wait: hand the waiting time back, then check the decision against the call.

    Returns one of ``{"verdict": "approved"}``, ``{"verdict": "denied", "reason"}``,
    ``{"verdict": "expired"}`` or ``{"verdict": "mismatch", "detail"}``.
    """
    name, call_id, args = call["name"], call["id"], call["input"]
    digest = args_hash(name, args)
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        approval = Approval.objects.select_for_update().get(pk=approval_id)
        run.waited_seconds += max(0.0, waited_seconds)
        if run.status == RunStatus.AWAITING_APPROVAL:
            run.status = RunStatus.RUNNING
        run.save(update_fields=["waited_seconds", "status", "updated_at"])
        if approval.status == ApprovalStatus.PENDING and approval.expires_at <= timezone.now():
            approval.status = ApprovalStatus.EXPIRED
            approval.save(update_fields=["status"])
        differences = []
        if str(approval.run_id) != run_id:
            differences.append(f"approval belongs to run {approval.run_id}")
        if approval.tool_call_id != call_id:
            differences.append(f"approval is for call {approval.tool_call_id}, not {call_id}")
        if approval.tool != name:
            differences.append(f"approval is for {approval.tool}, not {name}")
        if approval.args_hash != digest:
            differences.append(
                f"arguments changed after approval: approved {approval.args_hash[:12]}… "
                f"{approval.arguments}, now {digest[:12]}… {args}"
            )
        if approval.status == ApprovalStatus.APPROVED and differences:
            verdict: dict[str, Any] = {"verdict": "mismatch", "detail": "; ".join(differences)}
        elif approval.status == ApprovalStatus.APPROVED:
            verdict = {"verdict": "approved", "decided_by": approval.decided_by_id}
        elif approval.status == ApprovalStatus.DENIED:
            verdict = {"verdict": "denied", "reason": approval.reason}
        else:
            verdict = {"verdict": "expired"}
        log_step(
            run_id=run_id, seq=seq, kind=StepKind.APPROVAL, tool=name, tool_call_id=call_id, arguments=args,
            result={"event": verdict["verdict"], "approval_id": approval_id, "waited_seconds": round(waited_seconds, 3),
                    "decided_by": approval.decided_by.email if approval.decided_by else None,
                    "reason": approval.reason, **({"detail": verdict["detail"]} if "detail" in verdict else {})},
            ok=verdict["verdict"] in ("approved", "denied"),
        )
    return verdict


DENIAL_TEXT = (
    "A person declined this action. Reason: {reason}\n"
    "Do not retry the same action. Propose a different course (for example, escalate the ticket), "
    "or explain what you would need in order to proceed."
)
