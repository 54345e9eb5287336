"""Run lifecycle services: start, begin, finish, fail, cancel, and the outcome.

Starting a run is two writes to two systems — the Run row, then the DBOS
enqueue — so the gap between them is handled explicitly: an enqueue that
raises ends the run ``failed``/``enqueue_failed`` at once, and a web process
that dies in between leaves a ``queued`` run with no workflow, which the
reconciler fails as ``enqueue_lost``. No run is ever stuck ``queued``.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from agent import fence
from agent.models import (
    OPEN_STATUSES,
    TERMINAL_STATUSES,
    LedgerEntry,
    Run,
    RunStatus,
    Step,
    StepKind,
    StopReason,
)
from agent.prompts import opening_prompt
from agent.providers import default_provider
from agent.steplog import log_step
from approvals.models import Approval, ApprovalStatus, AuditEvent, Channel
from deskhand.desk.models import Ticket
from deskhand.desk.money import format_cents
from deskhand.desk.permissions import require_actor

log = logging.getLogger(__name__)

WORKFLOW_NAME = "deskhand.run"


class RunRefused(Exception):
    """A run could not be started, cancelled or steered; the message says why."""


def bounds_snapshot(merchant: Any) -> dict[str, Any]:
    """The bounds a new run carries for life: a settings change never widens a run in flight,
    and the deadline is stamped once, so a crash-looping run never earns a fresh clock."""
    bounds = settings.DESKHAND_BOUNDS
    return {
        "application_version": settings.DESKHAND_APP_VERSION,
        "max_steps": bounds["max_steps"],
        "max_tokens": bounds["max_tokens"],
        "max_spend_micros": bounds["max_spend_micros"],
        "deadline_seconds": bounds["deadline_seconds"],
        "max_refund_cents": min(bounds["max_refund_cents"], merchant.run_refund_ceiling_cents),
        "loop_threshold": bounds["loop_threshold"],
        "deadline_at": timezone.now() + dt.timedelta(seconds=bounds["deadline_seconds"]),
    }


def run_create(
    *,
    ticket: Ticket,
    user: Any,
    channel: str = Channel.CLI,
    provider: tuple[str, str] | None = None,
) -> Run:
    """Create the Run row (the one open run per ticket is enforced by a partial unique index)."""
    require_actor(user, ticket.merchant_id, "start runs")
    name, model = provider or default_provider()
    try:
        with transaction.atomic():
            run = Run.objects.create(
                merchant_id=ticket.merchant_id,
                ticket=ticket,
                started_by=user,
                provider=name,
                model=model,
                prompt=opening_prompt(ticket.reference),
                **bounds_snapshot(ticket.merchant),
            )
            AuditEvent.objects.create(
                merchant_id=ticket.merchant_id,
                actor=user,
                action="run.start",
                run=run,
                channel=channel,
                detail={"ticket": ticket.reference, "provider": name, "model": model},
            )
    except IntegrityError:
        open_run = Run.objects.filter(ticket=ticket, status__in=OPEN_STATUSES).first()
        raise RunRefused(
            f"ticket {ticket.reference} already has an open run"
            + (f" ({open_run.id}, {open_run.status})" if open_run else "")
            + "; cancel it or wait for it to finish."
        ) from None
    return run


def run_enqueue(run: Run) -> Run:
    """Hand the run to DBOS. The run id is the workflow id; the merchant is the partition key."""
    from deskhand.dbos_setup import client

    try:
        client().enqueue(
            {
                "workflow_name": WORKFLOW_NAME,
                "queue_name": settings.DESKHAND_QUEUE,
                "workflow_id": str(run.id),
                "queue_partition_key": run.merchant.slug,
                "app_version": settings.DESKHAND_APP_VERSION,
            }
        )
    except Exception as exc:  # any failure to enqueue must leave a truthful, terminal run
        log.exception("enqueue failed for run %s", run.id)
        run_mark_failed(
            run_id=str(run.id),
            reason=StopReason.ENQUEUE_FAILED,
            detail=f"could not enqueue: {type(exc).__name__}: {exc}",
        )
        run.refresh_from_db()
    return run


def run_start(
    *,
    ticket: Ticket,
    user: Any,
    channel: str = Channel.CLI,
    provider: tuple[str, str] | None = None,
) -> Run:
    return run_enqueue(run_create(ticket=ticket, user=user, channel=channel, provider=provider))


# --- Steps the workflow runs --------------------------------------------------


def run_begin(run_id: str) -> dict[str, Any]:
    """First step of a workflow: mark the run running and return what the loop needs."""
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("ticket").get(pk=run_id)
        if run.status == RunStatus.QUEUED:
            run.status = RunStatus.RUNNING
            run.started_at = run.started_at or timezone.now()
            run.save(update_fields=["status", "started_at", "updated_at"])
        return {
            "status": run.status,
            "prompt": run.prompt,
            "ticket": run.ticket.reference,
            "fence_token": fence.token_for(str(run.root().id)),
            "next_seq": (
                Step.objects.filter(run_id=run_id)
                .order_by("-seq")
                .values_list("seq", flat=True)
                .first()
                or 0
            )
            + 1,
        }


def effects_summary(run_id: str) -> str:
    """What this run actually did to the world, from the ledger and the approvals — never from the model."""
    lines: list[str] = []
    for entry in LedgerEntry.objects.filter(run_id=run_id, ok=True).order_by("created_at"):
        if entry.tool == "issue_refund":
            lines.append(
                f"Refunded {format_cents(entry.arguments['amount_cents'])} against {entry.arguments['order_reference']}."
            )
        elif entry.tool == "send_customer_email":
            lines.append(
                f"Emailed the customer on {entry.arguments['reference']}: '{entry.arguments['subject']}'."
            )
        elif entry.tool == "cancel_order":
            lines.append(f"Cancelled order {entry.arguments['order_reference']}.")
    if not lines:
        lines.append("No money moved, no email was sent and no order was cancelled.")
    for a in (
        Approval.objects.filter(run_id=run_id)
        .exclude(status=ApprovalStatus.APPROVED)
        .order_by("requested_at")
    ):
        verb = {
            "denied": "Declined by a person",
            "expired": "Expired without a decision",
            "pending": "Never decided",
        }[a.status]
        what = a.preview.splitlines()[0].rstrip(".")
        lines.append(
            f"{verb}: {what}" + (f" (reason: {a.reason.rstrip('.')})" if a.reason else "") + "."
        )
    return "\n".join(lines)


def _next_seq(run_id: str) -> int:
    last = Step.objects.filter(run_id=run_id).order_by("-seq").values_list("seq", flat=True).first()
    return (last or 0) + 1


def _close(
    run: Run,
    *,
    status: str,
    reason: str,
    detail: str,
    summary: str,
    seq: int,
    kind: str,
    result: dict[str, Any],
) -> None:
    """Make a locked, open run terminal: status, summary, expired approvals, a step-log line."""
    run.status, run.stop_reason, run.stop_detail = status, reason, detail[:2000]
    run.summary = summary
    run.finished_at = timezone.now()
    run.save(
        update_fields=[
            "status",
            "stop_reason",
            "stop_detail",
            "summary",
            "finished_at",
            "updated_at",
        ]
    )
    Approval.objects.filter(run_id=run.pk, status=ApprovalStatus.PENDING).update(
        status=ApprovalStatus.EXPIRED
    )
    log_step(
        run_id=str(run.pk), seq=seq, kind=kind, result=result, ok=status == RunStatus.SUCCEEDED
    )


def run_finish(
    run_id: str, seq: int, status: str, reason: str, detail: str, model_text: str
) -> dict[str, Any]:
    """End a run with a truthful summary. Never overwrites a run already terminal (e.g. cancelled)."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status in TERMINAL_STATUSES:
            return {"status": run.status, "stop_reason": run.stop_reason}
        # The ledger's facts first; the model's own words are labelled as such, because
        # a model can claim anything ("Refunded") and only the ledger knows.
        parts = [f"Effects:\n{effects_summary(run_id)}"]
        if model_text.strip():
            parts.append(f"Agent's account:\n{model_text.strip()}")
        if status != RunStatus.SUCCEEDED:
            parts.insert(0, f"Stopped: {reason}" + (f" — {detail}" if detail else "") + ".")
        summary = "\n\n".join(parts)
        _close(
            run,
            status=status,
            reason=reason,
            detail=detail,
            summary=summary,
            seq=seq,
            kind=StepKind.FINAL if status == RunStatus.SUCCEEDED else StepKind.BOUND,
            result={"status": status, "stop_reason": reason, "detail": detail, "summary": summary},
        )
    return {"status": status, "stop_reason": reason}


def run_mark_failed(*, run_id: str, reason: str, detail: str) -> bool:
    """Fail a run that is not yet terminal (durable record of a failure). Returns whether it changed."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status in TERMINAL_STATUSES:
            return False
        _close(
            run,
            status=RunStatus.FAILED,
            reason=reason,
            detail=detail,
            summary=f"Failed: {reason} — {detail[:500]}\n\nEffects:\n{effects_summary(run_id)}",
            seq=_next_seq(run_id),
            kind=StepKind.ERROR,
            result={"stop_reason": reason, "detail": detail[:2000]},
        )
    return True


def run_mark_cancelled(*, run_id: str, by: str) -> bool:
    """Record a cancellation on a run that is not yet terminal. Returns whether it changed."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status in TERMINAL_STATUSES:
            return False
        _close(
            run,
            status=RunStatus.CANCELLED,
            reason=StopReason.CANCELLED,
            detail=f"cancelled by {by}",
            summary=f"Cancelled by {by}.\n\nEffects:\n{effects_summary(run_id)}",
            seq=_next_seq(run_id),
            kind=StepKind.BOUND,
            result={"status": "cancelled", "by": by},
        )
    return True


def run_fail(run_id: str, detail: str) -> bool:
    """The workflow's own failure record (a step, so it is durable), before it re-raises."""
    return run_mark_failed(run_id=run_id, reason=StopReason.ERROR, detail=detail)


def run_cancel(*, run: Run, user: Any, channel: str = Channel.CLI) -> Run:
    """Cancel: expire the run's approvals first, then cancel the workflow, then record the truth."""
    from deskhand.dbos_setup import client

    require_actor(user, run.merchant_id, "cancel runs")
    if run.status in TERMINAL_STATUSES:
        raise RunRefused(f"run {run.id} is already {run.status}; there is nothing to cancel.")
    Approval.objects.filter(run=run, status=ApprovalStatus.PENDING).update(
        status=ApprovalStatus.EXPIRED
    )
    try:
        client().cancel_workflow(str(run.id))
    except Exception as exc:  # a run whose workflow never existed is still cancellable
        log.warning("cancel_workflow(%s): %s", run.id, exc)
    run_mark_cancelled(run_id=str(run.pk), by=str(user.email or user))
    AuditEvent.objects.create(
        merchant_id=run.merchant_id, actor=user, action="run.cancel", run=run, channel=channel
    )
    run.refresh_from_db()
    return run


# --- Reading a run's outcome ------------------------------------------------------


def run_outcome(run: Run) -> dict[str, Any]:
    """The outcome as the CLI prints it (``--json``) and the console shows it."""
    pending = run.approvals.filter(status=ApprovalStatus.PENDING).order_by("requested_at").first()
    refunds = run.refunds.aggregate(t=Sum("amount_cents"))["t"] or 0
    return {
        "run_id": str(run.id),
        "ticket": run.ticket.reference,
        "status": run.status,
        "stop_reason": run.stop_reason or None,
        "stop_detail": run.stop_detail or None,
        "steps": run.steps,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "cost_micros": run.cost_micros,
        "refunds_cents": int(refunds),
        "pending_approval_id": str(pending.id) if pending else None,
        "pending_approval_preview": pending.preview if pending else None,
        "provider": run.provider,
        "model": run.model,
        "summary": run.summary,
    }
