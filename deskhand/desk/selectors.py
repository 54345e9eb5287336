"""Domain reads. Every one takes ``merchant_id`` and filters by it in SQL.

A tenant boundary enforced after the query (fetch, then compare) fails open the
day someone forgets the comparison; a WHERE clause fails closed.
"""

from __future__ import annotations

import datetime as dt
import re

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db.models import F, Prefetch, Q, QuerySet, Sum
from django.db.models.functions import Coalesce

from deskhand.desk.models import (
    Customer,
    KbArticle,
    Order,
    Refund,
    RefundStatus,
    Ticket,
    TicketMessage,
)

KB_RESULT_LIMIT = 5
_WORD = re.compile(r"[a-z0-9]+")


def _normal_reference(reference: str) -> str:
    # Models write "#nw-1042 " as often as "NW-1042"; references are unique per merchant.
    return reference.strip().lstrip("#").strip()


def ticket_get(*, merchant_id: int, reference: str, thread: bool = True) -> Ticket | None:
    """A ticket with its customer, assignee and whole thread (notes included). ``thread``
    False: the ticket's own row alone (a caller that only names it, as the ticket writes do:
    two queries fewer)."""
    found = Ticket.objects.filter(
        merchant_id=merchant_id, reference__iexact=_normal_reference(reference)
    )
    if not thread:
        return found.first()
    return (
        found.select_related("customer", "assignee")
        .prefetch_related(
            Prefetch("messages", queryset=TicketMessage.objects.order_by("created_at", "id"))
        )
        .first()
    )


def order_get(*, merchant_id: int, reference: str, lines: bool = True) -> Order | None:
    """An order with its customer, items and refunds. ``lines`` False: the order's own row
    alone (a caller that checks whose it is and what it totals: two queries fewer)."""
    found = Order.objects.filter(
        merchant_id=merchant_id, reference__iexact=_normal_reference(reference)
    )
    if not lines:
        return found.first()
    return (
        found.select_related("customer")
        .prefetch_related(
            "items", Prefetch("refunds", queryset=Refund.objects.order_by("created_at", "id"))
        )
        .first()
    )


def customer_get_by_email(*, merchant_id: int, email: str) -> Customer | None:
    return Customer.objects.filter(merchant_id=merchant_id, email__iexact=email.strip()).first()


def customer_orders(*, merchant_id: int, customer_id: int, limit: int = 20) -> QuerySet[Order]:
    """The customer's most recent orders, newest first."""
    return Order.objects.filter(merchant_id=merchant_id, customer_id=customer_id).order_by(
        "-placed_at", "-id"
    )[:limit]


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


def kb_query_words(query: str) -> list[str]:
    """The searchable words of a query: lower-case letters and digits, nothing else.

    Keeping only these makes the tsquery below injection-proof, and OR-ing them
    means one word the articles never use ("zzzqqq", a typo) cannot sink a
    search the other words would have found.
    """
    return _WORD.findall(query.lower())


def kb_search(*, merchant_id: int, query: str, limit: int = KB_RESULT_LIMIT) -> list[KbArticle]:
    """The merchant's articles matching any word of ``query``, best match first."""
    words = kb_query_words(query)
    if not words:
        return []
    tsquery = SearchQuery(" | ".join(words), search_type="raw", config="english")
    return list(
        KbArticle.objects.filter(merchant_id=merchant_id, search=tsquery)
        .annotate(rank=SearchRank(F("search"), tsquery))
        .order_by("-rank", "slug")[:limit]
    )
