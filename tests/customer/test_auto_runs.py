"""A customer's message on a ticket whose run has finished opens a new run, as the merchant
allows (``Merchant.auto_runs``) and within its daily budget; the new run sees the thread and
the ledger's facts, so what was refunded is never refunded again."""

from __future__ import annotations

import pytest

from agent.customer.route import customer_line_route, line_run_id
from agent.models import Run
from approvals.models import Approval, AuditEvent
from deskhand.domain.desk.models import Merchant, Refund, Ticket, TicketMessage
from tests.durability.helpers import decide, start
from tests.fixtures.dbos import wait_for_run, wait_terminal
from tests.mail.conftest import DANA, mail
from tests.mail.test_smtp import send

pytestmark = pytest.mark.django_db(transaction=True)


def parked_or_done(run: Run) -> Run:
    return wait_for_run(
        str(run.id),
        lambda r: (
            r.status in ("succeeded", "failed", "exhausted", "cancelled")
            or (r.status == "awaiting_approval" and r.approvals.filter(status="pending").exists())
        ),
    )


def dana_writes(port: int, message_id: str, body: str = "Thanks! When will I see it?") -> None:
    send(
        port,
        mail(
            sender=f"Dana Whitfield <{DANA}>",
            subject="Re: Beans arrived stale [#NW-1]",
            message_id=message_id,
            body=body,
        ),
        sender=DANA,
    )


def finished_nw1() -> Run:
    run = parked_or_done(start("NW-1", "owner@northwind.test"))
    decide(run, "agent@northwind.test")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded" and Refund.objects.count() == 1
    return run


def test_a_reply_to_a_finished_run_opens_a_new_run_that_never_refunds_again(
    dbos_executor, receiver
):
    assert Merchant.objects.get(slug="northwind").auto_runs == "every_message"  # the seed's
    first = finished_nw1()

    dana_writes(receiver, "<dana-thanks@mail.example.com>")
    line = TicketMessage.objects.get(message_id="<dana-thanks@mail.example.com>")
    runs = Run.objects.filter(ticket__reference="NW-1").order_by("created_at")
    assert runs.count() == 2
    second = runs.last()
    assert second.pk != first.pk and second.started_by is None
    # Its id derives from the line, and the line says what it did, written as it did it.
    line.refresh_from_db()
    assert second.pk == line_run_id(line.pk) and line.routed_run_id == second.pk
    assert line.routing == "opened" and line.routed_at is not None
    started = AuditEvent.objects.get(run=second, action="run.start")
    assert started.actor is None and started.detail["customer_message"] == line.pk

    second = parked_or_done(second)
    # It read the thread and the order: the 38.00 already refunded is not asked for again.
    asked = [a.arguments for a in Approval.objects.filter(run=second, tool="issue_refund")]
    assert all(a["amount_cents"] != 3800 for a in asked), asked
    if second.status == "awaiting_approval":  # the shipping, which a person may decline
        decide(second, "agent@northwind.test", approve=False, reason="Shipping is not due.")
        second = wait_terminal(str(second.id))
    assert second.status == "succeeded", second.summary
    assert [r.amount_cents for r in Refund.objects.all()] == [3800]

    # The same message routed again (a re-delivery, a retried signal) opens nothing more.
    again = customer_line_route(line.pk)
    assert (again.routing, again.run_id) == ("opened", str(second.pk))
    assert Run.objects.filter(ticket__reference="NW-1").count() == 2


@pytest.mark.parametrize(
    ("setting", "cap", "opens"),
    [("off", None, False), ("new_tickets", None, False), ("every_message", 0, False)],
)
def test_the_merchant_decides_whether_a_message_opens_a_run(
    dbos_executor, receiver, setting, cap, opens
):
    finished_nw1()
    update = {"auto_runs": setting}
    if cap is not None:
        update["daily_spend_cap_micros"] = cap  # the day's budget is spent
    Merchant.objects.filter(slug="northwind").update(**update)
    dana_writes(receiver, f"<dana-{setting}@mail.example.com>")
    assert TicketMessage.objects.filter(message_id=f"<dana-{setting}@mail.example.com>").exists()
    assert Run.objects.filter(ticket__reference="NW-1").count() == (2 if opens else 1)


def test_an_auto_reply_opens_no_run(dbos_executor, receiver):
    finished_nw1()
    send(
        receiver,
        mail(
            sender=DANA,
            subject="Out of office: Re: Beans arrived stale [#NW-1]",
            headers={"Auto-Submitted": "auto-replied"},
            body="I am away until Monday.",
        ),
        sender=DANA,
    )
    assert Ticket.objects.get(reference="NW-1").messages.filter(automated__gt="").exists()
    assert Run.objects.filter(ticket__reference="NW-1").count() == 1
