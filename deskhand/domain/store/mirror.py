"""Shopify's orders mirrored into ``Order``: read at Shopify, kept here only forwards.

Why a mirror and not reads alone: a refund made here points at an ``Order`` row (the
``Refund``, its ledger entry, the run's and the day's ceilings, reconciliation, a
cancellation), and the ticket page and the agent's tools read ``OrderFacts`` whatever the
source. So every order a run reads at Shopify (``ShopifyOrderSource``) and every
``orders/updated`` / ``refunds/create`` webhook (``deskhand.engine.shopify_events``) lands in
one ``Order`` row with ``source="shopify"`` and a ``ShopifyOrder`` beside it holding the
order's Shopify id, its sale and what Shopify counts as refunded.

**Never backwards.** Shopify's ``updatedAt`` is the order's version (also written to
``Order.version`` as microseconds since the epoch): a snapshot older than the stored one
changes nothing, the same one changes nothing, a newer one replaces the mirror. Writers are
serialised by the merchant's row lock (as pushed orders are, and before the order's row, as
a refund takes them), so deliveries racing in any order leave the newest.

A Shopify order's name (``#1001``, stored without the ``#`` as every reference is) shares
the merchant's reference space with its ``local`` and ``pushed`` rows; a name already held
by a row of another source is refused with a sentence, never merged into it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

from django.db import transaction

from deskhand.domain.desk import selectors
from deskhand.domain.desk.models import (
    Customer,
    Merchant,
    Order,
    OrderItem,
    OrderSourceKind,
    OrderStatus,
)
from deskhand.domain.desk.money import minor_from_decimal
from deskhand.domain.desk.orders import OrderFacts, SourceUnavailable, facts_of, register_source
from deskhand.domain.store import shopify
from deskhand.domain.store.models import ShopifyConnection, ShopifyOrder

SHOPIFY = OrderSourceKind.SHOPIFY


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """One order as Shopify said it at ``updated_at`` (from a read or a webhook's body)."""

    gid: str
    name: str
    email: str
    currency: str
    total_cents: int
    refunded_cents: int
    updated_at: dt.datetime
    created_at: dt.datetime | None
    cancelled_at: dt.datetime | None
    financial_status: str
    sale_gid: str = ""
    sale_gateway: str = ""
    shipped: bool | None = None  # None: the snapshot does not say (a webhook's body)
    lines: tuple[shopify.Line, ...] | None = None  # None: not read (a list, a webhook)
    delivered_at: dt.datetime | None = None


def parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def version_of(at: dt.datetime) -> int:
    """``updated_at`` as an integer version (microseconds since the epoch)."""
    return int(at.timestamp()) * 1_000_000 + at.microsecond


def snapshot_of(order: shopify.Order) -> Snapshot:
    updated = parse_time(order.updated_at)
    assert updated is not None
    return Snapshot(
        gid=order.gid,
        name=order.name,
        email=order.email,
        currency=order.currency,
        total_cents=order.total,
        refunded_cents=order.refunded,
        updated_at=updated,
        created_at=parse_time(order.created_at),
        cancelled_at=parse_time(order.cancelled_at),
        financial_status=order.financial_status,
        sale_gid=order.sale.gid if order.sale else "",
        sale_gateway=order.sale.gateway if order.sale else "",
        shipped=order.shipped_at is not None,
        delivered_at=parse_time(order.delivered_at),
        lines=order.lines,
    )


def snapshot_from_webhook(body: dict[str, Any]) -> Snapshot:
    """An ``orders/*`` webhook's body (the REST order) as a ``Snapshot``. Raises ``ValueError``
    (or ``KeyError``) for a body that is not an order."""
    currency = str(body["currency"])
    refunded = 0
    for refund in body.get("refunds") or []:
        for t in refund.get("transactions") or []:
            if str(t.get("kind")) == "refund" and str(t.get("status")) == "success":
                refunded += minor_from_decimal(str(t["amount"]), currency)
    updated = parse_time(str(body["updated_at"]))
    if updated is None:
        raise ValueError("the order has no updated_at")
    return Snapshot(
        gid=str(body.get("admin_graphql_api_id") or f"gid://shopify/Order/{int(body['id'])}"),
        name=str(body["name"]),
        email=str(body.get("email") or ""),
        currency=currency,
        total_cents=minor_from_decimal(str(body["total_price"]), currency),
        refunded_cents=refunded,
        updated_at=updated,
        created_at=parse_time(body.get("created_at")),
        cancelled_at=parse_time(body.get("cancelled_at")),
        financial_status=str(body.get("financial_status") or "").upper(),
    )


def apply(merchant_id: int, snap: Snapshot, *, read: bool = False) -> tuple[Order, str]:
    """Write ``snap`` to the mirror unless what is stored is newer (or as new).

    Answers the order row and what happened: ``created``, ``updated``, ``older`` (a stale
    snapshot: nothing written), ``unchanged`` (the same version, the same facts) or ``tied``
    (the same version with other facts: Shopify's ``updated_at`` counts whole seconds, so
    two changes in one second share it; nothing written, and the caller reads the order at
    Shopify). ``read``: the snapshot is a read of Shopify *now*, which wins a tie. Raises
    ``SourceUnavailable`` when the order's name is held by a row of another source.
    """
    reference = snap.name.strip().lstrip("#").strip()
    with transaction.atomic():
        Merchant.objects.select_for_update().filter(pk=merchant_id).values_list("pk").get()
        held = ShopifyOrder.objects.filter(merchant_id=merchant_id, gid=snap.gid).first()
        created = held is None
        if held is not None:
            order = Order.objects.select_for_update().get(pk=held.order_id)
            if snap.updated_at < held.updated_at:
                return order, "older"
            if snap.updated_at == held.updated_at and not read:
                same = (held.refunded_cents, order.total_cents, order.cancelled_at) == (
                    snap.refunded_cents,
                    snap.total_cents,
                    snap.cancelled_at,
                )
                return order, "unchanged" if same else "tied"
        else:
            other = Order.objects.filter(
                merchant_id=merchant_id, reference__iexact=reference
            ).first()
            if other is not None:
                raise SourceUnavailable(
                    f"the store's order {snap.name} has the same name as order "
                    f"{other.reference} that Deskhand holds from another source "
                    f"({other.source}); the two are never merged, so it cannot be read here"
                )
            customer = _customer(merchant_id, snap.email)
            order = Order(
                merchant_id=merchant_id,
                customer=customer,
                reference=reference,
                source=SHOPIFY,
                placed_at=snap.created_at or snap.updated_at,
                total_cents=snap.total_cents,
                currency=snap.currency,
            )
        order.total_cents = snap.total_cents
        order.currency = snap.currency
        order.cancelled_at = snap.cancelled_at
        if snap.shipped is not None:  # fulfillment as a read says it; a webhook's body keeps it
            order.delivered_at = snap.delivered_at
            order.status = (
                OrderStatus.DELIVERED
                if snap.delivered_at
                else OrderStatus.SHIPPED
                if snap.shipped
                else OrderStatus.PLACED
            )
        if snap.cancelled_at is not None:
            order.status = OrderStatus.CANCELLED
        order.version = version_of(snap.updated_at)
        order.save()
        if held is None:
            held = ShopifyOrder(order=order, merchant_id=merchant_id, gid=snap.gid)
        held.updated_at = snap.updated_at
        held.refunded_cents = snap.refunded_cents
        held.financial_status = snap.financial_status
        if snap.sale_gid:  # a webhook's body does not name the sale: keep what a read said
            held.sale_gid, held.sale_gateway = snap.sale_gid, snap.sale_gateway
        held.save()
        if snap.lines is not None:
            order.items.all().delete()
            OrderItem.objects.bulk_create(
                OrderItem(
                    order=order,
                    sku=(line.sku or "")[:40],
                    description=line.name[:200],
                    quantity=line.quantity,
                    unit_price_cents=line.unit_price,
                )
                for line in snap.lines
            )
        return order, "created" if created else "updated"


def _customer(merchant_id: int, email: str) -> Customer:
    """The merchant's customer with this address (Shopify's orders are found by it)."""
    found = Customer.objects.filter(merchant_id=merchant_id, email__iexact=email.strip()).first()
    if found is not None:
        return found
    return Customer.objects.create(
        merchant_id=merchant_id, email=email.strip(), name=email.split("@")[0] or "Customer"
    )


def facts(order: Order) -> OrderFacts:
    """A mirrored order as ``OrderFacts``: refunded is what Shopify counts (refunds made
    anywhere); in flight is what Deskhand claimed and Shopify has not confirmed yet."""
    held = ShopifyOrder.objects.get(order=order)
    return dataclasses.replace(facts_of(order), refunded_cents=held.refunded_cents)


def _connection(merchant_id: int) -> ShopifyConnection:
    connection = ShopifyConnection.objects.filter(merchant_id=merchant_id).first()
    if connection is None:
        raise SourceUnavailable(
            "this merchant reads its orders from Shopify, and no Shopify store is connected "
            "yet: its orders cannot be read"
        )
    return connection


def _read(order: Order) -> Order:
    found = selectors.order_get(merchant_id=order.merchant_id, reference=order.reference)
    assert found is not None
    return found


@dataclasses.dataclass(frozen=True)
class ShopifyOrderSource:
    """``shopify``: the store's orders read at its Admin API when asked, mirrored, answered
    as ``OrderFacts`` (with the mirror's ``order_id`` and ``customer_id``: a refund made here
    locks and points at that row)."""

    merchant_id: int
    kind: str = SHOPIFY

    def _ask[T](self, what: str, call: Callable[[shopify.ShopifyClient], T]) -> T:
        try:
            with _connection(self.merchant_id).client() as client:
                return call(client)
        except shopify.ShopifyError as exc:
            raise SourceUnavailable(f"Shopify could not be read for {what}: {exc}") from None

    def order(self, reference: str) -> OrderFacts | None:
        found: shopify.Order | None = self._ask(
            f"order {reference.strip()}", lambda c: c.order_by_name(reference.strip())
        )
        if found is None:
            return None
        row, _ = apply(self.merchant_id, snapshot_of(found), read=True)
        return facts(_read(row))

    def orders_for_customer(self, email: str, *, limit: int = 20) -> list[OrderFacts]:
        found: list[shopify.Order] = self._ask(
            "the customer's orders", lambda c: c.orders_by_email(email, first=min(limit, 10))
        )
        return [facts(_read(apply(self.merchant_id, snapshot_of(o), read=True)[0])) for o in found]


def register() -> None:
    """Plug this source in where ``deskhand.domain.desk.orders`` looks (the app's ``ready``)."""
    register_source(SHOPIFY, lambda merchant_id: ShopifyOrderSource(merchant_id=merchant_id))
