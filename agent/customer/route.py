"""What a customer's new line on a ticket does to runs: one function for every channel.

``customer_line_route(line_id)`` routes one stored customer line, once, as a step of a
workflow on a worker: the mail intake's (``deskhand.inbound``, right after threading the
message) or, for a line that came in another way (the API, a help desk), its own
(``deskhand.customer_line``, enqueued by ``on_customer_wrote`` once the line is committed).
Under the line's row lock, and only if the line has no outcome yet:

1. a machine's message (an auto-reply, bulk mail) does nothing: it is not the customer;
2. a run on the ticket waiting for the customer (``awaiting_customer``) is woken: a DBOS
   message keyed by the line's pk, so the same line wakes it once however often it is
   routed; the run reads the thread itself (``agent.customer.wait``);
3. another open run on the ticket reads the thread when it next reads the ticket: nothing;
4. otherwise, a new run opens when the merchant's ``auto_runs`` allows it (on every
   customer message, or only on a new ticket) and its model spend today is under its daily
   cap. It sees the whole thread, and the ledger answers every effect already made for
   the ticket, so nothing is refunded twice. Its id derives from the line
   (``line_run_id``): one run per line, ever.

The outcome (woke run X, opened run Y, nothing because …) is written on the line in the
same transaction as the run it opens (``TicketMessage.routing``). An opened run is handed to
DBOS after that commit, and again whenever the step runs again (the same id is the same
workflow), so a crash between the two leaves a run that still starts. A line left with no
outcome (its workflow was never enqueued) is re-driven by the sweep (``agent.customer.intake``).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from agent.models import OPEN_STATUSES, Run, RunStatus
from agent.run.bounds import day_start
from agent.run.services import RunRefused, run_create
from approvals.models import Channel
from deskhand.domain.desk.models import (
    AutoRuns,
    MessageDirection,
    MessageKind,
    Routing,
    TicketMessage,
)
from deskhand.domain.desk.services import customer_messages_sent_today
from deskhand.infra import crashpoints
from deskhand.infra.crashpoints import Point
from deskhand.infra.dbos import client as dbos_client

log = logging.getLogger(__name__)


def wake_key(message_id: int) -> str:
    """The idempotency key of the wake-up a stored customer line sends."""
    return f"customer-message:{message_id}"


def _spend_today(merchant: Any) -> int:
    since = day_start(timezone.now(), merchant.timezone)
    spent = Run.objects.filter(merchant_id=merchant.pk, created_at__gte=since).aggregate(
        t=Sum("cost_micros")
    )["t"]
    return int(spent or 0)


# Fixed for ever: a line's run id is derived under it (persisted in every such run's id).
_RUNS_FROM_LINES = uuid.UUID("5d0c1c6e-8f0b-4c55-9a43-6f1f3e2b7a10")


def line_run_id(line_id: int) -> uuid.UUID:
    """The id of the run a customer's line opens, if it opens one: the same every time."""
    return uuid.uuid5(_RUNS_FROM_LINES, f"customer-line:{line_id}")


@dataclasses.dataclass(frozen=True)
class Routed:
    """A line's routing outcome, as written on it."""

    routing: str
    detail: str
    run_id: str | None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _decide(message: TicketMessage) -> tuple[str, str, Run | None]:
    """What this line does to runs (see the module); called under the line's lock."""
    if message.kind != MessageKind.CUSTOMER or message.direction != MessageDirection.INBOUND:
        return Routing.NONE, "not a customer's message: nothing to do", None
    if message.automated:
        return (
            Routing.NONE,
            f"written by a machine ({message.automated}): it wakes and starts nothing",
            None,
        )
    ticket = message.ticket
    waiting = Run.objects.filter(ticket=ticket, status=RunStatus.AWAITING_CUSTOMER).first()
    if waiting is not None:
        dbos_client.send_customer_message(
            run_id=str(waiting.pk), ticket_id=ticket.pk, key=wake_key(message.pk)
        )
        return (
            Routing.WOKE,
            f"woke run {waiting.pk}, which waits for the customer on {ticket.reference}",
            waiting,
        )
    if Run.objects.filter(ticket=ticket, status__in=OPEN_STATUSES).exists():
        return (
            Routing.NONE,
            f"a run is already working {ticket.reference}; it reads the thread",
            None,
        )
    merchant = ticket.merchant
    if merchant.auto_runs == AutoRuns.OFF:
        return Routing.NONE, f"{merchant.name} starts runs by hand: none opened", None
    earlier = (
        TicketMessage.objects.filter(ticket=ticket, kind=MessageKind.CUSTOMER, automated="")
        .exclude(pk=message.pk)
        .exists()
    )
    if merchant.auto_runs == AutoRuns.NEW_TICKETS and earlier:
        return Routing.NONE, f"{merchant.name} opens runs on new tickets only: none opened", None
    sent_today = customer_messages_sent_today(ticket)
    if sent_today >= merchant.max_customer_messages_per_day:
        return (
            Routing.NONE,
            f"{ticket.reference}'s customer was already sent {sent_today} messages today, "
            f"{merchant.name}'s daily limit: no run opened; the ticket is on the attention queue",
            None,
        )
    if _spend_today(merchant) >= merchant.daily_spend_cap_micros:
        return (
            Routing.NONE,
            f"{merchant.name}'s model spend today reached its daily cap: no run opened",
            None,
        )
    try:
        run = run_create(
            ticket=ticket,
            user=None,
            channel=Channel.SYSTEM,
            detail={"customer_message": message.pk, "why": f"auto_runs={merchant.auto_runs}"},
            run_id=line_run_id(message.pk),
        )
    except RunRefused as exc:  # another line opened one a moment ago
        return Routing.NONE, f"no run opened: {exc}", None
    return Routing.OPENED, f"opened run {run.pk} on {ticket.reference}", run


def customer_line_route(line_id: int) -> Routed:
    """Route one customer line once, and start the run it opened (see the module)."""
    with transaction.atomic():
        line = (
            TicketMessage.objects.select_for_update(of=("self",))
            .select_related("ticket__merchant")
            .filter(pk=line_id)
            .first()
        )
        if line is None:  # its ticket was deleted
            return Routed(Routing.NONE, "the line no longer exists", None)
        if line.routed_at is None:
            routing, detail, run = _decide(line)
            line.routed_at, line.routing, line.routing_detail = (
                timezone.now(),
                routing,
                detail[:300],
            )
            line.routed_run_id = run.pk if run is not None else None
            line.save(update_fields=["routed_at", "routing", "routing_detail", "routed_run"])
    run_id = str(line.routed_run_id) if line.routed_run_id else None
    if line.routing == Routing.OPENED and run_id is not None:
        crashpoints.at(Point.AFTER_COMMIT, "customer.route")
        # After the commit, and on every execution: a run left queued is handed to DBOS
        # (the same id is the same workflow). A failure raises, and the step is retried.
        queued = Run.objects.filter(pk=run_id, status=RunStatus.QUEUED)
        slug = queued.values_list("merchant__slug", flat=True).first()
        if slug is not None:
            dbos_client.enqueue_run(run_id=run_id, partition_key=slug)
    return Routed(line.routing, line.routing_detail, run_id)


def on_customer_wrote(sender: Any, message_id: int, **_: Any) -> None:
    """The desk's signal, after commit: hand the line to its routing workflow.

    Never raises into the channel that stored the line: a failure is logged, and the sweep
    enqueues the line's workflow after its grace period.
    """
    crashpoints.at(Point.AFTER_STORE, "customer_line")  # committed, not yet handed on
    try:
        dbos_client.enqueue_line(message_id)
    except Exception:
        log.exception("customer message %s was stored; the sweep routes it", message_id)
