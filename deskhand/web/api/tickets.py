"""Tickets: open one (with the customer's first message), list, read with its thread, and
append a customer's message through the same thread function inbound mail uses."""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from django.db import transaction
from django.http import HttpRequest
from ninja import Header, Path, Query, Router, Schema

from deskhand.domain.apikeys.models import Scope
from deskhand.domain.desk.models import Merchant, MessageChannel, Ticket
from deskhand.domain.desk.thread import (
    customer_for_address,
    thread_customer_message_add,
    ticket_open,
)
from deskhand.web.api import present, schemas
from deskhand.web.api.core import audit, idempotent, key_person, require_scope
from deskhand.web.api.problems import Problem, not_found
from deskhand.web.console import selectors

router = Router(tags=["tickets"])

# Its length and characters are checked by ``core.idempotent`` (a 400 naming it), and
# declared in the document by ``core.Api``.
IdempotencyKey = Annotated[str | None, Header(alias="Idempotency-Key")]
Reference = Annotated[str, Path(pattern=schemas.REFERENCE)]


class TicketFilters(Schema):
    status: Literal["open", "pending", "resolved", "escalated"] | None = None
    priority: Literal["low", "normal", "high", "urgent"] | None = None
    cursor: schemas.Cursor = None
    limit: schemas.Limit = 50


def _cursor(ticket_id: str | None) -> str | None:
    if ticket_id is None:
        return None
    return base64.urlsafe_b64encode(f"t|{ticket_id}".encode()).decode().rstrip("=")


def _before(cursor: str | None) -> int | None:
    if not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, number = raw.partition("|")
        if kind != "t" or not number.isdigit() or len(number) > 18:
            raise ValueError
        return int(number)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise Problem(
            400,
            "bad-cursor",
            "The cursor is not one this API wrote; start again without it.",
            field="cursor",
        ) from None


def ticket_of(request: HttpRequest, reference: str) -> Ticket:
    key = request.auth  # type: ignore[attr-defined]
    found = selectors.ticket_get(merchant_id=key.merchant_id, reference=reference)
    if found is None:
        raise not_found("ticket")
    return found


@router.post("/tickets", response={201: schemas.TicketDetail}, summary="Open a ticket")
def ticket_create(
    request: HttpRequest, payload: schemas.TicketIn, idempotency_key: IdempotencyKey = None
) -> Any:
    key = require_scope(request, Scope.WRITE)

    def act() -> tuple[int, Any, int | None]:
        person = key_person(key, "open tickets")
        with transaction.atomic():
            # The merchant's lock, as inbound mail takes it: one new customer per address.
            merchant = Merchant.locked(key.merchant_id)
            customer = customer_for_address(
                merchant=merchant, address=payload.customer_email, name=payload.customer_name
            )
            ticket = ticket_open(merchant=merchant, customer=customer, subject=payload.subject)
            thread_customer_message_add(
                ticket=ticket,
                channel=MessageChannel.API,
                body=payload.body,
                subject=payload.subject,
                from_address=customer.email,
            )
            audit(request, action="api.ticket.create", person=person, ticket=ticket.reference)
        ticket = Ticket.objects.select_related("customer").get(pk=ticket.pk)
        return 201, present.ticket_detail(ticket), ticket.customer_id

    return idempotent(request, idempotency_key, act)


@router.get("/tickets", response=schemas.TicketPage, summary="List tickets, newest first")
def ticket_list(request: HttpRequest, filters: Query[TicketFilters]) -> Any:
    key = require_scope(request, Scope.READ)
    page = selectors.tickets_page(
        merchant_id=key.merchant_id,
        status=filters.status or "",
        priority=filters.priority or "",
        before_id=_before(filters.cursor),
        limit=filters.limit,
    )
    return {
        "items": [present.ticket(t) for t in page.rows],
        "next_cursor": _cursor(page.next_cursor),
    }


@router.get(
    "/tickets/{reference}", response=schemas.TicketDetail, summary="A ticket and its thread"
)
def ticket_get(request: HttpRequest, reference: Reference) -> Any:
    require_scope(request, Scope.READ)
    return present.ticket_detail(ticket_of(request, reference))


@router.post(
    "/tickets/{reference}/messages",
    response={201: schemas.MessageCreated},
    summary="Append the customer's message to a ticket's thread",
)
def ticket_message_add(
    request: HttpRequest,
    reference: Reference,
    payload: schemas.MessageIn,
    idempotency_key: IdempotencyKey = None,
) -> Any:
    key = require_scope(request, Scope.WRITE)
    ticket = ticket_of(request, reference)

    def act() -> tuple[int, Any, int | None]:
        person = key_person(key, "add customer messages")
        if ticket.customer.erased_at is not None:
            raise Problem(409, "erased", f"{ticket.reference}'s customer was erased.")
        with transaction.atomic():
            message = thread_customer_message_add(
                ticket=ticket,
                channel=MessageChannel.API,
                body=payload.body,
                from_address=ticket.customer.email,
            )
            audit(
                request,
                action="api.ticket.message",
                person=person,
                ticket=ticket.reference,
                message=message.pk,
            )
        body = present.dump(
            schemas.MessageCreated,
            {"ticket": ticket.reference, "message": present.message(message)},
        )
        return 201, body, ticket.customer_id

    return idempotent(request, idempotency_key, act)
