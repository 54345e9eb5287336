"""The Shopify client reads orders and moves money as Deskhand needs, against the double.

Real HTTP through the double's socket, the client's own documents validated by the double's
schema on every call: so a field, argument or type the client gets wrong fails here as it
would at Shopify.
"""

from __future__ import annotations

import pytest

from deskhand.domain.store.shopify import (
    API_VERSION,
    ShopifyAuthError,
    ShopifyClient,
    ShopifyKeySpent,
    ShopifyRefused,
    ShopifyThrottled,
    ShopifyUnavailable,
)
from tests.support.shopify_double import ShopifyDouble, WebhookInbox
from tests.support.waiting import until


@pytest.fixture
def shop():
    double = ShopifyDouble().start()
    yield double
    double.stop()


def client_of(shop: ShopifyDouble, **options) -> ShopifyClient:
    return ShopifyClient(shop.shop_domain, shop.access_token, base_url=shop.url, **options)


@pytest.fixture
def client(shop):
    with client_of(shop) as c:
        yield c


def test_the_api_version_is_pinned_and_in_the_address(shop, client):
    assert API_VERSION >= "2026-01"
    client.order_by_name("#1")
    assert shop.requests[-1].version == API_VERSION
    assert client.endpoint.endswith(f"/admin/api/{API_VERSION}/graphql.json")
    assert shop.access_token not in repr(client)


def test_orders_are_found_by_email_and_by_name_with_money_in_minor_units(shop, client):
    shop.add_order("#1001", "dana@example.com", 10000)
    shop.add_order("#1002", "dana@example.com", 4250)
    shop.add_order("#1003", "sam@example.org", 999)
    mine = client.orders_by_email("Dana@Example.com")
    assert sorted(o.name for o in mine) == ["#1001", "#1002"]
    order = client.order_by_name("1002")
    assert order is not None
    assert (order.name, order.total, order.currency, order.refunded, order.remainder) == (
        "#1002",
        4250,
        "USD",
        0,
        4250,
    )
    assert order.sale is not None and order.sale.gateway == "shopify_payments"
    assert client.order_by_name("#9999") is None
    assert client.orders_by_email("nobody@example.com") == []


@pytest.mark.parametrize(
    ("currency", "total", "refund", "left"),
    [("JPY", 4000, 1500, 2500), ("KWD", 12345, 2005, 10340), ("USD", 10000, 2000, 8000)],
)
def test_refunded_total_and_remainder_in_each_currency(shop, client, currency, total, refund, left):
    gid = shop.add_order("#2001", "kenji@example.jp", total, currency=currency)
    shop.refund_directly(gid, refund)
    order = client.order(gid)
    assert order is not None
    assert (order.currency, order.total, order.refunded, order.remainder) == (
        currency,
        total,
        refund,
        left,
    )
    assert order.refunds[0].amount == refund
    assert order.financial_status == "PARTIALLY_REFUNDED"


def test_a_refund_is_exactly_the_amount_against_the_sale_under_the_ledger_key(shop, client):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    order = client.order(gid)
    refund = client.refund_create(order, 3800, key="ledger:run-1:call-7", note="Late delivery")
    assert (refund.amount, refund.currency) == (3800, "USD")
    (made,) = shop.refunds_of(gid)
    (txn,) = made.transactions
    assert (txn.kind, txn.amount, txn.parent) == ("REFUND", 3800, order.sale.gid)
    sent = shop.requests[-1]
    assert "@idempotent(key: $key)" in sent.query
    assert sent.variables["key"] == "ledger:run-1:call-7"
    assert "allowOverRefunding" not in str(sent.variables) + sent.query
    assert sent.variables["input"]["transactions"][0]["amount"] == "38.00"
    # The same key again (a retry after a crash) is the same refund, made once.
    again = client.refund_create(order, 3800, key="ledger:run-1:call-7", note="Late delivery")
    assert again.gid == refund.gid
    assert len(shop.refunds_of(gid)) == 1
    assert client.order(gid).remainder == 6200


def test_a_refund_over_the_remainder_is_refused_with_shopifys_sentence(shop, client):
    gid = shop.add_order("#1001", "dana@example.com", 5000)
    seen = client.order(gid)  # what a person was shown: nothing refunded yet
    shop.refund_directly(gid, 2000)  # staff refund $20 in Shopify's admin meanwhile
    with pytest.raises(ShopifyRefused) as refused:
        client.refund_create(seen, 3800, key="ledger:run-2:call-3")
    assert refused.value.field == ["transactions", "0", "amount"]
    assert "30.00 USD" in str(refused.value)
    assert [r.amount for r in shop.refunds_of(gid)] == [2000]
    assert client.order(gid).remainder == 3000


def test_a_key_reused_with_another_amount_is_refused_not_paid(shop, client):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    order = client.order(gid)
    client.refund_create(order, 3800, key="ledger:k")
    with pytest.raises(ShopifyRefused) as refused:
        client.refund_create(order, 2000, key="ledger:k")
    assert refused.value.code == "IDEMPOTENCY_KEY_PARAMETER_MISMATCH"
    assert [r.amount for r in shop.refunds_of(gid)] == [3800]


def test_a_key_whose_attempt_failed_is_spent(shop, client):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    order = client.order(gid)
    shop.fail_next_refund("The card network declined the refund.")
    with pytest.raises(ShopifyRefused, match="declined") as first:
        client.refund_create(order, 3800, key="ledger:spent")
    assert not isinstance(first.value, ShopifyKeySpent)
    with pytest.raises(ShopifyKeySpent):
        client.refund_create(order, 3800, key="ledger:spent")
    assert shop.refunds_of(gid) == []


def test_throttled_is_waited_out_as_the_cost_figures_say(shop):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    slept: list[float] = []
    with client_of(shop, sleep=lambda s: (slept.append(s), __import__("time").sleep(s))) as c:
        order = c.order(gid)
        shop.drain()
        refund = c.refund_create(order, 3800, key="ledger:throttled")
    assert refund.amount == 3800
    assert len(shop.refunds_of(gid)) == 1
    # one wait, sized from requestedQueryCost / restoreRate (14 points at 100 a second)
    assert slept and 0.05 <= slept[0] <= 0.15
    assert [
        r.answer.get("errors", [{}])[0].get("extensions", {}).get("code")
        for r in shop.requests[-2:]
    ] == [
        "THROTTLED",
        None,
    ]


def test_throttled_past_the_time_budget_is_a_sentence_and_no_refund():
    shop = ShopifyDouble(restore_rate=1.0).start()
    try:
        gid = shop.add_order("#1001", "dana@example.com", 10000)
        with client_of(shop, time_budget=2.0) as c:
            order = c.order(gid)
            shop.drain()
            with pytest.raises(ShopifyThrottled, match="nothing was done"):
                c.refund_create(order, 3800, key="ledger:budget")
        assert shop.refunds_of(gid) == []
    finally:
        shop.stop()


def test_a_wrong_token_and_no_server_are_typed_errors_without_the_token(shop):
    wrong = ShopifyClient(shop.shop_domain, "shpat_wrong_token_123", base_url=shop.url)
    with wrong as c, pytest.raises(ShopifyAuthError) as refused:
        c.order_by_name("#1001")
    assert "shpat_wrong_token_123" not in str(refused.value)
    url = shop.url
    shop.stop()
    gone = ShopifyClient("gone.myshopify.com", "t", base_url=url, time_budget=0.5)
    with gone as c, pytest.raises(ShopifyUnavailable):
        c.order_by_name("#1001")
    shop.start()


def test_a_cancellation_is_a_job_polled_until_done(shop, client):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    job = client.order_cancel(gid, reason="CUSTOMER", staff_note="Customer asked")
    assert client.job_done(job) is False
    assert client.job_wait(job, budget=10) is True
    assert client.order(gid).cancelled_at
    with pytest.raises(ShopifyRefused) as twice:
        client.order_cancel(gid)
    assert twice.value.code == "INVALID"


def test_webhook_subscriptions_are_created_and_listed_for_health(shop, client):
    inbox = WebhookInbox()
    try:
        for topic in ("orders/updated", "orders/cancelled", "refunds/create"):
            client.webhook_subscribe(topic, inbox.url())
        assert sorted(s.topic for s in client.webhook_subscriptions()) == [
            "ORDERS_CANCELLED",
            "ORDERS_UPDATED",
            "REFUNDS_CREATE",
        ]
        with pytest.raises(ShopifyRefused, match="already been taken"):
            client.webhook_subscribe("orders/updated", inbox.url())
        gid = shop.add_order("#1001", "dana@example.com", 10000)
        client.refund_create(client.order(gid), 100, key="ledger:hook")
        until("refunds/create", lambda: inbox.of("refunds/create"), timeout=10)
        shop.drop_subscriptions()
        assert client.webhook_subscriptions() == []
    finally:
        inbox.stop()


def test_the_demos_orders_mirrored_at_the_double_are_read_by_the_client(seeded):
    from deskhand.domain.desk.models import Order as DeskOrder
    from tests.support.shopify_double import mirror_seeded_orders

    shop = ShopifyDouble().start()
    try:
        assert mirror_seeded_orders(shop, "northwind") > 0
        desk = DeskOrder.objects.filter(merchant__slug="northwind").select_related("customer")[0]
        with client_of(shop) as c:
            order = c.order_by_name(desk.reference)
            assert order is not None
            assert (order.total, order.currency, order.email) == (
                desk.total_cents,
                desk.currency,
                desk.customer.email,
            )
            assert desk.reference in [o.name for o in c.orders_by_email(desk.customer.email)]
    finally:
        shop.stop()


def test_the_same_key_sent_from_five_threads_at_once_refunds_once(shop):
    """A worker and its replacement after a crash may send the same claim together."""
    from concurrent.futures import ThreadPoolExecutor

    gid = shop.add_order("#1001", "dana@example.com", 10000)
    with client_of(shop) as c:
        order = c.order(gid)
        with ThreadPoolExecutor(5) as pool:
            refunds = list(
                pool.map(lambda _: c.refund_create(order, 3800, key="ledger:race"), range(5))
            )
    assert len({r.gid for r in refunds}) == 1
    assert [r.amount for r in shop.refunds_of(gid)] == [3800]


def test_a_cancellation_never_refunds_by_itself(shop, client):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    assert client.job_wait(client.order_cancel(gid), budget=10)
    (sent,) = [r for r in shop.requests if "orderCancel" in r.query]
    assert "refundMethod: {originalPaymentMethodsRefund: false}" in sent.query
    assert shop.refunds_of(gid) == []
    assert client.order(gid).remainder == 10000


def test_the_clients_documents_hold_on_the_next_version_too(shop):
    """An upgrade is tested like any contract: 2026-04 makes @idempotent mandatory for
    refundCreate, and every document of the client already carries it."""
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    with client_of(shop, api_version="2026-04") as c:
        order = c.order_by_name("#1001")
        refund = c.refund_create(order, 3800, key="ledger:next-version")
        assert c.job_wait(c.order_cancel(gid), budget=10)
        c.webhook_subscriptions()
    assert refund.amount == 3800
    assert {r.version for r in shop.requests} == {"2026-04"}
    assert all("errors" not in r.answer for r in shop.requests)


def test_no_log_line_holds_the_token(shop, caplog):
    import logging

    caplog.set_level(logging.DEBUG)
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    with client_of(shop) as c:
        c.refund_create(c.order(gid), 100, key="ledger:logs")
        with pytest.raises(ShopifyRefused):
            c.refund_create(c.order(gid), 100_000, key="ledger:logs-2")
    assert caplog.records  # httpx did log its requests
    assert shop.access_token not in caplog.text
