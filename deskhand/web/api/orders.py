"""Pushed orders: the store's own system keeps Deskhand's copy of its orders current.

``PUT /orders/{reference}`` is an upsert ordered by the store's ``version``
(``deskhand.domain.desk.pushed``): an older version than the stored one is a 409 and the
newer order stays. It takes a key of the ``orders`` scope — not ``write``, which help desks
hold — and honours ``Idempotency-Key`` as every write of this API does.
"""

from __future__ import annotations

from typing import Annotated, Any

from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from ninja import Header, Path, Router

from deskhand.domain.apikeys.models import Scope
from deskhand.domain.desk.pushed import (
    Pushed,
    PushedLine,
    PushedOrder,
    PushRefused,
    pushed_order_upsert,
)
from deskhand.web.api import present, schemas
from deskhand.web.api.core import audit, idempotent, key_person, require_scope
from deskhand.web.api.problems import Problem

router = Router(tags=["orders"])

IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key")]
OrderReference = Annotated[str, Path(pattern=schemas.ORDER_REFERENCE)]


def _pushed(reference: str, payload: schemas.OrderIn) -> PushedOrder:
    return PushedOrder(
        reference=reference,
        version=payload.version,
        customer_email=payload.customer_email,
        customer_name=payload.customer_name,
        status=payload.status,
        currency=payload.currency,
        total_cents=payload.total_cents,
        placed_at=payload.placed_at,
        delivered_at=payload.delivered_at,
        payment_reference=payload.payment_reference,
        items=tuple(
            PushedLine(
                sku=i.sku,
                description=i.description,
                quantity=i.quantity,
                unit_price_cents=i.unit_price_cents,
            )
            for i in payload.items
        ),
    )


@router.put(
    "/orders/{reference}",
    response={200: schemas.OrderOut, 201: schemas.OrderOut},
    summary="Create or replace an order the store pushes (201 new, 200 replaced or unchanged)",
)
def order_put(
    request: HttpRequest,
    reference: OrderReference,
    payload: schemas.OrderIn,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    key = require_scope(request, Scope.ORDERS)

    def act() -> tuple[int, Any, int | None]:
        person = key_person(key, "push orders")
        with transaction.atomic():
            try:
                done: Pushed = pushed_order_upsert(
                    merchant_id=key.merchant_id,
                    order=_pushed(reference, payload),
                    now=timezone.now(),
                )
            except PushRefused as exc:
                raise Problem(exc.status, exc.kind, str(exc)) from None
            if done.outcome != "unchanged":
                audit(
                    request,
                    action="api.order.put",
                    person=person,
                    order=done.order.reference,
                    version=done.order.version,
                    outcome=done.outcome,
                )
        body = present.dump(schemas.OrderOut, present.pushed_order(done.order, done.outcome))
        return (201 if done.outcome == "created" else 200), body, done.order.customer_id

    return idempotent(request, idempotency_key, act)
