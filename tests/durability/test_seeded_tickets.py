"""The six seeded tickets end where a sensible support lead would expect, with real DBOS.

The scripted provider decides from what the tools return, so changing the
facts in the database changes its decisions.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from agent.models import Run
from agent.models.ledger import LedgerEntry
from approvals.models import Approval
from deskhand.domain.desk.models import OrderItem, OutboundEmail, Refund, Ticket
from tests.durability.helpers import (
    assert_accounting_matches,
    assert_every_effect_was_approved,
    decide,
    pending_approval,
    start,
    user,
)
from tests.fixtures.dbos import wait_for_run, wait_parked, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)


def settle(run: Run) -> Run:
    return wait_for_run(
        str(run.id),
        lambda r: (
            r.status in ("succeeded", "failed", "exhausted", "cancelled")
            or (r.status == "awaiting_approval" and r.approvals.filter(status="pending").exists())
        ),
    )


def test_nw1_asks_to_refund_the_coffee_not_the_shipping_and_pays_once(dbos_executor):
    run = settle(start("NW-1", "owner@northwind.test"))
    approval = pending_approval(run)
    assert approval.tool == "issue_refund"
    assert approval.arguments["order_reference"] == "NW-1042"
    assert approval.arguments["amount_cents"] == 3800
    assert Refund.objects.count() == 0  # nothing moves before a person agrees

    decide(run, "agent@northwind.test", approve=True)
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded"
    assert [r.amount_cents for r in Refund.objects.all()] == [3800]
    assert "Refunded 38.00 USD against NW-1042" in run.summary
    assert_accounting_matches(run)
    assert_every_effect_was_approved()


def test_a_denied_refund_is_never_reported_as_refunded(dbos_executor):
    run = settle(start("NW-1", "owner@northwind.test"))
    decide(run, "owner@northwind.test", approve=False, reason="Photos first, please.")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded"
    assert Refund.objects.count() == 0
    assert "Refunded" not in run.summary
    assert "Declined by a person" in run.summary
    assert "Photos first, please." in run.summary
    assert Ticket.objects.get(reference="NW-1").status == "escalated"


@pytest.mark.parametrize(
    ("ref", "ticket_status"),
    [("NW-2", "pending"), ("NW-3", "escalated"), ("NW-4", "escalated"), ("LU-1", "pending")],
)
def test_tickets_that_need_no_money_move_none(dbos_executor, ref, ticket_status):
    run = wait_terminal(
        str(start(ref, "owner@northwind.test" if ref.startswith("NW") else "owner@lumen.test").id)
    )
    assert run.status == "succeeded", run.summary
    # The one approval is the reply to the customer, approved by the owner's rule (the seed's).
    assert [(a.tool, a.channel) for a in Approval.objects.filter(run=run)] == [
        ("reply_to_customer", "policy")
    ]
    assert Refund.objects.count() == 0
    assert [e.ticket.reference for e in OutboundEmail.objects.all()] == [ref]
    assert Ticket.objects.get(reference=ref).status == ticket_status
    assert "No money moved" in run.summary
    assert_accounting_matches(run)


def test_lu2_refunds_the_duplicate_and_emails_under_two_separate_approvals(dbos_executor):
    run = settle(start("LU-2", "owner@lumen.test"))
    first = pending_approval(run)
    assert (first.tool, first.arguments["order_reference"], first.arguments["amount_cents"]) == (
        "issue_refund",
        "LU-2311",
        17900,
    )
    decide(run, "agent@lumen.test")
    run = settle(run)
    second = pending_approval(run)
    assert second.tool == "send_customer_email" and second.pk != first.pk
    assert "LU-2311" in second.arguments["body"]
    assert OutboundEmail.objects.count() == 0  # approving the refund did not unlock the email
    decide(run, "agent@lumen.test")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded"
    assert [(r.order.reference, r.amount_cents) for r in Refund.objects.all()] == [
        ("LU-2311", 17900)
    ]
    assert OutboundEmail.objects.count() == 1
    assert LedgerEntry.objects.filter(run=run).count() == 2
    assert_every_effect_was_approved()


def test_changed_facts_change_the_decision_delivered_forty_days_ago_escalates(dbos_executor):
    Ticket.objects.get(reference="NW-1").customer.orders.filter(reference="NW-1042").update(
        delivered_at=timezone.now() - dt.timedelta(days=40),
        placed_at=timezone.now() - dt.timedelta(days=45),
    )
    run = wait_terminal(str(start("NW-1", "owner@northwind.test").id))
    assert run.status == "succeeded"
    assert [a.tool for a in Approval.objects.filter(run=run)] == ["reply_to_customer"]
    assert Refund.objects.count() == 0
    assert Ticket.objects.get(reference="NW-1").status == "escalated"


def test_changed_facts_change_the_decision_a_different_order_asks_a_different_amount(dbos_executor):
    item = OrderItem.objects.get(order__reference="NW-1042", sku__startswith="BEAN")
    item.quantity, item.unit_price_cents = 1, 2500
    item.save()
    item.order.total_cents = 3500
    item.order.save()
    run = settle(start("NW-1", "owner@northwind.test"))
    assert pending_approval(run).arguments["amount_cents"] == 2500


def test_step_log_totals_equal_the_runs_totals(dbos_executor):
    run = wait_terminal(str(start("NW-2", "agent@northwind.test").id))
    assert run.steps > 0 and run.cost_micros > 0 and run.input_tokens > 0
    assert_accounting_matches(run)
    fids = list(run.step_log.exclude(function_id=None).values_list("function_id", flat=True))
    assert fids == sorted(fids) and len(fids) == len(set(fids))  # each row names its own DBOS step


def test_no_effect_exists_without_a_matching_approval(dbos_executor):
    """Every effect has a decision by a person, or by a versioned rule a person wrote."""
    from agent.consent.policy import policy_save
    from deskhand.domain.desk.models import Merchant

    # Northwind's owner lets refunds up to 40.00 through, one a day; Lumen has no rules.
    policy_save(
        merchant=Merchant.objects.get(slug="northwind"),
        user=user("owner@northwind.test"),
        rules=[{"tool": "issue_refund", "max_amount_cents": 4000, "max_per_day": 1}],
        channel="cli",
    )
    for ref, email in (("NW-1", "owner@northwind.test"), ("LU-2", "owner@lumen.test")):
        run = settle(start(ref, email))
        while run.status == "awaiting_approval":
            decide(run, email)
            run = settle(run)
    assert Refund.objects.count() == 2
    decided = sorted(
        (e.approval.channel, e.approval.decided_by_id is None)
        for e in LedgerEntry.objects.filter(ok=True).select_related("approval")
    )
    assert ("policy", True) in decided and ("cli", False) in decided
    assert_every_effect_was_approved()


def test_the_parked_run_waits_until_a_person_decides(dbos_executor):
    run = wait_parked(str(start("NW-1", "owner@northwind.test").id))
    assert run.status == "awaiting_approval"
    assert Refund.objects.count() == 0
