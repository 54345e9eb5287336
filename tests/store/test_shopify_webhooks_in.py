"""Shopify's webhooks through the durable intake: verified per merchant, stored once, processed
by a workflow, the order mirror never moving backwards, a customer erased by the system.

Deliveries are signed as the double signs them (``sign``: base64 HMAC-SHA256 of the raw body
with the app's client secret) and posted through Django's test client to
``/inbound/shopify/<slug>/``; the double's own deliveries reach a real server (``live_server``)
in the end-to-end case, processed by the in-process DBOS executor.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
import threading

import pytest
from django.db import close_old_connections
from django.test import Client

from approvals.models import AuditEvent
from deskhand.domain.desk.models import Customer, Order
from deskhand.domain.store.intake import order_webhook_process
from deskhand.domain.store.models import ShopifyOrder, ShopifyWebhook
from tests.support.shopify_double import ShopifyDouble, sign
from tests.support.shopify_world import northwind_on_shopify, order_gid
from tests.support.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/inbound/shopify/northwind/"


@pytest.fixture
def shop(tseeded, settings):
    double = ShopifyDouble().start()
    settings.DESKHAND_SHOPIFY_BASE_URL = double.url
    northwind_on_shopify(double)
    yield double
    double.stop()


def deliver(
    shop: ShopifyDouble,
    topic: str,
    body: dict,
    *,
    webhook_id: str | None = None,
    secret: str | None = None,
    domain: str | None = None,
    url: str = URL,
):
    raw = json.dumps(body).encode()
    return Client().post(
        url,
        data=raw,
        content_type="application/json",
        headers={
            "X-Shopify-Topic": topic,
            "X-Shopify-Hmac-Sha256": sign(secret or shop.client_secret, raw),
            "X-Shopify-Shop-Domain": domain or shop.shop_domain,
            "X-Shopify-Webhook-Id": webhook_id or secrets.token_hex(16),
        },
    )


def order_body(shop: ShopifyDouble, name: str, *, updated: dt.datetime, refunded: int = 0):
    rec = shop.orders[order_gid(shop, name)]
    rec.updated = updated
    body = shop._order_payload(rec)
    if refunded:
        body["refunds"] = [
            {
                "transactions": [
                    {"kind": "refund", "status": "success", "amount": f"{refunded / 100:.2f}"}
                ]
            }
        ]
    return body


def test_a_bad_signature_or_another_shop_is_a_401_and_nothing_is_stored(shop):
    body = order_body(shop, "NW-1042", updated=dt.datetime.now(dt.UTC))

    forged = deliver(shop, "orders/updated", body, secret="not-the-app-secret")
    elsewhere = deliver(shop, "orders/updated", body, domain="someone-else.myshopify.com")
    nobody = deliver(shop, "orders/updated", body, url="/inbound/shopify/lumen/")

    assert forged.status_code == 401 and b"does not verify" in forged.content
    assert elsewhere.status_code == 401 and b"someone-else.myshopify.com" in elsewhere.content
    assert nobody.status_code == 404
    assert ShopifyWebhook.objects.count() == 0


def test_a_body_that_is_not_an_order_is_a_400_with_a_sentence(shop):
    answer = deliver(shop, "orders/updated", {"id": 1})
    assert answer.status_code == 400 and b"not a orders/updated webhook" in answer.content
    assert ShopifyWebhook.objects.count() == 0


def test_the_same_delivery_five_times_at_once_and_an_older_one_last_leave_the_newest(shop):
    gid = order_gid(shop, "NW-1042")
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    newest = order_body(shop, "NW-1042", updated=now, refunded=1000)
    older = order_body(shop, "NW-1042", updated=now - dt.timedelta(minutes=5))
    answers: list[int] = []

    def send(body: dict, webhook_id: str) -> None:
        try:
            answers.append(deliver(shop, "orders/updated", body, webhook_id=webhook_id).status_code)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=send, args=(newest, "wh-newest")) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    send(older, "wh-older")

    assert answers == [200] * 6
    rows = list(ShopifyWebhook.objects.order_by("received_at"))
    assert [r.webhook_id for r in rows] == ["wh-newest", "wh-older"]  # one row per delivery id

    # Processed out of order and at once: the older delivery's processing races the newest.
    outcomes: list[str] = []

    def process(row_id: int) -> None:
        try:
            outcomes.append(order_webhook_process(row_id))
        finally:
            close_old_connections()

    racers = [threading.Thread(target=process, args=(r.pk,)) for r in rows[::-1] * 3]
    for t in racers:
        t.start()
    for t in racers:
        t.join()

    held = ShopifyOrder.objects.get(gid=gid)
    assert held.updated_at == now and held.refunded_cents == 1000
    order = Order.objects.get(pk=held.order_id)
    assert order.source == "shopify" and order.version == int(now.timestamp()) * 1_000_000
    assert Order.objects.filter(reference="NW-1042").count() == 1
    assert {r.status for r in ShopifyWebhook.objects.all()} == {"processed"}
    assert len(set(outcomes)) == 2  # each row concluded once, and said the same every time


def test_a_refund_made_in_shopifys_admin_reaches_the_mirror_through_the_workflow(
    dbos_executor, shop, live_server
):
    from deskhand.domain.desk.orders import order_source
    from deskhand.domain.store.models import ShopifyConnection

    gid = order_gid(shop, "NW-1042")
    connection = ShopifyConnection.objects.get(merchant__slug="northwind")
    # The mirror holds the order once a run has read it.
    order_source(merchant_id=connection.merchant_id, kind="shopify").order("NW-1042")
    with connection.client() as client:
        for topic in ("orders/updated", "refunds/create"):
            client.webhook_subscribe(topic, f"{live_server.url}{URL}")

    shop.refund_directly(gid, 700)

    until(
        "both deliveries processed by their workflows",
        lambda: ShopifyWebhook.objects.filter(status="processed").count() == 2,
    )
    assert {d.status for d in shop.deliveries} == {200}
    held = ShopifyOrder.objects.get(gid=gid)
    assert held.refunded_cents == 700


def test_customers_redact_erases_the_customer_as_the_system_once_no_run_is_open(shop):
    from agent.privacy.platform import redact_webhook_process

    dana = Customer.objects.get(email="dana.whitfield@example.com")
    body = {
        "shop_id": 1,
        "shop_domain": shop.shop_domain,
        "customer": {"id": 5, "email": dana.email, "phone": None},
        "orders_to_redact": [],
    }
    assert deliver(shop, "customers/redact", body, webhook_id="wh-redact").status_code == 200
    row = ShopifyWebhook.objects.get(webhook_id="wh-redact")

    outcome = redact_webhook_process(row.pk)

    dana.refresh_from_db()
    assert dana.erased_at is not None and "erased by the system" in outcome
    event = AuditEvent.objects.get(action="customer.erase")
    assert event.actor_label == "the system" and event.channel == "system"
    assert event.detail["asked_by"] == "shopify customers/redact wh-redact"
    # A redelivery is the same row, already processed: nothing happens twice.
    assert deliver(shop, "customers/redact", body, webhook_id="wh-redact").content == (
        b"Already stored.\n"
    )
    assert redact_webhook_process(row.pk) == outcome


def test_customers_redact_waits_for_an_open_run_of_theirs(dbos_executor, shop):
    from agent.privacy.platform import redact_webhook_process, redactions_waiting
    from agent.run.services import run_cancel
    from tests.durability.helpers import start, user
    from tests.fixtures.dbos import wait_parked, wait_terminal

    owner = "owner@northwind.test"
    run = start("NW-1", owner)
    wait_parked(str(run.id))  # open: parked at a person's decision
    email = run.ticket.customer.email
    body = {"shop_domain": shop.shop_domain, "customer": {"id": 5, "email": email}}
    deliver(shop, "customers/redact", body, webhook_id="wh-wait")
    row = ShopifyWebhook.objects.get(webhook_id="wh-wait")

    outcome = redact_webhook_process(row.pk)

    assert outcome.startswith(f"waiting: run {run.pk} on NW-1")
    row.refresh_from_db()
    assert row.status == "received" and row.outcome == outcome
    assert Customer.objects.get(pk=run.ticket.customer_id).erased_at is None
    run_cancel(run=run, user=user(owner))
    wait_terminal(str(run.id))
    until(
        "the next pass erases the customer",
        lambda: redactions_waiting(run.merchant_id) == 1,
    )
    assert Customer.objects.get(pk=run.ticket.customer_id).erased_at is not None
