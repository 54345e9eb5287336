"""One interface for orders whatever the merchant's source, and a run that keeps its own.

``local`` reads the tables the demo has always had, ``pushed`` only the orders the store
sent, ``shopify`` says in a sentence that no store is connected. A run reads through the
source it started with: changing the merchant's source mid-run changes nothing under it or
its approvals (the choice of docs/effects.md, "Where orders come from"); the next run reads
the new one.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from agent.models import Run, RunStatus
from agent.run.bounds import refund_precheck
from agent.run.services import run_create
from approvals.merchant_settings import settings_change
from approvals.models import Approval, AuditEvent
from deskhand.domain.desk.models import Merchant, Order, OrderSourceKind, Ticket
from deskhand.domain.desk.orders import SourceUnavailable, order_source
from deskhand.domain.desk.pushed import PushedLine, PushedOrder, pushed_order_upsert
from tests.console.conftest import NW_OWNER, client_for, make_approval
from tests.tools.helpers import call, start_run

pytestmark = pytest.mark.django_db

DANA = "dana.whitfield@example.com"  # NW-1's customer; her local order is NW-1042


def northwind() -> Merchant:
    return Merchant.objects.get(slug="northwind")


def push(reference: str = "SO-9", email: str = DANA, total: int = 10_000) -> Order:
    order = PushedOrder(
        reference=reference,
        version=1,
        customer_email=email,
        customer_name="Dana Whitfield",
        status="delivered",
        currency="USD",
        total_cents=total,
        placed_at=timezone.now() - dt.timedelta(days=9),
        delivered_at=timezone.now() - dt.timedelta(days=3),
        items=(
            PushedLine(
                sku="GRINDER", description="Burr grinder", quantity=1, unit_price_cents=total
            ),
        ),
    )
    return pushed_order_upsert(merchant_id=northwind().pk, order=order, now=timezone.now()).order


def switch(kind: str) -> None:
    owner = get_user_model().objects.get(email=NW_OWNER)
    settings_change(merchant=northwind(), values={"order_source": kind}, by=owner)


def test_the_local_source_reads_the_demo_tables_as_typed_facts_in_minor_units(seeded):
    row = Order.objects.get(reference="NW-1042")
    facts = order_source(merchant_id=northwind().pk, kind="local").order("nw-1042")
    assert facts is not None
    assert (facts.reference, facts.total_cents, facts.currency) == ("NW-1042", 4800, "USD")
    assert facts.remainder_cents == row.refundable_cents() == 4800 - facts.refunded_cents
    assert facts.order_id == row.pk and facts.customer_email == DANA
    assert [i.line_cents for i in facts.items] == [i.line_cents for i in row.items.all()]
    listed = order_source(merchant_id=northwind().pk, kind="local").orders_for_customer(DANA)
    assert [o.reference for o in listed] == ["NW-1042"]


def test_each_source_reads_only_its_own_orders_and_only_its_merchants(seeded):
    push("SO-9")
    nw, lumen = northwind().pk, Merchant.objects.get(slug="lumen").pk
    local, pushed = (
        order_source(merchant_id=nw, kind="local"),
        order_source(merchant_id=nw, kind="pushed"),
    )
    assert local.order("SO-9") is None and pushed.order("NW-1042") is None
    found = pushed.order("SO-9")
    assert found is not None and found.source == OrderSourceKind.PUSHED
    assert [o.reference for o in pushed.orders_for_customer(DANA.upper())] == ["SO-9"]
    assert order_source(merchant_id=lumen, kind="pushed").order("SO-9") is None


def test_the_shopify_source_says_no_store_is_connected_wherever_orders_are_read(seeded):
    source = order_source(merchant_id=northwind().pk, kind="shopify")
    with pytest.raises(SourceUnavailable, match="no Shopify store is connected"):
        source.order("NW-1042")
    with pytest.raises(SourceUnavailable, match="no Shopify store is connected"):
        source.orders_for_customer(DANA)
    # The settings page refuses Shopify without a store; a store disconnected later (or its
    # connection lost) leaves a merchant here, which is what the readers must say in words.
    Merchant.objects.filter(pk=northwind().pk).update(order_source="shopify")
    run = start_run("NW-1")
    assert run.order_source == "shopify"
    from agent.tools.registry import ToolError

    with pytest.raises(ToolError, match="no Shopify store is connected"):
        call(run, "get_order", {"reference": "NW-1042"})
    said = refund_precheck(str(run.pk), {"order_reference": "NW-1042", "amount_cents": 100})
    assert said is not None and "no Shopify store is connected" in said
    page = client_for(NW_OWNER).get("/tickets/NW-1/").content.decode()
    orders = page.split("<h2>Orders</h2>")[1].split("</table>")[0]
    assert "no Shopify store is connected yet" in orders and "NW-1042" not in orders


def test_the_agent_reads_a_pushed_order_exactly_as_a_local_one(seeded):
    push("SO-9", total=7_500)
    switch("pushed")
    run = start_run("NW-1")
    got = json.loads(call(run, "get_order", {"reference": "so-9"}).text)
    assert (got["reference"], got["total_cents"], got["refundable_cents"]) == ("SO-9", 7500, 7500)
    assert got["items"][0]["sku"] == "GRINDER" and got["customer"]["name"] == "Dana Whitfield"
    customer = json.loads(call(run, "get_customer", {"email": DANA}).text)
    assert [o["reference"] for o in customer["orders"]] == ["SO-9"]
    from agent.tools.registry import ToolError

    with pytest.raises(ToolError, match="no order 'NW-1042'"):
        call(run, "get_order", {"reference": "NW-1042"})  # the demo's row, not this source's


def test_a_pushed_order_of_another_customer_reads_as_not_theirs(seeded):
    push("SO-10", email="omar.reyes@example.com")
    switch("pushed")
    from agent.tools.registry import ToolError

    with pytest.raises(ToolError, match="does not belong to the customer on this ticket"):
        call(start_run("NW-1"), "get_order", {"reference": "SO-10"})


def test_a_run_keeps_the_order_source_it_started_with_and_its_approval_stays(seeded):
    owner = get_user_model().objects.get(email=NW_OWNER)
    started = run_create(ticket=Ticket.objects.get(reference="NW-1"), user=owner)
    Run.objects.filter(pk=started.pk).update(status=RunStatus.AWAITING_APPROVAL)
    approval = make_approval(Run.objects.get(pk=started.pk))
    push("SO-9")
    switch("pushed")
    assert AuditEvent.objects.filter(action="merchant.settings_changed").get().detail == {
        "changed": {"order_source": ["local", "pushed"]}
    }
    started.refresh_from_db()
    assert started.order_source == "local"
    # The run in flight still reads, and may refund, the order it was shown.
    assert (
        refund_precheck(str(started.pk), {"order_reference": "NW-1042", "amount_cents": 100})
        is None
    )
    assert (
        json.loads(call(started, "get_order", {"reference": "NW-1042"}).text)["total_cents"] == 4800
    )
    assert Approval.objects.get(pk=approval.pk).status == "pending"
    # A run started now reads the new source.
    Run.objects.filter(pk=started.pk).update(status=RunStatus.SUCCEEDED)
    fresh = run_create(ticket=Ticket.objects.get(reference="NW-1"), user=owner)
    assert fresh.order_source == "pushed"
    said = refund_precheck(str(fresh.pk), {"order_reference": "NW-1042", "amount_cents": 100})
    assert said is not None and "no order 'NW-1042'" in said
    assert refund_precheck(str(fresh.pk), {"order_reference": "SO-9", "amount_cents": 100}) is None
