"""Orders the store's own system pushes: an upsert ordered by the store's version.

The store (any platform Deskhand has no connector for) sends each order whole, with its own
revision number ``version``, through ``PUT /api/v1/orders/{reference}`` or, for a back
catalogue, ``manage.py import_orders``. Both come here. The rule, one order at a time:

* a new reference is stored (``created``);
* a higher version replaces the stored order and its lines (``updated``);
* the same version with the same content changes nothing (``unchanged``: a retry);
* an older version, or the same version with other content, is refused (``PushRefused``,
  409) and the stored, newer order kept — so deliveries that arrive out of order never move
  an order backwards, and the sender learns that its write lost.

Pushes for one merchant are serialised by the merchant's row lock (``Merchant.locked``), as
inbound mail is: two concurrent pushes of one order (or of two orders of one new customer)
are one after the other, the second deciding on what the first wrote.

Refunds are never pushed: they are made by Deskhand (the refund tool, through the
merchant's refund adapter) against the pushed row, and told back to the store by a
``refund.created`` webhook.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Literal

from django.db import transaction

from deskhand.domain.desk.models import (
    Merchant,
    Order,
    OrderItem,
    OrderSourceKind,
    OrderStatus,
)
from deskhand.domain.desk.thread import customer_for_address

CURRENCY = re.compile(r"^[A-Z]{3}$")
Outcome = Literal["created", "updated", "unchanged"]


class PushRefused(Exception):
    """A push that was not stored; ``status`` is 409 (conflict with what is stored) or 422
    (the order itself is wrong), ``kind`` names the rule, the message is a sentence for the
    sender."""

    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


@dataclasses.dataclass(frozen=True, slots=True)
class PushedLine:
    sku: str
    description: str
    quantity: int
    unit_price_cents: int


@dataclasses.dataclass(frozen=True, slots=True)
class PushedOrder:
    """An order as the store sends it; money in minor units of ``currency``."""

    reference: str
    version: int
    customer_email: str
    customer_name: str
    status: str
    currency: str
    total_cents: int
    placed_at: dt.datetime
    delivered_at: dt.datetime | None = None
    payment_reference: str = ""
    items: tuple[PushedLine, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Pushed:
    order: Order
    outcome: Outcome


def pushed_order_problem(order: PushedOrder) -> str | None:
    """What is wrong with the order itself (whatever is stored), as a sentence, or None."""
    if order.version < 0:
        return "version must be 0 or more."
    if order.status not in OrderStatus.values:
        return f"status must be one of {', '.join(OrderStatus.values)}, not {order.status!r}."
    if not CURRENCY.match(order.currency):
        return f"currency must be three capital letters (like USD), not {order.currency!r}."
    if order.total_cents < 0:
        return "total_cents must be 0 or more."
    if "@" not in order.customer_email.strip():
        return f"customer_email {order.customer_email[:80]!r} is not an email address."
    if order.placed_at.tzinfo is None or (
        order.delivered_at is not None and order.delivered_at.tzinfo is None
    ):
        return "placed_at and delivered_at must carry a time zone (like 2026-12-01T10:00:00Z)."
    for n, line in enumerate(order.items, 1):
        if not line.sku.strip():
            return f"item {n} has no sku."
        if line.quantity < 1:
            return f"item {n} ({line.sku}) must have a quantity of 1 or more."
        if line.unit_price_cents < 0:
            return f"item {n} ({line.sku}) must have a unit_price_cents of 0 or more."
    return None


def _same(stored: Order, order: PushedOrder) -> bool:
    lines = sorted(
        (i.sku, i.description, i.quantity, i.unit_price_cents) for i in stored.items.all()
    )
    pushed = sorted((i.sku, i.description, i.quantity, i.unit_price_cents) for i in order.items)
    return (
        stored.status == order.status
        and stored.currency == order.currency
        and stored.total_cents == order.total_cents
        and stored.placed_at == order.placed_at
        and stored.delivered_at == order.delivered_at
        and stored.payment_reference == order.payment_reference
        and stored.customer.email.lower() == order.customer_email.strip().lower()
        and lines == pushed
    )


def _write(stored: Order, order: PushedOrder, now: dt.datetime) -> None:
    stored.status = order.status
    stored.currency = order.currency
    stored.total_cents = order.total_cents
    stored.placed_at = order.placed_at
    stored.delivered_at = order.delivered_at
    stored.payment_reference = order.payment_reference
    stored.version = order.version
    stored.pushed_at = now
    stored.save()
    stored.items.all().delete()
    OrderItem.objects.bulk_create(
        OrderItem(
            order=stored,
            sku=i.sku.strip(),
            description=i.description,
            quantity=i.quantity,
            unit_price_cents=i.unit_price_cents,
        )
        for i in order.items
    )


def pushed_order_upsert(*, merchant_id: int, order: PushedOrder, now: dt.datetime) -> Pushed:
    """Store the pushed order under the rule of the module's docstring, or ``PushRefused``.

    One transaction (a savepoint inside the caller's, as the CSV import's is): a refusal
    leaves nothing written.
    """
    problem = pushed_order_problem(order)
    if problem:
        raise PushRefused(422, "invalid-order", f"Order {order.reference}: {problem}")
    with transaction.atomic():
        merchant = Merchant.locked(merchant_id)
        stored = (
            Order.objects.select_for_update()
            .select_related("customer")
            .filter(merchant=merchant, reference__iexact=order.reference.strip())
            .first()
        )
        if stored is None:
            customer = customer_for_address(
                merchant=merchant, address=order.customer_email, name=order.customer_name
            )
            created = Order(
                merchant=merchant,
                customer=customer,
                reference=order.reference.strip(),
                source=OrderSourceKind.PUSHED,
            )
            _write(created, order, now)
            return Pushed(order=created, outcome="created")
        if stored.source != OrderSourceKind.PUSHED:
            raise PushRefused(
                409,
                "not-pushed",
                f"Order {stored.reference} was made in Deskhand, not pushed by your system; "
                "it is not replaced. Push it under another reference.",
            )
        if order.version < stored.version:
            raise PushRefused(
                409,
                "stale-version",
                f"Version {order.version} of order {stored.reference} is older than the stored "
                f"version {stored.version}; the newer one is kept.",
            )
        if order.version == stored.version:
            if _same(stored, order):
                return Pushed(order=stored, outcome="unchanged")
            raise PushRefused(
                409,
                "version-reused",
                f"Version {order.version} of order {stored.reference} is already stored with "
                "other content; send the change with a higher version.",
            )
        if stored.customer.email.lower() != order.customer_email.strip().lower():
            raise PushRefused(
                409,
                "customer-changed",
                f"Order {stored.reference} belongs to another customer; an order's customer "
                "does not change.",
            )
        refunded = stored.refunded_cents()
        if order.total_cents < refunded:
            raise PushRefused(
                409,
                "below-refunded",
                f"Order {stored.reference} has {refunded} (minor units) refunded already; its "
                f"total cannot become {order.total_cents}.",
            )
        if stored.refunds.exists() and order.currency != stored.currency:
            raise PushRefused(
                409,
                "currency-changed",
                f"Order {stored.reference} has refunds in {stored.currency}; its currency "
                "does not change.",
            )
        _write(stored, order, now)
        return Pushed(order=stored, outcome="updated")
