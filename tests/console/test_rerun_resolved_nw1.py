"""Acceptance, end to end with real DBOS and the scripted provider, through the console:
re-running resolved NW-1 warns first; the refund it then proposes is labelled as the shipping
it is; denying it does not bring the same proposal back; and an escalated NW-3 run appears in
the attention queue, the navigation counter and the runs list's money column."""

from __future__ import annotations

import pytest

from agent.models import Run
from approvals.models import Approval
from deskhand.desk.models import Refund, Ticket
from tests.console.conftest import NW_OWNER, client_for
from tests.durability.helpers import decide, pending_approval, start
from tests.fixtures.dbos import wait_for_run, wait_parked, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)


def settle(run_id: str) -> Run:
    return wait_for_run(
        run_id,
        lambda r: (
            r.status in ("succeeded", "failed", "exhausted", "cancelled")
            or (r.status == "awaiting_approval" and r.approvals.filter(status="pending").exists())
        ),
    )


def _rerun_from_the_console(owner) -> Run:
    before = set(Run.objects.values_list("pk", flat=True))
    warning = owner.post("/tickets/NW-1/run")
    body = warning.content.decode()
    assert warning.status_code == 200 and 'id="rerun-warning"' in body
    assert "Refunded $38.00 against NW-1042" in body  # what was already done, shown first
    assert Run.objects.count() == len(before)  # the warning starts nothing
    started = owner.post("/tickets/NW-1/run", {"confirm": "rerun"})
    assert started.status_code == 302
    return Run.objects.exclude(pk__in=before).get()


def test_re_running_resolved_nw1_warns_labels_shipping_and_never_re_asks_a_denial(
    dbos_executor,
):
    first = wait_parked(str(start("NW-1", NW_OWNER).id))
    assert "goods only, not shipping" in pending_approval(first).arguments["reason"]
    decide(first, NW_OWNER)
    assert wait_terminal(str(first.id)).status == "succeeded"
    assert Ticket.objects.get(reference="NW-1").status == "resolved"

    owner = client_for(NW_OWNER)
    second = settle(str(_rerun_from_the_console(owner).pk))
    card = pending_approval(second)
    # Only the shipping is left on NW-1042, and the card says so.
    assert card.arguments["amount_cents"] == 1000
    assert card.arguments["reason"].startswith("[scripted provider] Shipping only, not goods")
    assert "goods only" not in card.arguments["reason"]

    # Deny it on the web: without a reason the form comes back; with one, it is recorded.
    assert owner.post(f"/approvals/{card.pk}/decide", {"decision": "deny"}).status_code == 400
    response = owner.post(
        f"/approvals/{card.pk}/decide",
        {"decision": "deny", "reason": "The goods were refunded; shipping stays."},
    )
    assert response.status_code == 302
    second = wait_terminal(str(second.id))
    assert second.status == "succeeded", second.summary
    # Not asked again in the run (its reply to the customer is approved by the owner's rule).
    assert Approval.objects.filter(run=second, tool="issue_refund").count() == 1
    assert Ticket.objects.get(reference="NW-1").status == "resolved"  # a decline leaves it so

    third = settle(str(_rerun_from_the_console(owner).pk))
    assert third.status == "succeeded", third.summary
    # The denied refund is not proposed (only its reply to the customer is, by the owner's rule).
    assert not Approval.objects.filter(run=third, tool="issue_refund").exists()
    assert "already declined this in an earlier run" in third.summary
    assert [r.amount_cents for r in Refund.objects.all()] == [3800]


def test_an_escalated_nw3_run_shows_in_the_queue_the_counter_and_the_money_column(
    dbos_executor,
):
    run = wait_terminal(str(start("NW-3", NW_OWNER).id))
    assert run.status == "succeeded"
    assert Ticket.objects.get(reference="NW-3").status == "escalated"

    owner = client_for(NW_OWNER)
    attention = owner.get("/attention/")
    body = attention.content.decode()
    escalated = [i for i in attention.context["queue"] if i.kind == "escalated"]
    assert [i.ticket for i in escalated] == ["NW-3"] and escalated[0].money == "$156.00"
    assert 'aria-label="1 waiting">1</span>' in body  # the navigation counter

    runs = owner.get("/runs/").content.decode()
    row = runs[runs.index(f'id="run-{run.pk}"') :].split("</tr>", 1)[0]
    assert "Escalated" in row or "escalated" in row  # the ticket status, beside the run's
    assert "succeeded" in row.lower()
    assert "$156.00 at stake" in row
