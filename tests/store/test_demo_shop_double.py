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
    line = demo_script().shop_double_setup(shop, "northwind")
    northwind = Merchant.objects.get(slug="northwind")
    seeded_orders = Order.objects.filter(merchant=northwind).count()
    assert seeded_orders > 0 and len(shop.orders) == seeded_orders
    assert f"{seeded_orders} orders, {len(TOPICS)} webhook subscriptions" in line
    assert shop.url in line
    # The worker and the web console, started after, find the double through their environment.
    assert os.environ["DESKHAND_SHOPIFY_BASE_URL"] == shop.url == dj.DESKHAND_SHOPIFY_BASE_URL
    assert northwind.order_source == "shopify"
    connection = ShopifyConnection.objects.get(merchant=northwind)
    assert connection.shop_domain == shop.shop_domain
    address = shopify_webhook_address(northwind)
    assert {(s.topic, s.uri) for s in shop.subscriptions.values()} == {
        (t.upper().replace("/", "_"), address) for t in TOPICS
    }
    # The connection reads the mirrored orders at the double, as the agent will.
    order = Order.objects.filter(merchant=northwind).select_related("customer").first()
    assert order is not None
    with connection.client() as client:
        found = client.orders_by_email(order.customer.email)
    assert any(o.total == order.total_cents for o in found)


def test_make_demo_passes_shop_to_the_script():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"\$\(if \$\(SHOP\),--shop \$\(SHOP\)\)", makefile)
    assert "make demo SHOP=double" in makefile
