"""The run's own lifecycle steps: begin, finish, fail — each one durable step of the workflow.

They are plain synchronous Django code (``deskhand/engine/workflow.py`` runs them as DBOS steps);
closing a run goes through ``agent.run.services.run_close``, the one way a run ends, so a
finish, a failure and a cancellation all leave the same truthful shape.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from agent.conversation import fence
from agent.models import TERMINAL_STATUSES, Run, RunStatus, StopReason
from agent.models.payloads import StepKind
from agent.run.selectors import effects_summary
from agent.run.services import next_seq, run_close, run_close_pending_approvals, run_mark_failed
from agent.steps import Begun, EndPayload, Finished
from approvals.audit import audit_record
from approvals.models import Channel
from deskhand.domain.desk.models import Priority, TicketStatus
from deskhand.domain.desk.rows import row_by_pk
from deskhand.domain.desk.services import ticket_set_priority, ticket_set_status
from deskhand.infra import events


def run_begin(run_id: str) -> Begun:
    """First step of a workflow: mark the run running and return what the loop needs."""
    with transaction.atomic():
        # The run's row alone is locked: the ticket is read for its reference.
        run = row_by_pk(Run, run_id, related=("ticket",), lock=True)
        if run.status == RunStatus.QUEUED:
            run.status = RunStatus.RUNNING
            run.started_at = run.started_at or timezone.now()
            run.save(update_fields=["status", "started_at", "updated_at"])
            events.emit(
                "run.started",
                run_id=run_id,
                merchant_id=run.merchant_id,
                app_version=run.application_version,
            )
        return Begun(
            status=run.status,
            prompt=run.prompt,
            ticket=run.ticket.reference,
            fence_token=fence.token_for(str(run.root().id)),
            next_seq=next_seq(run_id),
        )


def run_finish(
    run_id: str, seq: int, status: str, reason: str, detail: str, model_text: str
) -> Finished:
    """End a run with a truthful summary. Never overwrites a run already closed or being cancelled.

    A run that is ``cancelling`` is finished by the cancel (or the reconciler), not here:
    this step writes nothing for it, so its step-log line cannot take the cancel's number.
    """
    with transaction.atomic():
        run = row_by_pk(Run, run_id, lock=True)
        if run.status in TERMINAL_STATUSES or run.status == RunStatus.CANCELLING:
            return Finished(run.status, run.stop_reason)
        run_close_pending_approvals(run, ending=status)
        # The ledger's facts first; the model's own words are labelled as such, because
        # a model can claim anything ("Refunded") and only the ledger knows.
        parts = [f"Effects:\n{effects_summary(run_id)}"]
        if model_text.strip():
            parts.append(f"Agent's account:\n{model_text.strip()}")
        if status != RunStatus.SUCCEEDED:
            parts.insert(0, f"Stopped: {reason}" + (f" — {detail}" if detail else "") + ".")
        if reason == StopReason.MODEL_REFUSAL:
            parts.append(_escalate_to_a_person(run))
        summary = "\n\n".join(parts)
        run_close(
            run,
            status=status,
            reason=reason,
            detail=detail,
            summary=summary,
            seq=seq,
            kind=StepKind.FINAL if status == RunStatus.SUCCEEDED else StepKind.BOUND,
            result=EndPayload(status=status, stop_reason=reason, detail=detail, summary=summary),
        )
    return Finished(status, reason)


def _escalate_to_a_person(run: Run) -> str:
    """A refusal tells somebody: the ticket goes to a person (escalated, high), audited."""
    ticket = run.ticket
    was = {"status": ticket.status, "priority": ticket.priority}
    ticket_set_status(ticket=ticket, status=TicketStatus.ESCALATED)
    if ticket.priority in (Priority.LOW, Priority.NORMAL):
        ticket_set_priority(ticket=ticket, priority=Priority.HIGH)
    audit_record(
        merchant_id=run.merchant_id,
        actor=None,
        action="ticket.escalated",
        run_id=run.pk,
        channel=Channel.SYSTEM,
        detail={"ticket": ticket.reference, "why": "the model refused to continue", "was": was},
    )
    return f"Escalated: ticket {ticket.reference} was handed to a person because the model refused."


def run_fail(run_id: str, detail: str) -> bool:
    """The workflow's own failure record (a step, so it is durable), before it re-raises."""
    return run_mark_failed(run_id=run_id, reason=StopReason.ERROR, detail=detail)
