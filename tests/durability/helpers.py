"""Helpers for tests that drive whole runs through real DBOS."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Sum

from agent.models import Run, Step
from agent.models.ledger import LedgerEntry
from agent.run.services import run_start
from approvals.models import Approval, ApprovalStatus, Channel
from approvals.services import approval_decide
from deskhand.domain.desk.models import Refund, Ticket


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
        i=Sum("input_tokens"),
        o=Sum("output_tokens"),
        c=Sum("cost_micros"),
        cr=Sum("cache_read_tokens"),
        cw=Sum("cache_write_tokens"),
    )
    assert run.steps == Step.objects.filter(run=run).count()
    assert run.input_tokens == (totals["i"] or 0)
    assert run.output_tokens == (totals["o"] or 0)
    assert run.cost_micros == (totals["c"] or 0)
    assert run.cache_read_tokens == (totals["cr"] or 0)
    assert run.cache_write_tokens == (totals["cw"] or 0)


def assert_every_effect_was_approved() -> None:
    """No irreversible effect exists without a recorded decision — by a person, or by a
    versioned merchant rule a person wrote — that approved exactly the call performed.

    The effect's hash is the approved call's: the proposal, or the narrower call a person
    chose (``approved_hash``). A person's decision names the person; a rule's decision
    names its policy version and rule, and no person.
    """
    for entry in LedgerEntry.objects.filter(ok=True).select_related("approval__policy"):
        approval = entry.approval
        assert approval is not None, entry.key
        assert approval.status == ApprovalStatus.APPROVED
        assert entry.args_hash == (approval.approved_hash or approval.args_hash), entry.key
        if approval.channel == Channel.POLICY:
            assert approval.policy is not None and approval.policy_rule is not None, entry.key
            assert approval.decided_by_id is None
            assert approval.policy.author, entry.key  # a person wrote the rule
        else:
            # A person decided (named even after their account is deleted).
            assert approval.decider, entry.key
    for refund in Refund.objects.all():
        assert refund.ledger_entry is not None and refund.ledger_entry.approval is not None
