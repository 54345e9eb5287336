"""Helpers for tests that drive whole runs through real DBOS."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Sum

from agent.models import LedgerEntry, Run, Step
from agent.runs import run_start
from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from deskhand.desk.models import Refund, Ticket


def user(email: str):
    return get_user_model().objects.get(email=email)


def start(ticket_ref: str, email: str) -> Run:
    ticket = Ticket.objects.get(reference=ticket_ref)
    return run_start(ticket=ticket, user=user(email), channel="cli")


def pending_approval(run: Run) -> Approval:
    return Approval.objects.get(run=run, status=ApprovalStatus.PENDING)


def decide(run: Run, email: str, approve: bool = True, reason: str = "") -> Approval:
    return approval_decide(
        approval=pending_approval(run),
        user=user(email),
        approve=approve,
        reason=reason,
        channel="cli",
    )


def assert_accounting_matches(run: Run) -> None:
    run.refresh_from_db()
    totals = Step.objects.filter(run=run).aggregate(
        i=Sum("input_tokens"), o=Sum("output_tokens"), c=Sum("cost_micros")
    )
    assert run.steps == Step.objects.filter(run=run).count()
    assert run.input_tokens == (totals["i"] or 0)
    assert run.output_tokens == (totals["o"] or 0)
    assert run.cost_micros == (totals["c"] or 0)


def assert_every_effect_was_approved() -> None:
    """No irreversible effect exists without a recorded approval whose hash matches it."""
    for entry in LedgerEntry.objects.filter(ok=True):
        assert entry.approval is not None, entry.key
        assert entry.approval.status == ApprovalStatus.APPROVED
        assert entry.approval.args_hash == entry.args_hash
    for refund in Refund.objects.all():
        assert refund.ledger_entry is not None and refund.ledger_entry.approval is not None
