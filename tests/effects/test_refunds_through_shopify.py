"""NW-1 on a merchant whose orders are at Shopify: read there, refunded there, exactly once.

Whole runs through real DBOS (in process) against the Shopify double over its socket; only
the model is scripted. The run reads NW-1042 at the double (mirrored into an ``Order`` row
of ``source="shopify"``), a person approves $38.00, and the double records one refund whose
transactions total $38.00 against the order's sale, under the ledger key.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from agent.effects.payments import idempotency_key
from agent.effects.shopify import ShopifyAdapter, note_for
from agent.ledger.provider_reconciliation import reconcile_merchant
from agent.models import Step
from agent.models.effects import EffectFinding
from agent.models.ledger import LedgerEntry
from approvals.models import Approval
from deskhand.domain.desk.models import Order, Refund
from deskhand.domain.store.models import ShopifyOrder
from tests.durability.helpers import assert_accounting_matches, decide, start
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.support.shopify_double import ShopifyDouble
from tests.support.shopify_world import northwind_on_shopify, order_gid

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "owner@northwind.test"


@pytest.fixture
def shop(tseeded, settings, monkeypatch):
    double = ShopifyDouble().start()
    settings.DESKHAND_SHOPIFY_BASE_URL = double.url
    monkeypatch.setenv("DESKHAND_EFFECT_BUDGET_SECONDS", "8")
    northwind_on_shopify(double)
    yield double
    double.stop()


def refund_run():
    run = start("NW-1", OWNER)
    wait_parked(str(run.id))
    decide(run, OWNER)
    return wait_terminal(str(run.id))


def refund_creates(shop: ShopifyDouble) -> list:
    return [r for r in shop.requests if "refundCreate" in r.query]


def throttled(call) -> bool:
    return any(
        (e.get("extensions") or {}).get("code") == "THROTTLED"
        for e in call.answer.get("errors") or []
    )


def test_nw1_reads_the_order_at_shopify_and_refunds_38_there_exactly_once(dbos_executor, shop):
    gid = order_gid(shop, "NW-1042")
    run = refund_run()

    assert run.status == "succeeded", run.summary
    # The order was read at Shopify and mirrored: one row, its Shopify id beside it.
    order = Order.objects.get(reference="NW-1042")
    assert order.source == "shopify"
    assert ShopifyOrder.objects.get(order=order).gid == gid
    # Exactly one refund at Shopify, $38.00 against the order's sale, under the ledger key.
    [made] = shop.refunds_of(gid)
    sale = shop.orders[gid].sales[0]
    assert made.amount == 3800
    assert [(t.kind, t.parent, t.amount) for t in made.transactions] == [("REFUND", sale.gid, 3800)]
    entry = LedgerEntry.objects.get(tool="issue_refund")
    assert (entry.state, entry.ok, entry.adapter) == ("done", True, "shopify")
    assert entry.provider_ref == made.gid and made.note == note_for(entry)
    # Reading orders at Shopify spends its cost bucket: a refundCreate the bucket could not
    # hold yet was answered THROTTLED and sent again after the refill, under the same key.
    calls = refund_creates(shop)
    assert {c.variables["key"] for c in calls} == {idempotency_key(entry.key)}
    assert all(throttled(c) for c in calls[:-1]) and not throttled(calls[-1])
    call = calls[-1]
    assert call.variables["input"]["transactions"][0]["amount"] == "38.00"
    assert "allowOverRefunding" not in call.query + str(call.variables)
    refund = Refund.objects.get()
    assert (refund.status, refund.provider_refund_id, refund.amount_cents, refund.order_id) == (
        "succeeded",
        made.gid,
        3800,
        order.pk,
    )
    step = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert step.ok and step.result["adapter"] == "shopify"
    assert "Refunded 38.00 USD against NW-1042" in run.summary
    assert_accounting_matches(run)
    # Reconciliation compares the ledger with the order's refunds at Shopify: nothing differs.
    counts = reconcile_merchant(entry.merchant_id, now=timezone.now())
    assert EffectFinding.objects.count() == 0, counts


def test_a_refusal_from_shopify_reaches_the_step_in_its_words_and_moves_nothing(
    dbos_executor, shop
):
    gid = order_gid(shop, "NW-1042")
    shop.fail_next_refund("The payment gateway declined the refund.")
    run = refund_run()

    assert run.status == "succeeded", run.summary
    assert shop.refunds_of(gid) == [] and Refund.objects.count() == 0
    entry = LedgerEntry.objects.get(tool="issue_refund")
    assert (entry.state, entry.ok, entry.adapter) == ("failed", False, "shopify")
    step = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert not step.ok
    assert "Shopify refused the refund of 38.00 USD" in step.result["text"]
    assert "The payment gateway declined the refund." in step.result["text"]
    approval = Approval.objects.get(run=run, tool="issue_refund")
    assert approval.status == "approved" and list(approval.ledger_entries.all()) == [entry]
    assert "No money moved" in run.summary


def test_a_refund_made_in_shopifys_admin_is_a_reconciliation_finding(dbos_executor, shop):
    gid = order_gid(shop, "NW-1042")
    run = refund_run()
    assert run.status == "succeeded", run.summary
    outside = shop.refund_directly(gid, 500, note="Goodwill, from the shop's admin")

    counts = reconcile_merchant(run.merchant_id, now=timezone.now() + dt.timedelta(minutes=1))

    [finding] = EffectFinding.objects.all()
    assert finding.kind == "provider_only" and finding.provider_ref == outside
    assert finding.provider_amount_cents == 500
    assert "NW-1042" in finding.detail
    assert counts["provider_only"] == 1


def test_a_key_whose_attempt_failed_is_settled_as_not_moved_and_never_sent_under_another(
    dbos_executor, shop
):
    """Shopify answers IDEMPOTENCY_PREVIOUS_ATTEMPT_FAILED to a key whose first attempt
    failed: the claim that owns it moved no money, and a new key would be a new claim."""
    gid = order_gid(shop, "NW-1042")
    shop.fail_next_refund()
    run = refund_run()
    entry = LedgerEntry.objects.get(tool="issue_refund")
    sent = len(refund_creates(shop))

    # The same claim asked again (a re-executed step would): Shopify says the key is spent.
    outcome = ShopifyAdapter().perform(entry)

    assert (outcome.state, outcome.code) == ("failed", "key_spent")
    last = refund_creates(shop)[-1]
    assert len(refund_creates(shop)) > sent
    assert [e["extensions"]["code"] for e in last.answer["errors"]] == [
        "IDEMPOTENCY_PREVIOUS_ATTEMPT_FAILED"
    ]
    assert {c.variables["key"] for c in refund_creates(shop)} == {idempotency_key(entry.key)}
    assert shop.refunds_of(gid) == []
    text, ok = ShopifyAdapter().record(entry, outcome)
    assert not ok and "No money moved under this claim" in text
    assert "needs a new decision" in text
    assert Refund.objects.count() == 0 and run.status == "succeeded"


def test_a_throttled_refund_waits_for_the_bucket_within_the_effects_budget(dbos_executor, shop):
    gid = order_gid(shop, "NW-1042")
    run = start("NW-1", OWNER)
    wait_parked(str(run.id))
    before = len(shop.requests)
    shop.drain()  # another client of the app spent the bucket: the effect's reads wait
    decide(run, OWNER)
    run = wait_terminal(str(run.id))

    assert run.status == "succeeded", run.summary
    assert [r.amount for r in shop.refunds_of(gid)] == [3800]
    assert any(throttled(r) for r in shop.requests[before:])
    entry = LedgerEntry.objects.get(tool="issue_refund")
    assert (entry.state, entry.ok) == ("done", True)
    # provider_calls counts what the effect itself sent (the re-read and the refund, retries
    # included); the claim's read of the order by name came before it.
    effect = [r for r in shop.requests[before:] if r.query.startswith(("query Order(", "mutation"))]
    assert entry.provider_calls == len(effect) >= 3
    assert Step.objects.get(run=run, kind="tool", tool="issue_refund").attempts == 1
