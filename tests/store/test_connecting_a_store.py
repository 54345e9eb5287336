"""An owner connects the merchant's Shopify store on the console: the token checked with
Shopify, the webhook subscriptions created, the connection and its audit event saved together;
the secrets never shown again. Through the console (Django's test client) and the Shopify
double's real socket.
"""

from __future__ import annotations

import json

import pytest

from approvals.models import AuditEvent
from approvals.store_connection import TOPICS, shopify_webhook_address
from deskhand.domain.desk.models import Merchant
from deskhand.domain.store.models import ShopifyConnection
from tests.console.conftest import LU_OWNER, NW_AGENT, NW_OWNER, NW_VIEWER, client_for
from tests.support.shopify_double import ShopifyDouble

URL = "/merchant/shopify/"
DISCONNECT = "/merchant/shopify/disconnect"
SETTINGS = "/merchant/settings/"


@pytest.fixture
def shop(settings):
    double = ShopifyDouble(shop_domain="northwind-test.myshopify.com").start()
    settings.DESKHAND_SHOPIFY_BASE_URL = double.url
    settings.DESKHAND_CONSOLE_URL = "http://127.0.0.1:8000"  # the double accepts loopback http
    yield double
    double.stop()


def _northwind() -> Merchant:
    return Merchant.objects.get(slug="northwind")


def _connect(shop: ShopifyDouble, email: str = NW_OWNER, **changes: str):
    data = {
        "shop_domain": shop.shop_domain,
        "access_token": shop.access_token,
        "webhook_secret": shop.client_secret,
        **changes,
    }
    return client_for(email).post(URL, data)


def _subscribed(shop: ShopifyDouble) -> set[tuple[str, str]]:
    return {(s.topic, s.uri) for s in shop.subscriptions.values()}


def _settings_form(**changes: object) -> dict[str, object]:
    page = client_for(NW_OWNER).get(SETTINGS)
    form = page.context["form"]
    data = {n: form[n].value() for n in form.fields if form[n].value() not in (None, False)}
    data.update(changes)
    return data


def test_an_owner_connects_the_store_its_subscriptions_are_made_and_the_secrets_never_shown(
    seeded, shop
):
    r = _connect(shop)
    page = r.content.decode()
    assert r.status_code == 200, page
    assert "Connected to northwind-test.myshopify.com" in page
    address = shopify_webhook_address(_northwind())
    assert address == "http://127.0.0.1:8000/inbound/shopify/northwind/"
    assert _subscribed(shop) == {(t.upper().replace("/", "_"), address) for t in TOPICS}
    connection = ShopifyConnection.objects.get(merchant=_northwind())
    assert connection.shop_domain == shop.shop_domain
    assert connection.webhook_secret() == shop.client_secret
    # Write-only: the page after connecting, the settings page, every member's view.
    for email in (NW_OWNER, NW_VIEWER):
        for url in (URL, SETTINGS):
            shown = client_for(email).get(url).content.decode()
            assert shop.access_token not in shown and shop.client_secret not in shown
    shown = client_for(NW_VIEWER).get(URL).content.decode()
    assert "northwind-test.myshopify.com" in shown and ">set<" in shown
    assert "customers/redact" in shown and "not subscriptions" in shown
    assert NW_OWNER in shown and "replaced: access token, client secret" in shown  # who, what
    event = AuditEvent.objects.get(action="store.shopify_connected")
    assert event.actor_name == NW_OWNER and event.channel == "web"
    assert event.detail["shop_domain"] == shop.shop_domain
    assert event.detail["subscribed"] == list(TOPICS)
    said = json.dumps(event.detail)
    assert shop.access_token not in said and shop.client_secret not in said


def test_a_token_shopify_refuses_is_a_sentence_and_nothing_is_saved(seeded, shop):
    r = _connect(shop, access_token="shpat_not_the_token")
    assert r.status_code == 400
    assert "Shopify refused this access token" in r.content.decode()
    assert "shpat_not_the_token" not in r.content.decode()
    assert not ShopifyConnection.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="store.").exists()
    assert shop.subscriptions == {}


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"shop_domain": "northwind.example.com"}, "is not a store&#x27;s address"),
        ({"access_token": ""}, "Paste the store&#x27;s Admin API access token."),
        ({"webhook_secret": ""}, "Paste the app&#x27;s API secret key"),
    ],
)
def test_a_form_that_fails_says_why_and_asks_shopify_nothing(seeded, shop, changes, said):
    r = _connect(shop, **changes)
    assert r.status_code == 400 and said in r.content.decode()
    assert not ShopifyConnection.objects.exists() and shop.requests == []


def test_an_address_shopify_will_not_call_is_its_sentence_and_nothing_is_saved(
    seeded, shop, settings
):
    settings.DESKHAND_CONSOLE_URL = "http://deskhand.example"  # Shopify wants https
    r = _connect(shop)
    assert r.status_code == 400
    assert "Address protocol http:// is not supported" in r.content.decode()
    assert not ShopifyConnection.objects.exists()


def test_connecting_again_replaces_the_token_keeps_blank_secrets_and_makes_no_subscription_twice(
    seeded, shop
):
    assert _connect(shop).status_code == 200
    first = ShopifyConnection.objects.get()
    shop.access_token = "shpat_rotated_in_the_shopify_admin"
    r = _connect(shop, webhook_secret="")  # the new token; the secret kept
    assert r.status_code == 200 and "Subscribed now" not in r.content.decode()
    again = ShopifyConnection.objects.get()
    assert again.pk == first.pk and again.access_token_sealed != first.access_token_sealed
    assert again.webhook_secret() == shop.client_secret
    assert len(shop.subscriptions) == len(TOPICS)
    events = AuditEvent.objects.filter(action="store.shopify_connected").order_by("pk")
    assert [e.detail["replaced"] for e in events] == [
        ["access token", "client secret"],
        ["access token"],
    ]
    # Shopify dropped the subscriptions: connecting again with both fields blank remakes them.
    shop.drop_subscriptions()
    r = _connect(shop, access_token="", webhook_secret="")
    assert r.status_code == 200 and "Subscribed now: orders/create" in r.content.decode()
    assert len(shop.subscriptions) == len(TOPICS)


def test_only_an_owner_connects_or_disconnects(seeded, shop):
    for email in (NW_AGENT, NW_VIEWER):
        r = _connect(shop, email=email)
        assert r.status_code == 403 and "only an owner" in r.content.decode()
    assert not ShopifyConnection.objects.exists() and shop.requests == []
    _connect(shop)
    for email in (NW_AGENT, NW_VIEWER):
        assert client_for(email).post(DISCONNECT).status_code == 403
    assert ShopifyConnection.objects.filter(merchant=_northwind()).exists()
    # Lumen's owner disconnects Lumen's (none), never Northwind's.
    r = client_for(LU_OWNER).post(DISCONNECT)
    assert r.status_code == 409 and "No Shopify store is connected" in r.content.decode()
    assert ShopifyConnection.objects.filter(merchant=_northwind()).exists()


def test_shopify_as_the_order_source_needs_a_connected_store_and_then_blocks_disconnecting(
    seeded, shop
):
    r = client_for(NW_OWNER).post(SETTINGS, _settings_form(order_source="shopify"))
    assert r.status_code == 400 and "Connect the Shopify store first" in r.content.decode()
    assert _northwind().order_source == "local"
    _connect(shop)
    r = client_for(NW_OWNER).post(SETTINGS, _settings_form(order_source="shopify"))
    assert r.status_code == 200 and _northwind().order_source == "shopify"
    r = client_for(NW_OWNER).post(DISCONNECT)
    assert r.status_code == 409 and "choose another order source" in r.content.decode()
    assert ShopifyConnection.objects.exists()
    client_for(NW_OWNER).post(SETTINGS, _settings_form(order_source="local"))
    r = client_for(NW_OWNER).post(DISCONNECT)
    assert r.status_code == 200 and "Disconnected from" in r.content.decode()
    assert not ShopifyConnection.objects.exists()
    event = AuditEvent.objects.get(action="store.shopify_disconnected")
    assert event.actor_name == NW_OWNER and event.detail == {"shop_domain": shop.shop_domain}
