"""Money reads in its order's currency everywhere a person reads it: the approval card and the
customer's mail, for a currency without a minor unit (JPY) and one with three digits (KWD).

NW-1 worked end to end by the keyless agent through the real workflow (in-process DBOS), its
order NW-1042 priced in the currency under test.
"""

from __future__ import annotations

import pytest

from agent.models import Run
from approvals.models import ApprovalPolicy
from approvals.services import approval_decide
from deskhand.domain.desk.models import Order, OutboundEmail, Refund
from tests.console.conftest import client_for
from tests.durability.helpers import pending_approval, start, user
from tests.fixtures.dbos import wait_for_run

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "owner@northwind.test"
TERMINAL = ("succeeded", "failed", "exhausted", "cancelled")


def _priced_in(currency: str) -> Order:
    """NW-1042 as two bags at 2000 minor units and shipping at 1000: goods 4000, total 5000."""
    order = Order.objects.get(reference="NW-1042")
    order.items.filter(sku__startswith="BEAN").update(unit_price_cents=2000)
    order.items.filter(sku__startswith="SHIP").update(unit_price_cents=1000)
    order.currency, order.total_cents = currency, 5000
    order.save(update_fields=["currency", "total_cents"])
    return order


def _parked(run: Run) -> Run:
    return wait_for_run(
        str(run.id),
        lambda r: (
            r.status in TERMINAL
            or (r.status == "awaiting_approval" and r.approvals.filter(status="pending").exists())
        ),
        60.0,
    )


@pytest.mark.parametrize(
    ("currency", "goods", "facts", "typed", "machine"),
    [
        ("JPY", "¥4,000", "Order total ¥5,000 · ¥0 already refunded · ¥5,000 left", "4000", "4000 JPY"),
        ("KWD", "4.000 KWD", "Order total 5.000 KWD · 0.000 KWD already refunded · 5.000 KWD left",
         "4.000", "4.000 KWD"),
    ],
)  # fmt: skip
def test_a_refund_reads_in_its_orders_currency_on_the_card_and_in_the_customers_mail(
    dbos_executor, tseeded, currency, goods, facts, typed, machine
):
    ApprovalPolicy.objects.all().delete()  # a person decides the reply too, so its card is seen
    _priced_in(currency)
    run = _parked(start("NW-1", OWNER))
    refund = pending_approval(run)
    assert refund.tool == "issue_refund" and refund.arguments["amount_cents"] == 4000

    card = client_for(OWNER).get("/approvals/").content.decode()
    assert f"Refund {goods} on order NW-1042" in card
    assert facts in card
    assert f'value="{typed}"' in card  # the amount a person may narrow, as they type it
    digits = {"JPY": 0, "KWD": 3}[currency]
    assert f'data-digits="{digits}"' in card  # the live preview reads the currency's digits
    assert f"Refund {machine} against order NW-1042" in refund.preview
    assert "40.00" not in card and "$" not in card.split("<main", 1)[-1].split("</main>")[0]

    approval_decide(approval=refund, user=user(OWNER), approve=True, reason="", channel="cli")
    run = _parked(run)
    reply = pending_approval(run)
    assert reply.tool == "reply_to_customer"
    assert f"We have refunded {goods} against your order NW-1042" in reply.arguments["body"]
    card = client_for(OWNER).get("/approvals/").content.decode()
    assert f"We have refunded {goods}" in card

    approval_decide(approval=reply, user=user(OWNER), approve=True, reason="", channel="cli")
    run = wait_for_run(str(run.id), lambda r: r.status in TERMINAL, 60.0)
    assert run.status == "succeeded", run.summary
    assert [(r.amount_cents, r.currency) for r in Refund.objects.filter(run=run)] == [
        (4000, currency)
    ]
    [mail] = OutboundEmail.objects.filter(ticket=run.ticket, run=run)
    assert f"We have refunded {goods} against your order NW-1042" in mail.body
    assert f"Refunded {machine} against NW-1042" in run.summary
