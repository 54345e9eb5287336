"""Connecting a Shopify store on the owner's settings page: the webhooks subscribed at the
store (the double, over its socket), the secrets sealed and shown only as "set"; a token the
store refuses saves nothing; only an owner connects."""

from __future__ import annotations

import pytest

from approvals.models import AuditEvent
from deskhand.domain.store.connect import WEBHOOK_TOPICS, subscriptions_missing, webhook_address
from deskhand.domain.store.models import ShopifyConnection
from tests.console.conftest import NW_OWNER, NW_VIEWER, client_for
from tests.support.shopify_double import ShopifyDouble

pytestmark = pytest.mark.django_db

URL = "/merchant/settings/shopify/"


@pytest.fixture
def shop(seeded, settings):
    double = ShopifyDouble().start()
    settings.DESKHAND_SHOPIFY_BASE_URL = double.url
    yield double
    double.stop()


def connect(shop: ShopifyDouble, email: str = NW_OWNER, **changes: str):
    data = {
        "shop_domain": shop.shop_domain,
        "access_token": shop.access_token,
        "webhook_secret": shop.client_secret,
        **changes,
    }
    return client_for(email).post(URL, data)


def test_an_owner_connects_the_store_its_webhooks_are_subscribed_and_its_secrets_never_shown(shop):
    answer = connect(shop)

    assert answer.status_code == 200
    page = answer.content.decode()
    assert "Subscribed: orders/updated, orders/cancelled, refunds/create" in page
    assert shop.access_token not in page and shop.client_secret not in page
    address = webhook_address("northwind")
    assert address.endswith("/inbound/shopify/northwind/")
    assert sorted((s.topic, s.uri) for s in shop.subscriptions.values()) == sorted(
        (t.upper().replace("/", "_"), address) for t in WEBHOOK_TOPICS
    )
    connection = ShopifyConnection.objects.get(merchant__slug="northwind")
    assert connection.token_shown == "set" and connection.webhook_secret_shown == "set"
    assert shop.access_token not in connection.access_token_sealed
    shown = client_for(NW_OWNER).get("/merchant/settings/").content.decode()
    assert shop.shop_domain in shown and shop.access_token not in shown
    event = AuditEvent.objects.get(action="merchant.shopify_connected")
    assert event.detail["subscribed"] == list(WEBHOOK_TOPICS)
    assert shop.access_token not in str(event.detail)
    # health's question: every subscription is there; after Shopify drops them, none is.
    assert subscriptions_missing(connection) == []
    shop.drop_subscriptions()
    assert subscriptions_missing(connection) == list(WEBHOOK_TOPICS)
    # Reconnecting subscribes again what is missing, and nothing twice.
    assert "Subscribed: orders/updated" in connect(shop).content.decode()
    assert len(shop.subscriptions) == len(WEBHOOK_TOPICS)


def test_a_token_the_store_refuses_is_a_400_with_its_sentence_and_saves_nothing(shop):
    answer = connect(shop, access_token="shpat_wrong")

    assert answer.status_code == 400
    assert "Nothing was saved: Shopify did not accept the connection" in answer.content.decode()
    assert not ShopifyConnection.objects.exists() and shop.subscriptions == {}


def test_an_address_that_is_not_a_store_is_a_400_and_saves_nothing(shop):
    answer = connect(shop, shop_domain="northwind.example.com")

    assert answer.status_code == 400 and "your-store.myshopify.com" in answer.content.decode()
    assert not ShopifyConnection.objects.exists()


def test_only_an_owner_connects_the_store(shop):
    answer = connect(shop, email=NW_VIEWER)

    assert answer.status_code == 403 and "only an owner" in answer.content.decode()
    assert not ShopifyConnection.objects.exists() and shop.subscriptions == {}


def test_health_says_when_a_stores_webhook_subscriptions_are_gone(shop):
    import io
    import json

    from django.core.management import call_command

    connect(shop)
    shop.drop_subscriptions()
    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("health", "--json", stdout=out)
    report = json.loads(out.getvalue())
    assert report["ok"] is False
    assert report["shopify"]["northwind"]["missing"] == list(WEBHOOK_TOPICS)
