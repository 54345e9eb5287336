"""Finding a ticket or a run the way a support lead remembers it: the customer's name or email,
an order reference, a ticket reference, or the first characters of a run id.

Reads only, each bounded and filtered by the merchant in SQL. A run-id prefix is an index
range on the primary key (``0f3a9c12`` is every id between ``0f3a9c12-0000…`` and
``0f3a9c12-ffff…``), never a scan of the ids as text.
"""

from __future__ import annotations

import dataclasses
import re
import uuid

from django.db.models import Q, QuerySet

from agent.models import Run
from approvals.models import Approval
from deskhand.domain.desk.models import Customer, Order, Ticket

LIMIT = 50
SHORT_ID_MIN = 4  # fewer hex digits than this would name half the table
_HEX = re.compile(r"^[0-9a-f]+$")


def run_id_range(text: str) -> tuple[uuid.UUID, uuid.UUID] | None:
    """The ids a run-id prefix covers (dashes ignored), or None if it is not one."""
    compact = text.strip().lower().replace("-", "")
    if not (SHORT_ID_MIN <= len(compact) <= 32) or not _HEX.match(compact):
        return None
    return uuid.UUID(compact.ljust(32, "0")), uuid.UUID(compact.ljust(32, "f"))


def runs_by_prefix(*, merchant_id: int, prefix: str, limit: int = 2) -> list[Run]:
    """This merchant's runs whose id starts with ``prefix`` (at most ``limit``)."""
    bounds = run_id_range(prefix)
    if bounds is None:
        return []
    low, high = bounds
    return list(
        Run.objects.filter(merchant_id=merchant_id, id__gte=low, id__lte=high).order_by("id")[
            :limit
        ]
    )


@dataclasses.dataclass(frozen=True)
class Found:
    q: str
    tickets: list[Ticket]
    runs: list[Run]

    @property
    def empty(self) -> bool:
        return not self.tickets and not self.runs


def _customers(merchant_id: int, q: str) -> QuerySet[Customer]:
    by_words = Q(name__icontains=q) if len(q) >= 2 else Q(pk__in=[])
    return Customer.objects.filter(merchant_id=merchant_id).filter(by_words | Q(email__iexact=q))


def search(*, merchant_id: int, q: str) -> Found:
    """Tickets and runs matching ``q``, newest first."""
    q = q.strip()
    if not q:
        return Found(q, [], [])
    reference = q.lstrip("#")
    order_customers = Order.objects.filter(
        merchant_id=merchant_id, reference__iexact=reference
    ).values("customer_id")
    customers = _customers(merchant_id, q).values("pk")
    tickets_q = (
        Q(reference__iexact=reference)
        | Q(customer_id__in=customers)
        | Q(customer_id__in=order_customers)
    )
    tickets = list(
        Ticket.objects.filter(merchant_id=merchant_id)
        .filter(tickets_q)
        .select_related("customer")
        .order_by("-id")[:LIMIT]
    )
    named_in = Approval.objects.filter(
        merchant_id=merchant_id, arguments__order_reference__iexact=reference
    ).values("run_id")
    runs_q = Q(ticket__in=Ticket.objects.filter(merchant_id=merchant_id).filter(tickets_q)) | Q(
        pk__in=named_in
    )
    bounds = run_id_range(q)
    if bounds is not None:
        runs_q |= Q(id__gte=bounds[0], id__lte=bounds[1])
    runs = list(
        Run.objects.filter(merchant_id=merchant_id)
        .filter(runs_q)
        .select_related("ticket", "ticket__customer")
        .order_by("-created_at", "-id")[:LIMIT]
    )
    return Found(q, tickets, runs)
