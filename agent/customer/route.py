"""What a customer's new message on a ticket does to runs: one function for every channel.

``customer_message_route(message)`` is called once the message is committed (the desk's
``customer_wrote`` signal, sent by ``deskhand.desk.thread.thread_customer_message_add``,
which mail and the API both write through):

1. a machine's message (an auto-reply, bulk mail) does nothing: it is not the customer;
2. a run on the ticket waiting for the customer (``awaiting_customer``) is woken: a DBOS
   message keyed by the stored line's pk, so the same line wakes it once however often it
   is routed; the run reads the thread itself (``agent.customer.wait``);
3. another open run on the ticket reads the thread when it next reads the ticket: nothing;
4. otherwise, a new run opens when the merchant's ``auto_runs`` allows it (on every
   customer message, or only on a new ticket) and its model spend today is under its daily
   cap. It sees the whole thread, and the ledger answers every effect already made for
   the ticket, so nothing is refunded twice. One run per line, ever (the audit event of
   the start names the line).

Returns one sentence saying what it did, for logs and tests. Never raises into the
channel: a failure is logged, the message is stored, and ``agent.customer.sweep`` wakes
a waiting run whose wake-up was lost.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db.models import Sum
from django.utils import timezone

from agent.models import OPEN_STATUSES, Run, RunStatus
from agent.run.bounds import day_start
from agent.run.services import RunRefused, run_start
from approvals.models import AuditEvent, Channel
from deskhand.dbos import client as dbos_client
from deskhand.desk.models import AutoRuns, MessageDirection, MessageKind, TicketMessage
from deskhand.desk.services import customer_messages_sent_today

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


def customer_message_route(message: TicketMessage) -> str:
    """Wake the waiting run, or open a new one as the merchant allows (see the module)."""
    if message.kind != MessageKind.CUSTOMER or message.direction != MessageDirection.INBOUND:
        return "not a customer's message: nothing to do"
    if message.automated:
        return f"written by a machine ({message.automated}): it wakes and starts nothing"
    ticket = message.ticket
    waiting = Run.objects.filter(ticket=ticket, status=RunStatus.AWAITING_CUSTOMER).first()
    if waiting is not None:
        dbos_client.send_customer_message(
            run_id=str(waiting.pk), ticket_id=ticket.pk, key=wake_key(message.pk)
        )
        return f"woke run {waiting.pk}, which waits for the customer on {ticket.reference}"
    if Run.objects.filter(ticket=ticket, status__in=OPEN_STATUSES).exists():
        return f"a run is already working {ticket.reference}; it reads the thread"
    merchant = ticket.merchant
    if merchant.auto_runs == AutoRuns.OFF:
        return f"{merchant.name} starts runs by hand: none opened"
    earlier = (
        TicketMessage.objects.filter(ticket=ticket, kind=MessageKind.CUSTOMER, automated="")
        .exclude(pk=message.pk)
        .exists()
    )
    if merchant.auto_runs == AutoRuns.NEW_TICKETS and earlier:
        return f"{merchant.name} opens runs on new tickets only: none opened"
    if AuditEvent.objects.filter(action="run.start", detail__customer_message=message.pk).exists():
        return "a run was already opened for this message"
    sent_today = customer_messages_sent_today(ticket)
    if sent_today >= merchant.max_customer_messages_per_day:
        return (
            f"{ticket.reference}'s customer was already sent {sent_today} messages today, "
            f"{merchant.name}'s daily limit: no run opened; the ticket is on the attention queue"
        )
    if _spend_today(merchant) >= merchant.daily_spend_cap_micros:
        return f"{merchant.name}'s model spend today reached its daily cap: no run opened"
    try:
        run = run_start(
            ticket=ticket,
            user=None,
            channel=Channel.SYSTEM,
            detail={"customer_message": message.pk, "why": f"auto_runs={merchant.auto_runs}"},
        )
    except RunRefused as exc:  # another message opened one a moment ago
        return f"no run opened: {exc}"
    return f"opened run {run.pk} on {ticket.reference}"


def on_customer_wrote(sender: Any, message_id: int, **_: Any) -> None:
    """The desk's signal, after commit: route the message; a failure is logged, never raised."""
    try:
        message = TicketMessage.objects.select_related("ticket__merchant").get(pk=message_id)
        log.info("customer message %s: %s", message_id, customer_message_route(message))
    except Exception:
        log.exception("customer message %s was stored but could not be routed", message_id)
