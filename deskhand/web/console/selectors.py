"""Console reads. Each takes the merchant and filters by it in SQL; each is bounded.

Lists page by keyset (the last row's sort key), never by OFFSET, so page 2,000
costs what page 1 costs: the runs list walks the ``run_merchant_recent`` index
``(merchant, -created_at, -id)`` and stops after one page.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import re
import uuid
from typing import Any

from django.db.models import Count, OuterRef, Q, QuerySet, Subquery, Sum
from django.db.models.functions import Coalesce

from agent.models import Run, Step, WorkflowFinding, WorkflowFindingKind
from approvals.models import Approval, ApprovalPolicy, ApprovalStatus, StaffNote
from deskhand.domain.desk.models import Order, RefundStatus, Ticket
from deskhand.domain.desk.orders import OrderFacts, merchant_order_source

PAGE_SIZE = 50
INBOX_LIMIT = 100


class BadCursor(ValueError):
    """A page cursor that this console did not write (edited or truncated)."""


@dataclasses.dataclass(frozen=True)
class Page[T]:
    rows: list[T]
    next_cursor: str | None


# --- cursors --------------------------------------------------------------------


def _encode(*parts: str) -> str:
    return base64.urlsafe_b64encode("|".join(parts).encode()).decode().rstrip("=")


def _decode(cursor: str, n: int) -> list[str]:
    if len(cursor) > 200:
        raise BadCursor("cursor too long")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadCursor("cursor is not one of ours") from None
    parts = raw.split("|")
    if len(parts) != n:
        raise BadCursor("cursor is not one of ours")
    return parts


def run_cursor(run: Run) -> str:
    return _encode(run.created_at.isoformat(), str(run.id))


def parse_run_cursor(cursor: str) -> tuple[dt.datetime, uuid.UUID]:
    """The cursor's (created_at, id), the time in UTC, or ``BadCursor``.

    Python reads offsets Postgres refuses (``+20:00``: Postgres allows up to
    ±15:59), and the query then failed as a 500 (issue 26). A cursor this console
    wrote carries UTC; any other offset is converted to UTC here, and a time that
    cannot be (year 1 at ``+14:00``) names no run.
    """
    created, run_id = _decode(cursor, 2)
    try:
        when = dt.datetime.fromisoformat(created)
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError
        return when.astimezone(dt.UTC), uuid.UUID(run_id)
    except (ValueError, OverflowError):
        raise BadCursor("cursor is not one of ours") from None


# --- tickets --------------------------------------------------------------------


def tickets_page(
    *,
    merchant_id: int,
    status: str = "",
    priority: str = "",
    before_id: int | None = None,
    limit: int = PAGE_SIZE,
) -> Page[Ticket]:
    """Newest tickets first, with the latest run's status; keyset on the primary key."""
    latest = Run.objects.filter(ticket=OuterRef("pk")).order_by("-created_at")
    qs = (
        Ticket.objects.filter(merchant_id=merchant_id)
        .select_related("customer", "assignee")
        .annotate(
            latest_run_status=Subquery(latest.values("status")[:1]),
            latest_run_id=Subquery(latest.values("id")[:1]),
        )
        .order_by("-id")
    )
    if status:
        qs = qs.filter(status=status)
    if priority:
        qs = qs.filter(priority=priority)
    if before_id is not None:
        qs = qs.filter(id__lt=before_id)
    rows: list[Ticket] = list(qs[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, str(rows[-1].pk) if more else None)


def ticket_get(*, merchant_id: int, reference: str) -> Ticket | None:
    """A ticket by reference *within this merchant* (references repeat across merchants).

    Case does not matter: ``nw-1`` is NW-1.
    """
    return (
        Ticket.objects.filter(merchant_id=merchant_id, reference__iexact=reference.strip())
        .select_related("customer", "assignee", "merchant")
        .first()
    )


def ticket_orders(*, merchant_id: int, email: str, limit: int = 10) -> list[OrderFacts]:
    """The customer's orders, newest first, from the merchant's order source as it is now
    (``deskhand.domain.desk.orders``; may raise ``SourceUnavailable``)."""
    return merchant_order_source(merchant_id).orders_for_customer(email, limit=limit)


def ticket_runs(*, ticket: Ticket, limit: int = 20) -> list[Run]:
    return list(
        Run.objects.filter(ticket=ticket, merchant_id=ticket.merchant_id)
        .select_related("ticket")
        .order_by("-created_at", "-id")[:limit]
    )


# --- runs -----------------------------------------------------------------------

_HEX = re.compile(r"^[0-9a-f]{4,32}$")


def _run_search(qs: QuerySet[Run], merchant_id: int, q: str) -> QuerySet[Run]:
    """A ticket reference, a run id, or the first hex digits of a run id (an index range)."""
    q = q.strip()
    compact = q.lower().replace("-", "")
    by_ticket = Q(
        ticket__in=Ticket.objects.filter(merchant_id=merchant_id, reference__iexact=q.lstrip("#"))
    )
    if _HEX.match(compact):
        low = uuid.UUID(compact.ljust(32, "0"))
        high = uuid.UUID(compact.ljust(32, "f"))
        return qs.filter(by_ticket | Q(id__gte=low, id__lte=high))
    return qs.filter(by_ticket)


def runs_page(
    *,
    merchant_id: int,
    status: str = "",
    stop_reason: str = "",
    q: str = "",
    cursor: str = "",
    limit: int = PAGE_SIZE,
) -> Page[Run]:
    """One page of the merchant's runs, newest first. Raises ``BadCursor`` for a forged cursor."""
    qs = (
        Run.objects.filter(merchant_id=merchant_id)
        .select_related("ticket")
        .only(
            "id",
            "merchant_id",
            "ticket__reference",
            "ticket__subject",
            "ticket__status",
            "ticket__customer_id",
            "status",
            "stop_reason",
            "steps",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "cost_micros",
            "created_at",
            "started_at",
            "finished_at",
            "provider",
            "model",
        )
        .order_by("-created_at", "-id")
    )
    if status:
        qs = qs.filter(status=status)
    if stop_reason:
        qs = qs.filter(stop_reason=stop_reason)
    if q:
        qs = _run_search(qs, merchant_id, q)
    if cursor:
        created, run_id = parse_run_cursor(cursor)
        # ``created_at <= c`` lets Postgres seek into the index; the OR breaks ties on id.
        qs = qs.filter(created_at__lte=created).filter(Q(created_at__lt=created) | Q(id__lt=run_id))
    rows = list(qs[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, run_cursor(rows[-1]) if more else None)


def runs_page_queryset_for_explain(*, merchant_id: int, cursor: str) -> QuerySet[Run]:
    """The deep-page query, for tests and ``EXPLAIN``: the same shape ``runs_page`` runs."""
    created, run_id = parse_run_cursor(cursor)
    return (
        Run.objects.filter(merchant_id=merchant_id, created_at__lte=created)
        .filter(Q(created_at__lt=created) | Q(id__lt=run_id))
        .order_by("-created_at", "-id")[: PAGE_SIZE + 1]
    )


def run_get(*, merchant_id: int, run_id: uuid.UUID) -> Run | None:
    return (
        Run.objects.filter(pk=run_id, merchant_id=merchant_id)
        .select_related("ticket", "ticket__customer", "merchant", "started_by")
        .first()
    )


def run_steps(*, run_id: uuid.UUID | str, after: int = 0) -> list[Step]:
    return list(Step.objects.filter(run_id=run_id, seq__gt=after).order_by("seq"))


def run_approvals(*, run_id: uuid.UUID | str) -> list[Approval]:
    return list(
        Approval.objects.filter(run_id=run_id)
        .select_related("decided_by", "policy")
        .order_by("requested_at")
    )


def run_notes(*, run_id: uuid.UUID | str) -> list[StaffNote]:
    return list(
        StaffNote.objects.filter(run_id=run_id)
        .select_related("author")
        .order_by("created_at", "id")
    )


def run_workflow_findings(*, run: Run) -> list[WorkflowFinding]:
    """What was done to this run's workflow with DBOS's own tools, or to forks of it, and what
    became of it (agent.run.workflow_findings), oldest first."""
    return list(
        WorkflowFinding.objects.filter(merchant_id=run.merchant_id)
        .filter(Q(run_id=run.pk) | Q(forked_from_id=run.pk))
        .order_by("found_at", "pk")[:20]
    )


def started_outside(findings: list[WorkflowFinding], run: Run) -> bool:
    """Whether the run is a fork made with DBOS's own tools (nobody in Deskhand started it)."""
    return any(f.kind == WorkflowFindingKind.FORK_ADOPTED and f.run_id == run.pk for f in findings)


def refund_figures() -> dict[str, Any]:
    """Per order: ``refunded`` (money moved and confirmed) and ``in_flight`` (claimed at a
    payment provider that has not confirmed it: it may have moved), integer cents."""
    return {
        "refunded": Coalesce(
            Sum("refunds__amount_cents", filter=Q(refunds__status=RefundStatus.SUCCEEDED)), 0
        ),
        "in_flight": Coalesce(
            Sum("refunds__amount_cents", filter=Q(refunds__status=RefundStatus.PENDING)), 0
        ),
    }


def open_run_counts(*, merchant_id: int) -> dict[str, int]:
    """How many runs are live, by status (index ``run_merchant_status``)."""
    rows = (
        Run.objects.filter(
            merchant_id=merchant_id,
            status__in=[
                "queued",
                "running",
                "awaiting_approval",
                "awaiting_customer",
                "cancelling",
            ],
        )
        .values("status")
        .annotate(n=Count("id"))
    )
    return {r["status"]: r["n"] for r in rows}


# --- approvals ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class InboxItem:
    approval: Approval
    order: Order | None  # the order the call names, with ``refunded`` annotated


def pending_approvals(*, merchant_id: int, limit: int = INBOX_LIMIT) -> list[InboxItem]:
    """Pending approvals, oldest first, each beside the facts of the order it names."""
    approvals = list(
        Approval.objects.filter(merchant_id=merchant_id, status=ApprovalStatus.PENDING)
        .select_related("run", "run__ticket", "run__ticket__customer")
        .order_by("requested_at")[:limit]
    )
    refs = {
        str(a.arguments.get("order_reference"))
        for a in approvals
        if isinstance(a.arguments, dict) and a.arguments.get("order_reference")
    }
    orders = {
        o.reference: o
        for o in Order.objects.filter(merchant_id=merchant_id, reference__in=refs).annotate(
            **refund_figures()
        )
    }
    return [
        InboxItem(
            a,
            orders.get(str(a.arguments.get("order_reference")))
            if isinstance(a.arguments, dict)
            else None,
        )
        for a in approvals
    ]


def pending_count(*, merchant_id: int) -> int:
    return Approval.objects.filter(merchant_id=merchant_id, status=ApprovalStatus.PENDING).count()


def policy_history(*, merchant_id: int, limit: int = 10) -> list[ApprovalPolicy]:
    """The merchant's newest policy versions, with who wrote each."""
    return list(
        ApprovalPolicy.objects.filter(merchant_id=merchant_id)
        .select_related("created_by")
        .order_by("-version")[:limit]
    )


def approval_get(*, merchant_id: int, approval_id: uuid.UUID) -> Approval | None:
    return (
        Approval.objects.filter(pk=approval_id, merchant_id=merchant_id)
        .select_related("run")
        .first()
    )


def order_facts(*, merchant_id: int, arguments: Any) -> Order | None:
    ref = arguments.get("order_reference") if isinstance(arguments, dict) else None
    if not ref:
        return None
    return (
        Order.objects.filter(merchant_id=merchant_id, reference=str(ref))
        .annotate(**refund_figures())
        .first()
    )


def run_currency(*, run: Run) -> str:
    """The currency the run's story states money in: its customer's orders' (USD if none)."""
    currency = (
        Order.objects.filter(merchant_id=run.merchant_id, customer_id=run.ticket.customer_id)
        .order_by("-placed_at")
        .values_list("currency", flat=True)
        .first()
    )
    return currency or "USD"
