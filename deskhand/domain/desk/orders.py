"""Where a merchant's orders are read from: one interface, whatever the source.

The agent's order tools (``agent.tools.reads``), the refund pre-check that guards the gate
and the run's refund ceilings (``agent.run.bounds``) and the ticket page ask an
``OrderSource`` and get ``OrderFacts`` back — never an ``Order`` row — so a merchant whose
orders live at Shopify, or in its own system, is worked exactly like the demo's.

Three sources (``Merchant.order_source``, chosen on the settings page):

* ``local`` — this database's ``Order`` rows made in Deskhand (the seed, the demo).
* ``pushed`` — ``Order`` rows the store's own system sent (``PUT /api/v1/orders/{ref}``,
  ``manage.py import_orders``; ``deskhand.domain.desk.pushed``). Their refunds are made here
  (or at the merchant's payment provider) and told back by a ``refund.created`` webhook.
* ``shopify`` — read from the store's Admin API and mirrored into ``Order`` rows of
  ``source="shopify"`` (``deskhand.domain.store.mirror.ShopifyOrderSource``, registered here
  by the store app with ``register_source``, so this package never imports the client).

A run reads through the source it started with (``Run.order_source``), so a merchant who
changes source mid-run never changes the facts under a run or its approvals.

Money is integer minor units of the order's currency. ``refunded_cents`` is money moved
and confirmed; ``in_flight_cents`` was claimed at a payment provider and not yet confirmed
(it may have moved), so it counts against ``remainder_cents``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Protocol

from deskhand.domain.desk import selectors
from deskhand.domain.desk.models import Merchant, Order, OrderSourceKind, RefundStatus


class SourceUnavailable(Exception):
    """The merchant's order source cannot be read now; the message says why, in a sentence."""


@dataclasses.dataclass(frozen=True, slots=True)
class OrderLine:
    sku: str
    description: str
    quantity: int
    unit_price_cents: int

    @property
    def line_cents(self) -> int:
        return self.quantity * self.unit_price_cents


@dataclasses.dataclass(frozen=True, slots=True)
class RefundFact:
    amount_cents: int
    reason: str
    created_at: dt.datetime
    in_flight: bool


@dataclasses.dataclass(frozen=True, slots=True)
class OrderFacts:
    """An order as every reader weighs it, whichever system holds it.

    ``order_id`` and ``customer_id`` are this database's rows (``local``, ``pushed``), which
    a refund made here locks and points at; ``None`` for an order read from a platform, whose
    customer is known by ``customer_email``.
    """

    reference: str
    status: str
    currency: str
    total_cents: int
    refunded_cents: int
    in_flight_cents: int
    placed_at: dt.datetime
    delivered_at: dt.datetime | None
    cancelled_at: dt.datetime | None
    customer_name: str
    customer_email: str
    items: tuple[OrderLine, ...] = ()
    refunds: tuple[RefundFact, ...] = ()
    source: str = OrderSourceKind.LOCAL
    order_id: int | None = None
    customer_id: int | None = None

    def belongs_to(self, *, customer_id: int, email: str) -> bool:
        """Whether the order is this customer's: by row where this database holds both, by
        address where a platform does."""
        if self.customer_id is not None:
            return self.customer_id == customer_id
        return self.customer_email.strip().lower() == email.strip().lower()

    @property
    def remainder_cents(self) -> int:
        """What may still be refunded: money in flight counts against it (it may have moved)."""
        return self.total_cents - self.refunded_cents - self.in_flight_cents

    @property
    def status_display(self) -> str:
        return self.status.capitalize()


class OrderSource(Protocol):
    """What every source answers. ``orders_for_customer`` is newest first; ``order`` is
    ``None`` for a reference the merchant has no order under. Both may raise
    ``SourceUnavailable``."""

    @property
    def kind(self) -> str: ...

    def orders_for_customer(self, email: str, *, limit: int = 20) -> list[OrderFacts]: ...

    def order(self, reference: str) -> OrderFacts | None: ...


def facts_of(order: Order) -> OrderFacts:
    """An ``Order`` row (with its customer, items and refunds read) as ``OrderFacts``."""
    refunds = tuple(
        RefundFact(
            amount_cents=r.amount_cents,
            reason=r.reason,
            created_at=r.created_at,
            in_flight=r.status == RefundStatus.PENDING,
        )
        for r in order.refunds.all()
    )
    return OrderFacts(
        reference=order.reference,
        status=order.status,
        currency=order.currency,
        total_cents=order.total_cents,
        refunded_cents=sum(r.amount_cents for r in refunds if not r.in_flight),
        in_flight_cents=sum(r.amount_cents for r in refunds if r.in_flight),
        placed_at=order.placed_at,
        delivered_at=order.delivered_at,
        cancelled_at=order.cancelled_at,
        customer_name=order.customer.name,
        customer_email=order.customer.email,
        items=tuple(
            OrderLine(
                sku=i.sku,
                description=i.description,
                quantity=i.quantity,
                unit_price_cents=i.unit_price_cents,
            )
            for i in sorted(order.items.all(), key=lambda i: (i.sku, i.pk))
        ),
        refunds=refunds,
        source=order.source,
        order_id=order.pk,
        customer_id=order.customer_id,
    )


@dataclasses.dataclass(frozen=True)
class DatabaseOrderSource:
    """``local`` and ``pushed``: the merchant's ``Order`` rows of that ``source``.

    Scoped in SQL by merchant and source, so a merchant on ``pushed`` never reads the demo
    rows it had under ``local`` (nor the other way round).
    """

    merchant_id: int
    kind: str

    def order(self, reference: str) -> OrderFacts | None:
        found = selectors.order_get(
            merchant_id=self.merchant_id, reference=reference, source=self.kind
        )
        return facts_of(found) if found is not None else None

    def orders_for_customer(self, email: str, *, limit: int = 20) -> list[OrderFacts]:
        rows = selectors.customer_orders_by_email(
            merchant_id=self.merchant_id, email=email, source=self.kind, limit=limit
        )
        return [facts_of(o) for o in rows]


@dataclasses.dataclass(frozen=True)
class UnconnectedSource:
    """A platform source whose app is not installed here: every read says so in words."""

    merchant_id: int
    kind: str

    def _refuse(self) -> SourceUnavailable:
        return SourceUnavailable(
            f"this merchant reads its orders from {self.kind}, which is not connected here: "
            "its orders cannot be read"
        )

    def order(self, reference: str) -> OrderFacts | None:
        raise self._refuse()

    def orders_for_customer(self, email: str, *, limit: int = 20) -> list[OrderFacts]:
        raise self._refuse()


_PLATFORMS: dict[str, Callable[[int], OrderSource]] = {}


def register_source(kind: str, make: Callable[[int], OrderSource]) -> None:
    """A platform's source, registered by the app that talks to it (``shopify``:
    ``deskhand.domain.store``, in its ``ready``). The desk never imports the platform's
    client; the platform's package imports the desk."""
    _PLATFORMS[kind] = make


def order_source(*, merchant_id: int, kind: str) -> OrderSource:
    """The source of ``kind`` for this merchant (a run passes the kind it started with)."""
    if kind == OrderSourceKind.SHOPIFY:
        make = _PLATFORMS.get(kind)
        return make(merchant_id) if make else UnconnectedSource(merchant_id, kind)
    if kind in (OrderSourceKind.LOCAL, OrderSourceKind.PUSHED):
        return DatabaseOrderSource(merchant_id=merchant_id, kind=kind)
    raise SourceUnavailable(f"{kind!r} is not an order source")


def merchant_order_source(merchant_id: int) -> OrderSource:
    """The source the merchant reads from now (for pages; a run uses its own snapshot)."""
    kind = Merchant.objects.filter(pk=merchant_id).values_list("order_source", flat=True).get()
    return order_source(merchant_id=merchant_id, kind=kind)
