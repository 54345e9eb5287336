"""The seeded world with Northwind's orders at the Shopify double instead of in this database.

``northwind_on_shopify(shop)`` gives the double the seeded orders (``mirror_seeded_orders``:
same names, same customers' emails, each paid by one sale), retires Northwind's ``local``
rows (its orders now live at Shopify: the mirror would refuse a name a local row holds),
connects the store (token and client secret sealed) and switches Northwind's order source
to ``shopify``. The caller points ``DESKHAND_SHOPIFY_BASE_URL`` at the double.
"""

from __future__ import annotations

from deskhand.domain.desk.models import Merchant, Order
from deskhand.domain.store.models import ShopifyConnection
from tests.support.shopify_double import ShopifyDouble, mirror_seeded_orders


def northwind_on_shopify(shop: ShopifyDouble) -> Merchant:
    mirror_seeded_orders(shop, "northwind")
    merchant = Merchant.objects.get(slug="northwind")
    Order.objects.filter(merchant=merchant, source="local").delete()
    ShopifyConnection.connect(
        merchant=merchant,
        shop_domain=shop.shop_domain,
        access_token=shop.access_token,
        webhook_secret=shop.client_secret,
    )
    merchant.order_source = "shopify"
    merchant.save(update_fields=["order_source"])
    return merchant


def order_gid(shop: ShopifyDouble, name: str) -> str:
    return next(o.gid for o in shop.orders.values() if o.name == name)
