"""An approval holds for the facts the person saw: the order's refunded total and what is left.

Staff refund $20.00 in the store's own admin (a refund row no run made) while a person in
Deskhand decides on the keyless agent's $38.00 proposal. Nothing is paid on that approval;
the person is asked again with the new total beside the proposal; approving that pays once.
Driven through the real workflow (in-process DBOS) with the keyless policy provider.
"""

from __future__ import annotations

import json

import pytest
from django.db import IntegrityError, transaction
from django.test import Client

from agent.ledger.effect import execute_irreversible
from agent.models import Run, Step
from agent.models.ledger import LedgerEntry
from approvals.models import Approval, ApprovalPolicy, ApprovalStatus
from approvals.services import approval_decide
from deskhand.domain.apikeys.services import key_create
from deskhand.domain.desk.models import Order, OrderItem, Refund, TicketMessage
from tests.consent.conftest import bare_run, gate_call
from tests.console.conftest import client_for
from tests.durability.helpers import (
    decide,
    pending_approval,
    start,
    user,
)
from tests.fixtures.dbos import wait_for_run

pytestmark = pytest.mark.django_db(transaction=True)

TERMINAL = ("succeeded", "failed", "exhausted", "cancelled")
OWNER = "owner@northwind.test"


def _order(total_cents: int) -> Order:
    """NW-1042 (two $19.00 bags, $10.00 shipping) made to total ``total_cents`` with more
    shipping: the goods the policy refunds stay $38.00."""
    order = Order.objects.get(reference="NW-1042")
    OrderItem.objects.create(
        order=order,
        sku="SHIP-EXP",
        description="Express shipping",
        quantity=1,
        unit_price_cents=total_cents - order.total_cents,
    )
    order.total_cents = total_cents
    order.save(update_fields=["total_cents"])
    return order


def _refund_in_the_stores_admin(order: Order, cents: int) -> Refund:
    """A refund staff made outside Deskhand: no run, no ledger entry (what reconciliation
    reports as a refund Deskhand did not make)."""
    return Refund.objects.create(
        merchant=order.merchant,
        order=order,
        amount_cents=cents,
        currency=order.currency,
        reason="refunded by staff in the store's admin",
    )


def _asked_again(run: Run, first: Approval) -> Run:
    return wait_for_run(
        str(run.id),
        lambda r: (
            r.status in TERMINAL
            or r.approvals.filter(status="pending", tool="issue_refund")
            .exclude(pk=first.pk)
            .exists()
        ),
        60.0,
    )


def _until_refunded(run: Run) -> Run:
    """Until the run ends, approving the reply that follows the refund when it is asked."""

    def settled(r: Run) -> bool:
        if r.status in TERMINAL:
            return True
        for a in r.approvals.filter(status="pending").exclude(tool="issue_refund"):
            approval_decide(approval=a, user=user(OWNER), approve=True, reason="", channel="cli")
        return False

    return wait_for_run(str(run.id), settled, 60.0)


@pytest.fixture(autouse=True)
def _no_rules(request):
    """A person decides every call (the seed's rule approving replies is lifted), so the test
    sees each request the run makes."""
    if "tseeded" in request.fixturenames or "dbos_executor" in request.fixturenames:
        request.getfixturevalue("tseeded")
        ApprovalPolicy.objects.all().delete()


def test_a_refund_made_outside_between_proposal_and_approval_pays_nothing_and_asks_again(
    dbos_executor,
):
    order = _order(10000)
    run = start("NW-1", OWNER)
    run = wait_for_run(str(run.id), lambda r: r.status in (*TERMINAL, "awaiting_approval"), 60.0)
    first = pending_approval(run)
    assert first.arguments["amount_cents"] == 3800
    assert first.facts == {
        "order_reference": "NW-1042",
        "currency": "USD",
        "total_cents": 10000,
        "refunded_cents": 0,
        "remaining_cents": 10000,
    }
    page = client_for(OWNER).get("/approvals/").content.decode()
    assert "Order total $100.00 · $0.00 already refunded · $100.00 left" in page

    _refund_in_the_stores_admin(order, 2000)
    page = client_for(OWNER).get("/approvals/").content.decode()
    # The card says what approving would do now, before anyone approves.
    assert "$20.00 refunded now: approving pays nothing" in page
    decide(run, OWNER)
    run = _asked_again(run, first)

    # Nothing was paid on that approval: no refund by the run, no ledger claim.
    assert not Refund.objects.filter(run=run).exists()
    assert not LedgerEntry.objects.filter(run=run, tool="issue_refund").exists()
    refused = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    record = json.loads(refused.result["text"])
    assert not refused.ok and record["facts_changed"] is True
    assert (record["refunded_cents_when_approved"], record["refunded_cents"]) == (0, 2000)
    # The ticket says why, in words.
    note = TicketMessage.objects.get(ticket=run.ticket, kind="note", run=run)
    assert note.body == (
        "The approved refund of $38.00 against NW-1042 was not paid: the order's refunded "
        "total changed after the approval was asked ($0.00 then, $20.00 now; $80.00 left). "
        "The agent asks again with the new total."
    )
    # Asked again: a new request with its own call and hash, the new total beside it.
    again = Approval.objects.get(run=run, status="pending", tool="issue_refund")
    assert again.pk != first.pk and again.tool_call_id != first.tool_call_id
    assert again.arguments["amount_cents"] == 3800  # it still fits the $80.00 left
    assert again.facts["refunded_cents"] == 2000 and again.facts["remaining_cents"] == 8000
    page = client_for(OWNER).get("/approvals/").content.decode()
    assert "Order total $100.00 · $20.00 already refunded · $80.00 left" in page
    # An API client deciding it reads the same facts.
    _, token = key_create(
        merchant=run.merchant, user=user(OWNER), name="a help desk", scopes=["read"]
    )
    asked = Client().get(f"/api/v1/approvals/{again.pk}", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert asked.json()["asked_facts"] == again.facts
    run_page = client_for(OWNER).get(f"/runs/{run.pk}/").content.decode()
    assert "was not paid: the order&#x27;s refunded total changed" in run_page
    # Each request's step keeps the order as its card showed it.
    assert "Order total $100.00 · $0.00 already refunded · $100.00 left" in run_page
    assert "Order total $100.00 · $20.00 already refunded · $80.00 left" in run_page

    decide(run, OWNER)
    run = _until_refunded(run)
    assert run.status == "succeeded", run.summary
    [paid] = Refund.objects.filter(run=run)
    assert paid.amount_cents == 3800
    assert sum(r.amount_cents for r in Refund.objects.filter(order=order)) == 5800
    [claim] = LedgerEntry.objects.filter(run=run, tool="issue_refund")
    assert claim.approval_id == again.pk
    first.refresh_from_db()
    assert first.status == ApprovalStatus.APPROVED  # decided, and still nothing paid on it
    assert "Approved but not performed: Refund 38.00 USD against order NW-1042" in run.summary


def test_on_a_50_dollar_order_the_new_proposal_is_at_most_what_is_left(dbos_executor):
    order = _order(5000)
    run = start("NW-1", OWNER)
    run = wait_for_run(str(run.id), lambda r: r.status in (*TERMINAL, "awaiting_approval"), 60.0)
    first = pending_approval(run)
    assert first.arguments["amount_cents"] == 3800

    _refund_in_the_stores_admin(order, 2000)
    decide(run, OWNER)
    run = _asked_again(run, first)

    assert not Refund.objects.filter(run=run).exists()
    again = Approval.objects.get(run=run, status="pending", tool="issue_refund")
    assert again.arguments["amount_cents"] == 3000
    assert again.facts["remaining_cents"] == 3000
    refused = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert "propose at most $30.00" in json.loads(refused.result["text"])["message"]

    decide(run, OWNER)
    run = _until_refunded(run)
    assert [r.amount_cents for r in Refund.objects.filter(run=run)] == [3000]
    assert sum(r.amount_cents for r in Refund.objects.filter(order=order)) == 5000


def test_the_facts_check_and_the_claim_are_one_transaction_so_a_rerun_never_pays(tseeded):
    """The effect step re-executed (a crash after its commit, before its checkpoint) answers
    the same refusal, writes no second note and claims nothing."""
    from agent.consent.gate import gate_request

    run = bare_run()
    call = gate_call(3800)
    approval = Approval.objects.get(pk=gate_request(str(run.id), 1, call).approval_id)
    _refund_in_the_stores_admin(Order.objects.get(reference="NW-1042"), 500)
    Approval.objects.filter(pk=approval.pk).update(
        status="approved", approved_arguments=approval.arguments, approved_hash=approval.args_hash,
        channel="cli",
    )  # fmt: skip
    Run.objects.filter(pk=run.pk).update(status="running")
    first = execute_irreversible(str(run.id), 2, call, str(approval.id))
    second = execute_irreversible(str(run.id), 2, call, str(approval.id))
    assert not first.ok and first.text == second.text
    assert json.loads(first.text)["refunded_cents"] == 500
    assert LedgerEntry.objects.count() == 0 and not Refund.objects.filter(run=run).exists()
    assert TicketMessage.objects.filter(run=run, kind="note").count() == 1


def test_the_facts_a_person_was_shown_never_change(tseeded):
    from agent.consent.gate import gate_request

    run = bare_run()
    approval = Approval.objects.get(pk=gate_request(str(run.id), 1, gate_call(3800)).approval_id)
    assert approval.facts["refunded_cents"] == 0
    with pytest.raises(IntegrityError, match="never changes"), transaction.atomic():
        Approval.objects.filter(pk=approval.pk).update(
            facts={**approval.facts, "refunded_cents": 2000}
        )
