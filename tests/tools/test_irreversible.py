"""Irreversible tools: each effect is linked to its ledger entry and bounded by money rules.

The approval gate is the runtime's job and is tested there; these tests call the
handlers the way the runtime does once a person has approved.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from zoneinfo import ZoneInfo

import pytest
from django.db import connection, transaction

from agent.models import RunStatus
from agent.models.ledger import LedgerEntry
from agent.tools import REGISTRY, ToolError
from agent.tools.registry import ToolOutcome
from deskhand.domain.desk.models import (
    Merchant,
    MessageKind,
    Order,
    OutboundEmail,
    Refund,
    TicketMessage,
)
from deskhand.domain.desk.money import format_cents, format_micros
from deskhand.domain.desk.services import merchant_day_start
from tests.tools.helpers import call, context, result, start_run


def refund(run, reference: str, cents: int, *, call_id: str = "call-1") -> ToolOutcome:
    args = {
        "order_reference": reference,
        "amount_cents": cents,
        "reason": "Stale beans inside the window.",
    }
    return call(run, "issue_refund", args, call_id=call_id)


def test_a_refund_is_recorded_against_the_run_and_its_ledger_entry(seeded):
    run = start_run("NW-1")
    out = result(refund(run, "NW-1042", 3800))
    assert out == {
        "order_reference": "NW-1042",
        "refunded_cents": 3800,
        "currency": "USD",
        "refundable_remaining_cents": 1000,
        "message": "Refunded 38.00 USD against NW-1042. Remaining refundable: 10.00 USD. "
        "The customer sees it on their statement in 5-10 business days.",
    }
    [row] = Refund.objects.all()
    assert (row.amount_cents, row.run_id, row.order.reference) == (3800, run.id, "NW-1042")
    assert row.ledger_entry == LedgerEntry.objects.get(run=run, tool_call_id="call-1")
    assert row.merchant.slug == "northwind"


def test_a_refund_cannot_exceed_what_is_left_on_the_order(seeded):
    run = start_run("NW-1")
    refund(run, "NW-1042", 1000, call_id="call-1")
    with pytest.raises(ToolError) as info:
        refund(run, "NW-1042", 4800, call_id="call-2")
    assert str(info.value) == (
        "cannot refund 48.00 USD against NW-1042: 10.00 USD of 48.00 USD is already refunded, "
        "leaving 38.00 USD"
    )
    assert list(Refund.objects.values_list("amount_cents", flat=True)) == [1000]
    # The failed call's ledger entry went with it: nothing half-recorded.
    assert not LedgerEntry.objects.filter(run=run, tool_call_id="call-2").exists()
    result(refund(run, "NW-1042", 3800, call_id="call-3"))
    assert Order.objects.get(reference="NW-1042").refundable_cents() == 0


def test_the_per_run_refund_ceiling_holds(seeded):
    run = start_run("NW-1", max_refund_cents=2000)
    refund(run, "NW-1042", 1900, call_id="call-1")
    with pytest.raises(ToolError) as info:
        refund(run, "NW-1042", 200, call_id="call-2")
    message = str(info.value)
    assert "this run's refund ceiling of 20.00 USD" in message
    assert "this ticket's runs have already refunded 19.00 USD, leaving 1.00 USD" in message
    refund(run, "NW-1042", 100, call_id="call-3")  # exactly up to the ceiling is allowed
    assert Refund.objects.filter(run=run).count() == 2

    # The ceiling counts the ticket's runs: the next run on the ticket does not start afresh.
    run.status = RunStatus.SUCCEEDED
    run.save(update_fields=["status"])
    later = start_run("NW-1", max_refund_cents=2000)
    with pytest.raises(ToolError, match=r"this ticket's runs have already refunded 20\.00 USD"):
        refund(later, "NW-1042", 200, call_id="call-1")
    assert sum(Refund.objects.values_list("amount_cents", flat=True)) == 2000
    # Another ticket's run has its own ceiling.
    other = start_run("NW-4", max_refund_cents=2000)
    assert Refund.objects.filter(run__ticket=other.ticket).count() == 0


def test_the_merchant_daily_refund_ceiling_holds(seeded):
    Merchant.objects.filter(slug="northwind").update(daily_refund_ceiling_cents=4000)
    dana, ben, saoirse = start_run("NW-1"), start_run("NW-4"), start_run("LU-2")
    refund(dana, "NW-1042", 3000)
    # A different run, customer and order: the ceiling is the merchant's whole day.
    with pytest.raises(ToolError) as info:
        refund(ben, "NW-1101", 1500)
    assert "Northwind Coffee's daily refund ceiling of 40.00 USD" in str(info.value)
    assert "30.00 USD has already been refunded today, leaving 10.00 USD" in str(info.value)
    refund(ben, "NW-1101", 1000, call_id="call-2")
    # Another merchant's day is its own.
    result(refund(saoirse, "LU-2311", 17900))
    assert Refund.objects.filter(merchant__slug="northwind").count() == 2
    assert Refund.objects.filter(merchant__slug="lumen").count() == 1


def test_the_daily_ceiling_resets_at_the_merchants_midnight(seeded):
    lumen = Merchant.objects.get(slug="lumen")
    lumen.daily_refund_ceiling_cents = 10000
    lumen.save()
    start = merchant_day_start(lumen)
    assert start.astimezone(ZoneInfo("Europe/Dublin")).time() == dt.time(0, 0)

    duplicate = Order.objects.get(reference="LU-2310")
    earlier = Refund.objects.create(merchant=lumen, order=duplicate, amount_cents=5000, reason="x")
    Refund.objects.filter(pk=earlier.pk).update(created_at=start - dt.timedelta(seconds=1))
    run = start_run("LU-2")
    refund(run, "LU-2311", 10000)  # yesterday's 50.00 does not count against today

    Refund.objects.filter(pk=earlier.pk).update(created_at=start)
    with pytest.raises(ToolError, match="daily refund ceiling"):
        refund(run, "LU-2311", 1, call_id="call-2")


def test_a_run_cannot_refund_another_customers_order(seeded):
    run = start_run("NW-1")
    with pytest.raises(
        ToolError, match="order NW-1101 does not belong to the customer on this ticket"
    ):
        refund(run, "NW-1101", 2400)
    with pytest.raises(ToolError, match="no order 'LU-2311' for this merchant"):
        refund(run, "LU-2311", 100, call_id="call-2")
    assert not Refund.objects.exists()
    assert not LedgerEntry.objects.exists()


def test_email_lands_on_the_thread_and_in_the_outbox(seeded):
    run = start_run("NW-1")
    args = {
        "reference": "NW-1",
        "subject": "Your refund",
        "body": "We refunded 38.00 USD for the stale beans.",
    }
    out = result(call(run, "send_customer_email", args))
    assert out == {
        "reference": "NW-1",
        "to": "Dana Whitfield <d***@e***.com>",
        "subject": "Re: Beans arrived stale [#NW-1]",  # on Dana's own thread
        "message": "Emailed Dana Whitfield <d***@e***.com> about NW-1. "
        "It has been delivered and cannot be recalled.",
    }
    [email] = OutboundEmail.objects.all()
    assert (email.customer.name, email.ticket.reference, email.run_id) == (
        "Dana Whitfield",
        "NW-1",
        run.id,
    )
    assert email.ledger_entry.key == f"{run.id}:call-1"
    thread = TicketMessage.objects.filter(ticket__reference="NW-1", kind=MessageKind.AGENT).get()
    # The merchant signs what it sends.
    assert (
        thread.body
        == "Subject: Re: Beans arrived stale [#NW-1]\n\nWe refunded 38.00 USD for the stale beans."
        "\n\nNorthwind Coffee"
    )
    assert thread.run_id == run.id


def test_email_goes_only_to_the_runs_own_customer(seeded):
    run = start_run("NW-1")
    args = {"reference": "NW-2", "subject": "Hello", "body": "Your order is on its way."}
    with pytest.raises(ToolError, match="only read or change its own ticket"):
        call(run, "send_customer_email", args)
    multiline = {
        "reference": "NW-1",
        "subject": "Hi\nBcc: everyone",
        "body": "Your order is on its way.",
    }
    with pytest.raises(ToolError, match="one non-empty line"):
        call(run, "send_customer_email", multiline, call_id="call-2")
    assert not OutboundEmail.objects.exists()
    assert not TicketMessage.objects.filter(kind=MessageKind.AGENT).exists()


def test_cancel_refuses_a_shipped_order(seeded):
    run = start_run("NW-2")
    with pytest.raises(ToolError) as info:
        call(run, "cancel_order", {"order_reference": "NW-1077", "reason": "Customer asked"})
    assert str(info.value) == (
        "cannot cancel NW-1077: it has already shipped. Only an order that has not shipped can be cancelled."
    )
    order = Order.objects.get(reference="NW-1077")
    assert (order.status, order.cancelled_at, order.cancel_ledger_entry) == ("shipped", None, None)


def test_cancelling_a_placed_order_is_linked_to_its_ledger_entry_and_happens_once(seeded):
    run = start_run("LU-2")
    out = result(
        call(run, "cancel_order", {"order_reference": "LU-2311", "reason": "Duplicate charge"})
    )
    assert out["order_reference"] == "LU-2311"
    assert out["status"] == "cancelled"
    assert "moves no money" in out["message"]
    order = Order.objects.get(reference="LU-2311")
    assert (order.status, order.cancel_reason) == ("cancelled", "Duplicate charge")
    assert order.cancelled_at is not None
    assert order.cancel_ledger_entry.key == f"{run.id}:call-1"
    with pytest.raises(ToolError, match="cannot cancel LU-2311: it is already cancelled"):
        call(
            run, "cancel_order", {"order_reference": "LU-2311", "reason": "Again"}, call_id="call-2"
        )
    assert Order.objects.get(reference="LU-2310").status == "placed"
    assert not Refund.objects.exists()


def test_an_irreversible_handler_will_not_act_without_a_ledger_entry(seeded):
    run = start_run("NW-1")
    args = {"order_reference": "NW-1042", "amount_cents": 100, "reason": "No ledger"}
    with pytest.raises(RuntimeError, match="without a ledger entry"):
        REGISTRY["issue_refund"].handler(context(run), args)
    assert not Refund.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_two_refunds_racing_for_one_order_cannot_both_be_paid(tseeded):
    """The second refund waits on the first's row lock, then sees its refund."""
    first = start_run("NW-1")
    second = start_run("NW-1", status=RunStatus.SUCCEEDED)  # one open run per ticket
    first_holds_locks = threading.Event()
    outcomes: dict[str, str] = {}

    def pay_first() -> None:
        try:
            with transaction.atomic():
                refund(first, "NW-1042", 3000, call_id="a")
                first_holds_locks.set()
                time.sleep(0.5)  # commit late, while the second refund is already trying
            outcomes["first"] = "paid"
        except ToolError as exc:
            outcomes["first"] = str(exc)
        finally:
            first_holds_locks.set()
            connection.close()

    def pay_second() -> None:
        first_holds_locks.wait(10)
        try:
            refund(second, "NW-1042", 3000, call_id="b")
            outcomes["second"] = "paid"
        except ToolError as exc:
            outcomes["second"] = str(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=pay_first), threading.Thread(target=pay_second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert outcomes["first"] == "paid"
    assert "30.00 USD of 48.00 USD is already refunded, leaving 18.00 USD" in outcomes["second"]
    assert list(Refund.objects.values_list("amount_cents", flat=True)) == [3000]


def test_money_is_formatted_from_integers_only():
    assert format_cents(3800) == "38.00 USD"
    assert format_cents(5, "EUR") == "0.05 EUR"
    assert format_cents(-1050) == "-10.50 USD"
    assert format_cents(0) == "0.00 USD"
    assert format_cents(123_456_789_012_345_678) == "1234567890123456.78 USD"
    with pytest.raises(TypeError):
        format_cents(38.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        format_cents(True)
    assert format_micros(12_300) == "$0.0123"
    assert format_micros(2_000_000) == "$2.00"
    assert format_micros(1) == "$0.000001"
    assert format_micros(-1_500_000) == "-$1.50"
