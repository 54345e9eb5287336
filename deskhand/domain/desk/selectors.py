"""Domain reads. Every one takes ``merchant_id`` and filters by it in SQL.

A tenant boundary enforced after the query (fetch, then compare) fails open the
day someone forgets the comparison; a WHERE clause fails closed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Any

from django.db import connection
from django.db.models import Prefetch, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

from deskhand.domain.desk.knowledge import kb_ranked
from deskhand.domain.desk.models import (
    Customer,
    KbArticle,
    Order,
    OrderItem,
    Refund,
    RefundStatus,
    Ticket,
    TicketMessage,
)
from deskhand.domain.desk.rows import cache_related, rows_where

KB_RESULT_LIMIT = 5
_WORD = re.compile(r"[^\W_]+")  # letters and digits, any alphabet ("café", not "caf")


def _normal_reference(reference: str) -> str:
    # Models write "#nw-1042 " as often as "NW-1042"; references are unique per merchant.
    return reference.strip().lstrip("#").strip()


# One ticket or order by its reference, as ``.filter(merchant_id=…, reference__iexact=…)
# .first()`` reads it, through statements built once: on every agent step that names a
# ticket or an order (what that buys is measured in deskhand/domain/desk/rows.py).
_BY_REFERENCE = 't0."merchant_id" = %s AND UPPER(t0."reference"::text) = UPPER(%s)'


_AND_SOURCE = ' AND t0."source" = %s'


def _by_reference[M: Ticket | Order](
    model: type[M],
    merchant_id: int,
    reference: str,
    related: tuple[str, ...],
    source: str | None = None,
) -> M | None:
    where, params = _BY_REFERENCE, (merchant_id, _normal_reference(reference))
    params_all: tuple[Any, ...] = params
    if source is not None:
        where, params_all = where + _AND_SOURCE, (*params, source)
    found = rows_where(model, where, params_all, related=related, order_by='t0."id"', limit=1)
    return found[0] if found else None


def ticket_get(*, merchant_id: int, reference: str, thread: bool = True) -> Ticket | None:
    """A ticket with its customer, assignee and whole thread (notes included), oldest
    message first. ``thread`` False: the ticket's own row alone (a caller that only names
    it, as the ticket writes do: two queries fewer)."""
    ticket = _by_reference(
        Ticket, merchant_id, reference, ("customer", "assignee") if thread else ()
    )
    if ticket is not None and thread:
        messages = rows_where(
            TicketMessage, 't0."ticket_id" = %s', (ticket.pk,), order_by='t0."created_at", t0."id"'
        )
        cache_related(ticket, "messages", messages)
    return ticket


def order_get(
    *, merchant_id: int, reference: str, lines: bool = True, source: str | None = None
) -> Order | None:
    """An order with its customer, items and refunds (oldest first). ``lines`` False: the
    order's own row alone (a caller that checks whose it is and what it totals: two queries
    fewer). ``source``: only an order of that source (``local`` or ``pushed``)."""
    order = _by_reference(Order, merchant_id, reference, ("customer",) if lines else (), source)
    if order is not None and lines:
        one = 't0."order_id" = %s'
        cache_related(order, "items", rows_where(OrderItem, one, (order.pk,)))
        refunds = rows_where(Refund, one, (order.pk,), order_by='t0."created_at", t0."id"')
        cache_related(order, "refunds", refunds)
    return order


def customer_get_by_email(*, merchant_id: int, email: str) -> Customer | None:
    return Customer.objects.filter(merchant_id=merchant_id, email__iexact=email.strip()).first()


def customer_orders_by_email(
    *, merchant_id: int, email: str, source: str, limit: int = 20
) -> list[Order]:
    """The orders of ``source`` of the customer with this address, newest first, each with
    its customer, items and refunds."""
    return list(
        Order.objects.filter(
            merchant_id=merchant_id, source=source, customer__email__iexact=email.strip()
        )
        .select_related("customer")
        .prefetch_related(
            "items", Prefetch("refunds", queryset=Refund.objects.order_by("created_at", "id"))
        )
        .order_by("-placed_at", "-id")[:limit]
    )


def customer_tickets(*, merchant_id: int, customer_id: int, limit: int = 20) -> QuerySet[Ticket]:
    return Ticket.objects.filter(merchant_id=merchant_id, customer_id=customer_id).order_by(
        "-created_at", "-id"
    )[:limit]


def refunds_since(
    *, merchant_id: int, since: dt.datetime, customer_id: int | None = None, limit: int = 50
) -> tuple[list[Refund], int, int]:
    """Refunds created at or after ``since`` (newest first, at most ``limit``), the full total
    of those made and confirmed, and the full total of those still in flight at a payment
    provider (claimed, not yet confirmed: they may have moved)."""
    refunds = Refund.objects.filter(merchant_id=merchant_id, created_at__gte=since)
    if customer_id is not None:
        refunds = refunds.filter(order__customer_id=customer_id)
    totals = refunds.aggregate(
        done=Coalesce(Sum("amount_cents", filter=~Q(status=RefundStatus.PENDING)), 0),
        in_flight=Coalesce(Sum("amount_cents", filter=Q(status=RefundStatus.PENDING)), 0),
    )
    rows = list(refunds.select_related("order").order_by("-created_at", "-id")[:limit])
    return rows, int(totals["done"]), int(totals["in_flight"])


@dataclasses.dataclass(frozen=True)
class RefundTotals:
    """What is already refunded, in integer cents, three ways a refund's limits count it."""

    order: int  # against the order, ever
    runs: int  # by the runs the per-run ceiling counts (a ticket's runs, or one run's)
    today: int  # by the merchant since ``since`` (midnight on its own calendar)


# One statement for the three sums every refund (and its pre-check) asks, where three
# aggregates through the ORM compiled three queries (LESSONS 56).
_REFUND_TOTALS = """
SELECT
  (SELECT COALESCE(SUM(amount_cents), 0) FROM desk_refund WHERE order_id = %s),
  (SELECT COALESCE(SUM(r.amount_cents), 0) FROM desk_refund r
     JOIN agent_run a ON a.id = r.run_id WHERE a.ticket_id = %s),
  (SELECT COALESCE(SUM(amount_cents), 0) FROM desk_refund WHERE run_id = %s),
  (SELECT COALESCE(SUM(amount_cents), 0) FROM desk_refund
     WHERE merchant_id = %s AND created_at >= %s)
"""


def refund_totals(
    *,
    order_id: int,
    merchant_id: int,
    since: dt.datetime,
    ticket_id: int | None = None,
    run_id: Any = None,
) -> RefundTotals:
    """The order's refunds, the runs' (every run on ``ticket_id`` — forks and re-runs alike —
    or, without a ticket, ``run_id``'s own) and the merchant's since ``since``, in one
    statement, so under the refund's row locks the three are one snapshot."""
    with connection.cursor() as cur:
        cur.execute(
            _REFUND_TOTALS,
            [order_id, ticket_id, None if ticket_id else run_id, merchant_id, since],
        )
        row = cur.fetchone()
    order, by_ticket, by_run, today = (int(v) for v in row)
    return RefundTotals(order=order, runs=by_ticket if ticket_id else by_run, today=today)


def kb_query_words(query: str) -> list[str]:
    """The searchable words of a query: lower-case letters (of any alphabet) and digits.

    Keeping only these makes the tsquery below injection-proof, and OR-ing them
    means one word the articles never use ("zzzqqq", a typo) cannot sink a
    search the other words would have found.
    """
    return _WORD.findall(query.lower())


def kb_search(*, merchant_id: int, query: str, limit: int = KB_RESULT_LIMIT) -> list[KbArticle]:
    """The merchant's published articles matching any word of ``query``, best match first
    (BM25F: ``knowledge.kb_ranked``; ties in slug order, so a search repeats itself)."""
    words = kb_query_words(query)
    if not words:
        return []
    ids = kb_ranked(merchant_id=merchant_id, words=words, limit=limit)
    if not ids:
        return []
    found = KbArticle.objects.filter(merchant_id=merchant_id, published=True).in_bulk(ids)
    return [found[pk] for pk in ids if pk in found]
