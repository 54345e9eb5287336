"""What needs a person now, and the money each thing puts at stake.

The attention queue gathers, for one merchant, everything a support person should look
at: approvals waiting for a decision, tickets the agent escalated, and runs that ended
without finishing their work (failed, out of bounds, cut off). Each item carries its age,
the money at stake (integer cents, shown in the order's currency) and a link.

A run that ended badly stays in the queue only while it is its ticket's latest run and the
ticket is not resolved: re-running or resolving the ticket is what takes it off. A run
sleeping out a model rate limit or a provider's retry-after (``Run.waiting_until``, set by
the model step and cleared when the call proceeds) is here while it waits, with the reason.
What was done to a run's workflow with DBOS's own tools and needs a person to know (a fork
refused, a resumed workflow of a closed run stopped again, an open run whose workflow ended:
``agent.run.workflow_findings``) is here until someone settles it
(``manage.py workflow_findings --resolve``). A ticket whose customer was sent the merchant's
daily limit of messages today (``Merchant.max_customer_messages_per_day``: two bots answering
each other stop there) is here for the rest of the merchant's day, saying why.

Reads only, each bounded, each filtered by the merchant in SQL.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import uuid
from collections.abc import Iterable

from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Sum
from django.db.models.functions import Coalesce
from django.urls import reverse

from agent.models import (
    TERMINAL_STATUSES,
    Run,
    RunStatus,
    StopReason,
    WorkflowFinding,
    WorkflowFindingKind,
)
from approvals.models import Approval, ApprovalStatus
from deskhand.domain.desk.models import (
    Merchant,
    MessageDirection,
    MessageKind,
    Order,
    Refund,
    RefundStatus,
    Ticket,
    TicketMessage,
    TicketStatus,
)
from deskhand.domain.desk.services import merchant_day_start
from deskhand.web.console import present

LIMIT = 100  # per kind: a queue longer than this is a page to filter, not to scroll

# A run that stopped short of its work: it failed, hit a bound, or its reply was cut off.
ENDED_SHORT_STATUSES = (RunStatus.FAILED, RunStatus.EXHAUSTED)
ENDED_SHORT_REASONS = (StopReason.TRUNCATED, StopReason.CONTEXT_WINDOW_EXCEEDED)

_ORDER_REF = re.compile(r"\b[A-Z]{2,4}-\d{3,6}\b")


@dataclasses.dataclass(frozen=True)
class Stake:
    """Money at stake, integer minor units in one currency."""

    cents: int
    currency: str

    def __str__(self) -> str:
        return present.cents(self.cents, self.currency)


@dataclasses.dataclass(frozen=True)
class Item:
    """One row of the attention queue."""

    kind: str  # "approval" | "escalated" | "run" | "provider_wait" | "workflow" | "reply_cap"
    label: str  # what it is, e.g. "Approval waiting", "Ticket escalated"
    title: str  # the one line a person reads
    ticket: str  # the ticket reference
    since: dt.datetime
    age: str
    money: str  # "—" when nothing is at stake
    url: str


# --- money ----------------------------------------------------------------------


def _named_refs(texts: Iterable[str]) -> set[str]:
    return {m.upper() for text in texts for m in _ORDER_REF.findall(text.upper())}


def ticket_stakes(*, merchant_id: int, tickets: list[Ticket]) -> dict[int, Stake]:
    """For each ticket, what is still refundable on the orders its customer names in it.

    Only the ticket customer's own orders at this merchant count; a ticket that names none
    has nothing at stake here (it is left out of the answer), and neither has a resolved
    one: what is left refundable on its orders is no longer in question (issue 40).
    """
    tickets = [t for t in tickets if t.status != TicketStatus.RESOLVED]
    if not tickets:
        return {}
    ids = [t.pk for t in tickets]
    texts: dict[int, list[str]] = {t.pk: [t.subject] for t in tickets}
    for ticket_id, body in TicketMessage.objects.filter(
        ticket_id__in=ids, kind=MessageKind.CUSTOMER
    ).values_list("ticket_id", "body")[: len(ids) * 20]:
        texts[ticket_id].append(body)
    named = {pk: _named_refs(t) for pk, t in texts.items()}
    refs = set().union(*named.values())
    if not refs:
        return {}
    orders = (
        Order.objects.filter(merchant_id=merchant_id, reference__in=refs)
        .annotate(refunded=Coalesce(Sum("refunds__amount_cents"), 0))
        .values_list("reference", "customer_id", "total_cents", "refunded", "currency")
    )
    by_ref: dict[str, list[tuple[int, int, str]]] = {}
    for ref, customer_id, total, refunded, currency in orders:
        by_ref.setdefault(ref, []).append((customer_id, int(total) - int(refunded), currency))
    out: dict[int, Stake] = {}
    for t in tickets:
        left = [
            (remaining, currency)
            for ref in named[t.pk]
            for customer_id, remaining, currency in by_ref.get(ref, [])
            if customer_id == t.customer_id and remaining > 0
        ]
        currencies = {c for _, c in left}
        if len(currencies) == 1:
            out[t.pk] = Stake(sum(r for r, _ in left), currencies.pop())
    return out


def approval_stake(approval: Approval, currency: str = "USD") -> Stake | None:
    """The amount a pending call would move, if it moves money."""
    args = approval.arguments if isinstance(approval.arguments, dict) else {}
    amount = args.get("amount_cents")
    if isinstance(amount, int) and not isinstance(amount, bool):
        return Stake(amount, currency)
    return None


def run_money(*, merchant_id: int, runs: list[Run]) -> dict[uuid.UUID, str]:
    """For the runs list: what each run refunded (money moved and confirmed, and apart from it
    money still in flight at a payment provider), else what its open ticket has at stake."""
    if not runs:
        return {}
    refunded: dict[uuid.UUID, list[str]] = {}
    for row in (
        Refund.objects.filter(merchant_id=merchant_id, run_id__in=[r.pk for r in runs])
        .values("run_id", "currency", "status")
        .annotate(total=Sum("amount_cents"))
        .order_by("run_id", "-status")  # succeeded before pending
    ):
        money = present.cents(int(row["total"]), row["currency"])
        refunded.setdefault(row["run_id"], []).append(
            f"{money} in flight" if row["status"] == RefundStatus.PENDING else f"{money} refunded"
        )
    open_tickets = {r.ticket_id: r.ticket for r in runs if r.ticket.status != TicketStatus.RESOLVED}
    stakes = ticket_stakes(merchant_id=merchant_id, tickets=list(open_tickets.values()))
    out: dict[uuid.UUID, str] = {}
    for r in runs:
        if r.pk in refunded:
            out[r.pk] = ", ".join(refunded[r.pk])
        elif r.ticket_id in stakes:
            out[r.pk] = f"{stakes[r.ticket_id]} at stake"
        else:
            out[r.pk] = "—"
    return out


# --- the queue ------------------------------------------------------------------


def _pending_approvals(merchant_id: int) -> list[Approval]:
    return list(
        Approval.objects.filter(merchant_id=merchant_id, status=ApprovalStatus.PENDING)
        .select_related("run__ticket")
        .order_by("requested_at")[:LIMIT]
    )


def _escalated_tickets(merchant_id: int) -> list[Ticket]:
    return list(
        Ticket.objects.filter(merchant_id=merchant_id, status=TicketStatus.ESCALATED).order_by(
            "updated_at", "id"
        )[:LIMIT]
    )


def _ended_short(merchant_id: int) -> QuerySet[Run]:
    """Runs that stopped short, each still its ticket's latest run on an unresolved ticket."""
    later = Run.objects.filter(
        ticket_id=OuterRef("ticket_id"), created_at__gt=OuterRef("created_at")
    )
    return (
        Run.objects.filter(merchant_id=merchant_id)
        .filter(Q(status__in=ENDED_SHORT_STATUSES) | Q(stop_reason__in=ENDED_SHORT_REASONS))
        .exclude(ticket__status=TicketStatus.RESOLVED)
        .exclude(Exists(later))
    )


def _waiting_on_provider(merchant_id: int) -> QuerySet[Run]:
    """Open runs sleeping out a rate limit or a retry-after (agent.run.turns records the wait)."""
    return Run.objects.filter(merchant_id=merchant_id, waiting_until__isnull=False).exclude(
        # A run waiting for its customer's answer (agent.customer) waits by design, not on a provider.
        status__in=[*TERMINAL_STATUSES, RunStatus.AWAITING_CUSTOMER]
    )


def runs_waiting_on_provider(merchant_id: int, limit: int = 100) -> list[Run]:
    """Runs held up by a model rate limit or a provider retry, the longest-waiting first."""
    return list(
        _waiting_on_provider(merchant_id)
        .select_related("ticket")
        .order_by("updated_at", "id")[:limit]
    )


WORKFLOW_LABELS = {
    WorkflowFindingKind.FORK_REFUSED: "DBOS fork refused",
    WorkflowFindingKind.FORK_FAILED: "DBOS fork failed",
    WorkflowFindingKind.UNKNOWN_WORKFLOW: "Unknown workflow refused",
    WorkflowFindingKind.WORKFLOW_REVIVED: "Resumed in DBOS, stopped",
    WorkflowFindingKind.WORKFLOW_ENDED: "Workflow ended in DBOS",
}


def _workflow_findings(merchant_id: int) -> QuerySet[WorkflowFinding]:
    """Open findings about this merchant's runs' workflows (agent.run.workflow_findings)."""
    return WorkflowFinding.objects.filter(merchant_id=merchant_id, resolved_at__isnull=True)


def _at_reply_cap(merchant_id: int) -> QuerySet[Ticket]:
    """Open tickets whose customer was sent the merchant's daily limit of messages today."""
    merchant = Merchant.objects.get(pk=merchant_id)
    return (
        Ticket.objects.filter(merchant_id=merchant_id)
        .exclude(status=TicketStatus.RESOLVED)
        .annotate(
            sent_today=Count(
                "messages",
                filter=Q(
                    messages__direction=MessageDirection.OUTBOUND,
                    messages__created_at__gte=merchant_day_start(merchant),
                ),
            )
        )
        .filter(sent_today__gte=F("merchant__max_customer_messages_per_day"))
    )


def reply_cap_sentence(ticket: Ticket, sent: int) -> str:
    """Why a ticket at its daily limit needs a person (the queue's and the router's words)."""
    return (
        f"{ticket.merchant.name} sent this customer {sent} messages today, its daily limit per "
        "ticket: nothing more goes out until tomorrow (an auto-responder answering every reply "
        "stops here); read the thread and answer by hand if a person is writing"
    )


def _age(since: dt.datetime, now: dt.datetime) -> str:
    return present.duration((now - since).total_seconds())


def _run_url(run_id: uuid.UUID) -> str:
    return reverse("console:run", kwargs={"run_id": run_id})


def attention_items(*, merchant_id: int, now: dt.datetime) -> list[Item]:
    """Everything waiting for a person at this merchant, oldest first."""
    items: list[Item] = []
    approvals = _pending_approvals(merchant_id)
    currencies = dict(
        Order.objects.filter(
            merchant_id=merchant_id,
            reference__in={
                str(a.arguments.get("order_reference"))
                for a in approvals
                if isinstance(a.arguments, dict)
            },
        ).values_list("reference", "currency")
    )
    for a in approvals:
        args = a.arguments if isinstance(a.arguments, dict) else {}
        stake = approval_stake(a, currencies.get(str(args.get("order_reference")), "USD"))
        items.append(
            Item(
                kind="approval",
                label="Escalated approval" if a.escalated_at else "Approval waiting",
                title=a.preview.splitlines()[0] if a.preview else a.tool,
                ticket=a.run.ticket.reference,
                since=a.requested_at,
                age=_age(a.requested_at, now),
                money=str(stake) if stake else "—",
                url=reverse("console:approvals") + f"#approval-{a.pk}",
            )
        )
    tickets = _escalated_tickets(merchant_id)
    stakes = ticket_stakes(merchant_id=merchant_id, tickets=tickets)
    for t in tickets:
        items.append(
            Item(
                kind="escalated",
                label="Ticket escalated",
                title=t.subject,
                ticket=t.reference,
                since=t.updated_at,
                age=_age(t.updated_at, now),
                money=str(stakes[t.pk]) if t.pk in stakes else "—",
                url=reverse("console:ticket", kwargs={"reference": t.reference}),
            )
        )
    runs = list(
        _ended_short(merchant_id).select_related("ticket").order_by("finished_at", "id")[:LIMIT]
    )
    money = run_money(merchant_id=merchant_id, runs=runs)
    for r in runs:
        since = r.finished_at or r.created_at
        why = r.get_stop_reason_display() if r.stop_reason else r.get_status_display()
        items.append(
            Item(
                kind="run",
                label=f"Run {r.get_status_display()}",
                title=f"Stopped: {why}",
                ticket=r.ticket.reference,
                since=since,
                age=_age(since, now),
                money=money.get(r.pk, "—"),
                url=_run_url(r.pk),
            )
        )
    for r in runs_waiting_on_provider(merchant_id):
        items.append(
            Item(
                kind="provider_wait",
                label="Waiting on the model provider",
                title=r.wait_reason or "Rate limited or retrying",
                ticket=r.ticket.reference,
                since=r.updated_at,
                age=_age(r.updated_at, now),
                money="—",
                url=_run_url(r.pk),
            )
        )
    for f in (
        _workflow_findings(merchant_id)
        .select_related("run__ticket", "forked_from__ticket")
        .order_by("found_at")[:LIMIT]
    ):
        about = f.run or f.forked_from
        if about is None:  # its run is gone (seed --reset): health still lists it
            continue
        items.append(
            Item(
                kind="workflow",
                label=WORKFLOW_LABELS.get(WorkflowFindingKind(f.kind), f.get_kind_display()),
                title=f.detail,
                ticket=about.ticket.reference,
                since=f.found_at,
                age=_age(f.found_at, now),
                money="—",
                url=_run_url(about.pk),
            )
        )
    for t in (
        _at_reply_cap(merchant_id).select_related("merchant").order_by("updated_at", "id")[:LIMIT]
    ):
        items.append(
            Item(
                kind="reply_cap",
                label="Daily message limit reached",
                title=reply_cap_sentence(t, t.sent_today),  # type: ignore[attr-defined]
                ticket=t.reference,
                since=t.updated_at,
                age=_age(t.updated_at, now),
                money="—",
                url=reverse("console:ticket", kwargs={"reference": t.reference}),
            )
        )
    items.sort(key=lambda i: i.since)
    return items


def attention_counts(*, merchant_id: int) -> dict[str, int]:
    """The navigation's counters: one query per kind, each on an index."""
    counts = {
        "approvals": Approval.objects.filter(
            merchant_id=merchant_id, status=ApprovalStatus.PENDING
        ).count(),
        "escalated": Ticket.objects.filter(
            merchant_id=merchant_id, status=TicketStatus.ESCALATED
        ).count(),
        "runs": _ended_short(merchant_id).count(),
        "provider_wait": _waiting_on_provider(merchant_id).count(),
        "workflows": _workflow_findings(merchant_id).count(),
        "reply_cap": _at_reply_cap(merchant_id).count(),
    }
    counts["total"] = sum(counts.values())
    return counts
