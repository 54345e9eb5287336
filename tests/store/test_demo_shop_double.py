"""``make demo SHOP=double``: the demo's setup against the Shopify double — Northwind's seeded
orders mirrored into it, Northwind connected to it through the owner's own connect (token
checked, subscriptions made), its orders read from Shopify — and the Makefile says so."""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

import pytest
from django.conf import settings as dj

from approvals.store_connection import TOPICS, shopify_webhook_address
from deskhand.domain.desk.models import Merchant, Order
from deskhand.domain.desk.orders import merchant_order_source
from deskhand.domain.store.models import ShopifyConnection
from tests.support.shopify_double import ShopifyDouble

ROOT = Path(__file__).resolve().parents[2]


def demo_script():
    spec = importlib.util.spec_from_file_location("demo_script", ROOT / "scripts" / "demo.py")
    assert spec and spec.loader
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    return demo


@pytest.fixture
def shop(settings, monkeypatch):
    settings.DESKHAND_SHOPIFY_BASE_URL = ""  # the setup sets it; the fixture puts it back
    settings.DESKHAND_CONSOLE_URL = "http://localhost:8000"  # the demo's console address
    monkeypatch.setenv("DESKHAND_SHOPIFY_BASE_URL", "")  # removed again after the test
    double = ShopifyDouble(shop_domain="northwind-demo.myshopify.com").start()
    yield double
    double.stop()


def test_the_demo_connects_northwind_to_the_shopify_double_with_its_seeded_orders(seeded, shop):
    northwind = Merchant.objects.get(slug="northwind")
    seeded = list(
        Order.objects.filter(merchant=northwind).select_related("customer").order_by("pk")
    )
    line = demo_script().shop_double_setup(shop, "northwind")
    northwind.refresh_from_db()
    assert seeded and len(shop.orders) == len(seeded)
    assert f"{len(seeded)} orders, {len(TOPICS)} webhook subscriptions" in line
    assert shop.url in line
    # The worker and the web console, started after, find the double through their environment.
    assert os.environ["DESKHAND_SHOPIFY_BASE_URL"] == shop.url == dj.DESKHAND_SHOPIFY_BASE_URL
    assert northwind.order_source == "shopify"
    # Its own rows are retired (a mirror never merges a Shopify order into a same-named row).
    assert not Order.objects.filter(merchant=northwind, source="local").exists()
    connection = ShopifyConnection.objects.get(merchant=northwind)
    assert connection.shop_domain == shop.shop_domain
    address = shopify_webhook_address(northwind)
    assert {(s.topic, s.uri) for s in shop.subscriptions.values()} == {
        (t.upper().replace("/", "_"), address) for t in TOPICS
    }
    # The merchant's order source reads a seeded order at the double, as the agent will.
    first = seeded[0]
    facts = merchant_order_source(northwind.pk).order(first.reference)
    assert facts is not None and facts.source == "shopify"
    assert facts.total_cents == first.total_cents
    assert facts.customer_email == first.customer.email


def test_make_demo_passes_shop_to_the_script():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"\$\(if \$\(SHOP\),--shop \$\(SHOP\)\)", makefile)
    assert "make demo SHOP=double" in makefile
