"""``manage.py health`` asks each connected Shopify store whether its token still works and
its webhook subscriptions still exist, says so in words, and exits non-zero when not."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stdout

import pytest
from django.conf import settings as dj
from django.core.management import call_command

from approvals.store_connection import TOPICS, connect_store
from deskhand.domain.desk.models import Merchant
from deskhand.infra.fleet.lease import Lease
from tests.console.conftest import NW_OWNER, user
from tests.support.shopify_double import ShopifyDouble

pytestmark = pytest.mark.usefixtures("live_worker")  # the rest of the report healthy


@pytest.fixture
def live_worker(transactional_db):
    """A registered worker holding its lease, so the rest of the report is healthy."""
    lease = Lease("pytest-store-health", dj.DESKHAND_APP_VERSION, grace=3, heartbeat=0.5)
    lease.acquire(wait=5)
    lease.start()
    yield lease
    lease.release()


@pytest.fixture
def connected(tseeded, settings):
    shop = ShopifyDouble(shop_domain="northwind-health.myshopify.com").start()
    settings.DESKHAND_SHOPIFY_BASE_URL = shop.url
    settings.DESKHAND_CONSOLE_URL = "http://127.0.0.1:8000"
    connect_store(
        merchant=Merchant.objects.get(slug="northwind"),
        shop_domain=shop.shop_domain,
        access_token=shop.access_token,
        webhook_secret=shop.client_secret,
        by=user(NW_OWNER),
    )
    yield shop
    shop.stop()


def health(*extra: str) -> tuple[int, str]:
    out = io.StringIO()
    code = 0
    with redirect_stdout(out):
        try:
            call_command("health", *extra, stdout=out)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue()


def test_a_connected_store_whose_token_works_and_subscriptions_exist_is_healthy(connected):
    code, text = health()
    assert code == 0, text
    assert "Shopify stores: 1 well of 1 connected" in text
    assert "northwind (northwind-health.myshopify.com): token works, every webhook" in text
    code, out = health("--json")
    store = json.loads(out.strip().splitlines()[-1])["stores"][0]
    assert store["ok"] is True and store["token_works"] is True and store["missing"] == []


def test_subscriptions_shopify_dropped_are_named_and_the_exit_is_not_zero(connected):
    connected.drop_subscriptions()
    code, text = health()
    assert code == 1, text
    assert "NEEDS ATTENTION" in text
    assert "token works; webhook subscriptions missing at" in text
    assert ", ".join(TOPICS) in text and "connects the store again" in text
    code, out = health("--json")
    report = json.loads(out.strip().splitlines()[-1])
    assert report["ok"] is False and report["stores"][0]["missing"] == list(TOPICS)


def test_a_token_shopify_no_longer_accepts_is_said_and_the_exit_is_not_zero(connected):
    connected.access_token = "shpat_revoked_in_the_admin"  # the app was reinstalled
    code, text = health()
    assert code == 1, text
    assert "Shopify refuses the access token: an owner must connect the store again." in text
    assert connected.access_token not in text


def test_a_store_without_its_api_secret_key_is_named_its_webhooks_unverifiable(connected):
    from deskhand.domain.store.models import ShopifyConnection

    ShopifyConnection.objects.update(webhook_secret_sealed="")  # connected by an older page
    code, text = health()
    assert code == 1, text
    assert "token works; no API secret key is set, so no webhook can be verified" in text


def test_healthz_never_asks_shopify(connected, client):
    before = len(connected.requests)
    assert client.get("/healthz").status_code == 200
    assert len(connected.requests) == before
