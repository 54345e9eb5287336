"""The read tools, and the lookups every tool shares.

Scope is decided here, from the run's context and never from the model's
arguments: a run sees its own merchant, its own ticket, and only the orders and
details of the customer on that ticket. A reference outside that scope gets the
same kind of answer as one that does not exist, so probing leaks nothing.

Every result is one JSON object (``json.dumps(..., sort_keys=True)``) with
dates as ``YYYY-MM-DD`` in UTC; the shapes are a contract other code parses.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Callable
from typing import Any

from django.utils import timezone

from agent.tools.masking import mask_email
from agent.tools.registry import Handler, Risk, ToolContext, ToolDef, ToolError, ToolOutcome
from deskhand.domain.desk import selectors
from deskhand.domain.desk.models import Customer, Order, OrderSourceKind, RefundStatus, Ticket
from deskhand.domain.desk.orders import OrderFacts, SourceUnavailable, order_source
from deskhand.domain.desk.services import DomainError

# --- shared by the read, reversible and irreversible tools ---------------------


def outcome(payload: dict[str, Any], *, inverse: dict[str, Any] | None = None) -> ToolOutcome:
    return ToolOutcome(text=json.dumps(payload, sort_keys=True), inverse=inverse)


def day(value: dt.datetime | None) -> str | None:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d") if value is not None else None


def minute(value: dt.datetime) -> str:
    return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M")


def days_since(value: dt.datetime | None) -> int | None:
    """Whole days elapsed (floored): what a refund window is measured in."""
    return (timezone.now() - value).days if value is not None else None


def person(name: str, email: str) -> dict[str, str]:
    return {"name": name, "email": email}


def domain_errors(handler: Handler) -> Handler:
    """Turn a service's refusal into an error result the model reads and reacts to."""

    @functools.wraps(handler)
    def wrapped(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
        try:
            return handler(ctx, args)
        except DomainError as exc:
            raise ToolError(str(exc)) from None

    return wrapped


def run_ticket(ctx: ToolContext, reference: str, thread: bool = True) -> Ticket:
    """The ticket ``reference`` names, provided it is the one this run works on. ``thread``:
    with its customer, assignee and messages (``selectors.ticket_get``)."""
    ticket = selectors.ticket_get(merchant_id=ctx.merchant_id, reference=reference, thread=thread)
    if ticket is None:
        raise ToolError(f"no ticket '{reference.strip()}' for this merchant")
    if ticket.pk != ctx.ticket_id:
        own = (
            Ticket.objects.filter(pk=ctx.ticket_id, merchant_id=ctx.merchant_id)
            .values_list("reference", flat=True)
            .first()
        )
        raise ToolError(
            f"ticket {ticket.reference} is not the ticket this run is working on ({own}); "
            "a run may only read or change its own ticket"
        )
    return ticket


def customer_order(ctx: ToolContext, reference: str, lines: bool = True) -> Order:
    """The order row ``reference`` names, provided it belongs to this ticket's customer and
    to the run's order source. ``lines``: with its customer, items and refunds
    (``selectors.order_get``). The effects' lookup (a refund made here locks this row); the
    reads go through ``customer_order_facts``."""
    return order_of_customer(
        merchant_id=ctx.merchant_id,
        customer_id=ctx.customer_id,
        reference=reference,
        lines=lines,
        source=ctx.order_source,
    )


def order_of_customer(
    *,
    merchant_id: int,
    customer_id: int,
    reference: str,
    lines: bool = True,
    source: str | None = None,
) -> Order:
    """``customer_order`` without a tool context.

    Another merchant's order reads exactly like no order at all: a run learns nothing about
    other tenants from the answer. ``source``: the run's order source; an order held on a
    platform has no row here to act on, and the answer says why.
    """
    if source == OrderSourceKind.SHOPIFY:
        try:
            order_source(merchant_id=merchant_id, kind=source).order(reference)
        except SourceUnavailable as exc:
            raise ToolError(str(exc)) from None
    order = selectors.order_get(
        merchant_id=merchant_id, reference=reference, lines=lines, source=source
    )
    if order is None:
        raise ToolError(f"no order '{reference.strip()}' for this merchant")
    if order.customer_id != customer_id:
        raise ToolError(f"order {order.reference} does not belong to the customer on this ticket")
    return order


def customer_order_facts(ctx: ToolContext, reference: str) -> OrderFacts:
    """``order_facts_of_customer`` for this run's merchant, customer and order source."""
    return order_facts_of_customer(
        merchant_id=ctx.merchant_id,
        customer_id=ctx.customer_id,
        reference=reference,
        source=ctx.order_source,
    )


def order_facts_of_customer(
    *, merchant_id: int, customer_id: int, reference: str, source: str
) -> OrderFacts:
    """The order ``reference`` names, read from ``source`` (``deskhand.domain.desk.orders``),
    provided it belongs to the ticket's customer; a ``ToolError`` the model reads otherwise.

    Not this customer's and not found read alike: a run learns nothing about other
    customers or tenants from the answer. A source that cannot be read says why.
    """
    try:
        facts = order_source(merchant_id=merchant_id, kind=source).order(reference)
    except SourceUnavailable as exc:
        raise ToolError(str(exc)) from None
    if facts is None:
        raise ToolError(f"no order '{reference.strip()}' for this merchant")
    email = "" if facts.customer_id is not None else _customer_email(merchant_id, customer_id)
    if not facts.belongs_to(customer_id=customer_id, email=email):
        raise ToolError(f"order {facts.reference} does not belong to the customer on this ticket")
    return facts


def _customer_email(merchant_id: int, customer_id: int) -> str:
    found = Customer.objects.filter(pk=customer_id, merchant_id=merchant_id)
    return found.values_list("email", flat=True).first() or ""


Bounds = dict[str, tuple[int, int | None]]


def check_args(
    tool: str,
    *,
    text: Bounds | None = None,
    integer: Bounds | None = None,
    items: Bounds | None = None,
) -> Callable[[dict[str, Any]], None]:
    """The bounds strict-mode schemas cannot carry, checked after the schema passes.

    Text is measured after stripping, so whitespace cannot pad a reason to length.
    """

    def fail(message: str) -> None:
        raise ToolError(f"invalid arguments for {tool}: {message}")

    def check(args: dict[str, Any]) -> None:
        for name, (lo, hi) in (text or {}).items():
            n = len(args[name].strip())
            if n < lo or (hi is not None and n > hi):
                span = f"at least {lo}" if hi is None else f"{lo} to {hi}"
                fail(f"{name} must be {span} characters long, not {n}")
        for name, (lo, hi) in (integer or {}).items():
            value = args[name]
            if isinstance(value, bool) or not isinstance(value, int):
                fail(f"{name} must be a whole number, not {value!r}")
            if value < lo or (hi is not None and value > hi):
                fail(
                    f"{name} must be {lo} or more" if hi is None else f"{name} must be {lo} to {hi}"
                )
        for name, (lo, hi) in (items or {}).items():
            n = len(args[name])
            if n < lo or (hi is not None and n > hi):
                span = f"at least {lo}" if hi is None else f"{lo} to {hi}"
                fail(f"{name} must have {span} items, not {n}")

    return check


def object_schema(**properties: dict[str, Any]) -> dict[str, Any]:
    """A closed object whose every property is required: the only shape strict mode takes."""
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "required": list(properties),
    }


STRING: dict[str, Any] = {"type": "string"}


# --- the read tools ----------------------------------------------------------


def search_kb(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    query = args["query"]
    if not selectors.kb_query_words(query):
        raise ToolError("search_kb needs at least one word (letters or digits) to search for")
    articles = selectors.kb_search(merchant_id=ctx.merchant_id, query=query)
    return outcome(
        {
            "query": query,
            # The version read is in the step's record: a replay names exactly what was quoted.
            "results": [
                {"slug": a.slug, "version": a.version, "title": a.title, "body": a.body}
                for a in articles
            ],
        }
    )


def get_ticket(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    ticket = run_ticket(ctx, args["reference"])
    return outcome(
        {
            "reference": ticket.reference,
            "subject": ticket.subject,
            "status": ticket.status,
            "priority": ticket.priority,
            "tags": list(ticket.tags),
            "assignee": ticket.assignee.email if ticket.assignee else None,
            "opened": day(ticket.created_at),
            "customer": person(ticket.customer.name, ticket.customer.email),
            "messages": [
                {"kind": m.kind, "at": minute(m.created_at), "body": m.body}
                for m in ticket.messages.all()
            ],
        }
    )


def get_order(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    order = customer_order_facts(ctx, args["reference"])
    return outcome(
        {
            "reference": order.reference,
            "status": order.status,
            "currency": order.currency,
            "total_cents": order.total_cents,
            "placed_at": day(order.placed_at),
            "delivered_at": day(order.delivered_at),
            "days_since_delivery": days_since(order.delivered_at),
            "days_since_placed": days_since(order.placed_at),
            "items": [
                {
                    "sku": i.sku,
                    "description": i.description,
                    "quantity": i.quantity,
                    "unit_price_cents": i.unit_price_cents,
                    "line_cents": i.line_cents,
                }
                for i in order.items
            ],
            # Money moved and confirmed, apart from money still in flight at a payment
            # provider (which may have moved, and counts against what is left to refund).
            "refunded_cents": order.refunded_cents,
            "refunds_in_flight_cents": order.in_flight_cents,
            "refundable_cents": order.remainder_cents,
            "refunds": [
                {
                    "amount_cents": r.amount_cents,
                    "reason": r.reason,
                    "created_at": day(r.created_at),
                    "status": "in_flight" if r.in_flight else "refunded",
                }
                for r in order.refunds
            ],
            "customer": person(order.customer_name, order.customer_email),
            "cancelled_at": day(order.cancelled_at),
        }
    )


def get_customer(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    email = args["email"].strip()
    customer = selectors.customer_get_by_email(merchant_id=ctx.merchant_id, email=email)
    if customer is None:
        # The model only ever saw the address masked (agent.tools.masking): that form names
        # the ticket's customer too. Only theirs: the scope is the ticket, never a search.
        own = Customer.objects.filter(pk=ctx.customer_id, merchant_id=ctx.merchant_id).first()
        customer = own if own is not None and mask_email(own.email) == email else None
    # One answer for "no such customer" and "someone else": no way to probe who shops here.
    if customer is None or customer.pk != ctx.customer_id:
        raise ToolError(f"{email} is not the email of the customer on this ticket")
    try:
        source = order_source(merchant_id=ctx.merchant_id, kind=ctx.order_source)
        orders = source.orders_for_customer(customer.email)
    except SourceUnavailable as exc:
        raise ToolError(str(exc)) from None
    tickets = selectors.customer_tickets(merchant_id=ctx.merchant_id, customer_id=customer.pk)
    return outcome(
        {
            "name": customer.name,
            "email": customer.email,
            "orders": [
                {
                    "reference": o.reference,
                    "status": o.status,
                    "total_cents": o.total_cents,
                    "placed_at": day(o.placed_at),
                    "placed_at_iso": o.placed_at.astimezone(dt.UTC).isoformat(),
                }
                for o in orders
            ],
            "tickets": [
                {"reference": t.reference, "subject": t.subject, "status": t.status}
                for t in tickets
            ],
        }
    )


def list_refunds(ctx: ToolContext, args: dict[str, Any]) -> ToolOutcome:
    since_days = args["since_days"]
    refunds, total, in_flight = selectors.refunds_since(
        merchant_id=ctx.merchant_id,
        customer_id=ctx.customer_id,
        since=timezone.now() - dt.timedelta(days=since_days),
    )
    return outcome(
        {
            "since_days": since_days,
            "refunds": [
                {
                    "order_reference": r.order.reference,
                    "amount_cents": r.amount_cents,
                    "reason": r.reason,
                    "created_at": day(r.created_at),
                    "status": "in_flight" if r.status == RefundStatus.PENDING else "refunded",
                }
                for r in refunds
            ],
            # Made and confirmed; apart, what is still in flight at a payment provider.
            "total_cents": total,
            "in_flight_cents": in_flight,
        }
    )


TOOLS: list[ToolDef] = [
    ToolDef(
        name="search_kb",
        description=(
            "Search this merchant's knowledge base (policies, shipping, warranty) by keywords. "
            "Returns up to 5 articles, best match first, each with its full text."
        ),
        risk=Risk.READ,
        input_schema=object_schema(query=STRING),
        handler=search_kb,
        wording=("query",),  # the words searched with; that it searched is the decision
        check=check_args("search_kb", text={"query": (1, 500)}),
        # The merchant's own published text: its support addresses and numbers are for sharing.
        unmasked=("results",),
    ),
    ToolDef(
        name="get_ticket",
        description=(
            "Read the ticket this run is working on: status, priority, tags, assignee, customer, "
            "and every message on the thread including internal notes."
        ),
        risk=Risk.READ,
        input_schema=object_schema(reference=STRING),
        handler=get_ticket,
        check=check_args("get_ticket", text={"reference": (1, 32)}),
        # A staff member's work address: what assign_ticket takes. The customer's is masked.
        unmasked=("assignee",),
    ),
    ToolDef(
        name="get_order",
        description=(
            "Read one of the ticket customer's orders by reference (e.g. NW-1042): status, dates, "
            "days since delivery, items, refunds so far and how much is still refundable (cents)."
        ),
        risk=Risk.READ,
        input_schema=object_schema(reference=STRING),
        handler=get_order,
        check=check_args("get_order", text={"reference": (1, 32)}),
    ),
    ToolDef(
        name="get_customer",
        description=(
            "Read the ticket's customer by email: their recent orders (with exact placement "
            "times) and tickets."
        ),
        risk=Risk.READ,
        input_schema=object_schema(email=STRING),
        handler=get_customer,
        check=check_args("get_customer", text={"email": (3, 254)}),
    ),
    ToolDef(
        name="list_refunds",
        description=(
            "List refunds already made to the ticket's customer in the last since_days days "
            "(1 to 365), with their total in cents."
        ),
        risk=Risk.READ,
        input_schema=object_schema(since_days={"type": "integer"}),
        handler=list_refunds,
        check=check_args("list_refunds", integer={"since_days": (1, 365)}),
    ),
]
