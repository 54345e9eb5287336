"""Domain writes: the only code that moves money, sends email or edits a ticket.

Tools call these inside the transaction that also holds their ledger entry, so a
check made here (what is left to refund, what today's ceiling allows) and the row
it guards commit or roll back together. Each function opens ``transaction.atomic``
itself as well, which is a savepoint under a caller's transaction and makes the
row locks legal when something (the console's undo, a shell) calls it bare.

Refusals are ``DomainError`` with a sentence written for whoever reads it next:
usually a model deciding what to do instead, sometimes a person.

Over 400 lines because every write to the support domain lives here, under the same row-
locking rules; split by entity, the money checks and the tickets they touch would sit apart.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any
from zoneinfo import ZoneInfo

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from deskhand.domain.desk import selectors, thread
from deskhand.domain.desk.models import (
    Membership,
    Merchant,
    MessageChannel,
    MessageDirection,
    MessageKind,
    Order,
    OrderStatus,
    OutboundEmail,
    Priority,
    Refund,
    RefundStatus,
    Ticket,
    TicketMessage,
    TicketStatus,
)
from deskhand.domain.desk.money import format_cents
from deskhand.domain.desk.rows import row_by_pk
from deskhand.domain.desk.subjects import reply_subject

TAG_MAX_CHARS = 40  # Ticket.tags' element width.
SUBJECT_MAX_CHARS = 200  # OutboundEmail.subject's width.


class DomainError(Exception):
    """A refusal phrased as a sentence the model (or a person) can act on."""


@dataclasses.dataclass(frozen=True, slots=True)
class TicketChange:
    """What a reversible ticket write did, and the inverse that would undo it.

    ``inverse`` is None when nothing changed: there is nothing to undo, and an
    undo that "restored" the same value could clobber a later human edit.
    """

    ticket: Ticket
    inverse: dict[str, Any] | None
    message: TicketMessage | None = None

    @property
    def changed(self) -> bool:
        return self.inverse is not None


# --- money -----------------------------------------------------------------


def merchant_day_start(merchant: Merchant, *, now: dt.datetime | None = None) -> dt.datetime:
    """Midnight today on the merchant's wall clock: when its daily ceiling resets."""
    zone = ZoneInfo(merchant.timezone)
    local_today = (now or timezone.now()).astimezone(zone).date()
    return dt.datetime.combine(local_today, dt.time.min, tzinfo=zone)


@transaction.atomic
def refund_issue(
    *,
    order: Order,
    amount_cents: int,
    reason: str,
    run_id: str | uuid.UUID,
    ledger_entry_id: int | None,
    run_ceiling_cents: int,
    ticket_id: int | None = None,
    status: str = RefundStatus.SUCCEEDED,
) -> Refund:
    """Pay money back against ``order``, within every limit, or refuse.

    ``status`` ``pending``: the money is to leave through a payment provider; the row
    reserves it against every limit until ``refund_confirm`` or ``refund_release``.

    The per-run ceiling counts every refund made by a run on ``ticket_id`` (the
    ticket's runs, their forks and re-runs alike), not only ``run_id``'s: a fork or
    a second run of a ticket never starts with a fresh ceiling. Without a ticket
    (a bare call) it counts ``run_id``'s refunds.

    The limits are checked under row locks in the transaction that inserts the
    refund: two concurrent refunds against one order (or one merchant's day)
    queue on the lock, and the second sees the first's row before it decides.
    The merchant row is locked before the order row, in every caller, so two
    refunds can never wait on each other in opposite orders.
    """
    if isinstance(amount_cents, bool) or not isinstance(amount_cents, int):
        raise DomainError("amount_cents must be a whole number of cents, e.g. 1900 for 19.00")
    reason = reason.strip()
    if not reason:
        raise DomainError("a refund needs a reason")

    merchant = row_by_pk(Merchant, order.merchant_id, lock=True)
    order = row_by_pk(Order, order.pk, lock=True)

    def money(cents: int) -> str:
        return format_cents(cents, order.currency)

    refusal = f"cannot refund {money(amount_cents)} against {order.reference}"
    if amount_cents < 1:
        raise DomainError(f"{refusal}: a refund must be at least {money(1)}")

    totals = selectors.refund_totals(
        order_id=order.pk,
        merchant_id=merchant.pk,
        since=merchant_day_start(merchant),
        ticket_id=ticket_id,
        run_id=run_id,
    )
    refunded = totals.order
    remaining = order.total_cents - refunded
    if amount_cents > remaining:
        raise DomainError(
            f"{refusal}: {money(refunded)} of {money(order.total_cents)} is already refunded, "
            f"leaving {money(remaining)}"
        )

    by_run = totals.runs
    if by_run + amount_cents > run_ceiling_cents:
        left = max(run_ceiling_cents - by_run, 0)
        who = "this ticket's runs have" if ticket_id else "this run has"
        raise DomainError(
            f"{refusal}: that would pass this run's refund ceiling of {money(run_ceiling_cents)}; "
            f"{who} already refunded {money(by_run)}, leaving {money(left)}. "
            "A larger refund is for a person to make: escalate the ticket."
        )

    today = totals.today
    ceiling = merchant.daily_refund_ceiling_cents
    if today + amount_cents > ceiling:
        left = max(ceiling - today, 0)
        raise DomainError(
            f"{refusal}: that would pass {merchant.name}'s daily refund ceiling of {money(ceiling)}; "
            f"{money(today)} has already been refunded today, leaving {money(left)}. "
            "Escalate the ticket to a person instead."
        )

    return Refund.objects.create(
        merchant=merchant,
        order=order,
        amount_cents=amount_cents,
        currency=order.currency,
        reason=reason,
        run_id=run_id,
        ledger_entry_id=ledger_entry_id,
        status=status,
    )


@transaction.atomic
def refund_confirm(*, ledger_entry_id: int, provider_refund_id: str) -> Refund:
    """The payment provider made the pending refund of this ledger entry: it has left."""
    refund = Refund.objects.select_for_update().get(ledger_entry_id=ledger_entry_id)
    refund.status = RefundStatus.SUCCEEDED
    refund.provider_refund_id = provider_refund_id
    refund.save(update_fields=["status", "provider_refund_id"])
    return refund


@transaction.atomic
def refund_release(*, ledger_entry_id: int) -> int:
    """The payment provider did not make the pending refund: free what it reserved.

    Only a pending refund is ever released; money that left is never deleted. Returns how
    many rows went (0 or 1).
    """
    deleted, _ = Refund.objects.filter(
        ledger_entry_id=ledger_entry_id, status=RefundStatus.PENDING
    ).delete()
    return deleted


@transaction.atomic
def order_cancel(*, order: Order, reason: str, ledger_entry_id: int | None) -> Order:
    """Cancel an order that has not left the warehouse. It moves no money.

    Anything past ``placed`` is in a van or a kitchen; cancelling it would be a
    promise the merchant cannot keep, so it is refused and a refund is the tool.
    """
    reason = reason.strip()
    if not reason:
        raise DomainError("a cancellation needs a reason")
    order = Order.objects.select_for_update().get(pk=order.pk)
    if order.status != OrderStatus.PLACED:
        state = {
            OrderStatus.SHIPPED: "it has already shipped",
            OrderStatus.DELIVERED: "it has already been delivered",
            OrderStatus.CANCELLED: "it is already cancelled",
        }.get(OrderStatus(order.status), f"it is {order.status}")
        raise DomainError(
            f"cannot cancel {order.reference}: {state}. "
            "Only an order that has not shipped can be cancelled."
        )
    order.status = OrderStatus.CANCELLED
    order.cancelled_at = timezone.now()
    order.cancel_reason = reason
    order.cancel_ledger_entry_id = ledger_entry_id
    order.save(update_fields=["status", "cancelled_at", "cancel_reason", "cancel_ledger_entry"])
    return order


# --- customer email --------------------------------------------------------


@transaction.atomic
def email_send(
    *,
    ticket: Ticket,
    subject: str,
    body: str,
    run_id: str | uuid.UUID | None,
    ledger_entry_id: int | None,
    message_id: str = "",
    from_address: str = "",
    in_reply_to: str = "",
    references: str = "",
) -> OutboundEmail:
    """Send the ticket's customer an email: a row in the outbox and a line on the thread.

    The thread copy is what the next reader of the ticket (person or model)
    sees, so an email is never sent that the ticket does not show. Through a mail
    server (``message_id`` given) the rows record what the server accepted. The outbox
    row stays the effect's record (its ledger entry points at it); the thread line
    points at the outbox row and carries the recipient and the Message-ID a reply threads by.
    """
    subject, body = email_check(subject=subject, body=body)
    body = thread.signed(body, ticket.merchant.name)  # the merchant signs what it sends
    email = OutboundEmail.objects.create(
        merchant_id=ticket.merchant_id,
        customer_id=ticket.customer_id,
        ticket=ticket,
        subject=subject,
        body=body,
        run_id=run_id,
        ledger_entry_id=ledger_entry_id,
        message_id=message_id,
    )
    TicketMessage.objects.create(
        ticket=ticket,
        kind=MessageKind.AGENT,
        channel=MessageChannel.EMAIL,
        direction=MessageDirection.OUTBOUND,
        subject=subject,
        body=f"Subject: {subject}\n\n{body}",
        from_address=from_address[:320],
        to_address=ticket.customer.email,
        message_id=message_id,
        in_reply_to=in_reply_to[:250],
        references=references,
        email=email,
        run_id=run_id,
        sent_at=email.sent_at,
    )
    return email


REPLY_BODY_CHARS = (10, 4000)


def customer_messages_sent_today(ticket: Ticket) -> int:
    """Messages sent to the ticket's customer since midnight on the merchant's clock: what
    ``Merchant.max_customer_messages_per_day`` caps, for a reply and for an automatic run."""
    return TicketMessage.objects.filter(
        ticket=ticket,
        direction=MessageDirection.OUTBOUND,
        created_at__gte=merchant_day_start(ticket.merchant),
    ).count()


def customer_reply_check(*, ticket: Ticket, body: str) -> str:
    """The reply's body as the customer reads it (signed by the merchant), or why it cannot go.

    At most ``Merchant.max_customer_messages_per_day`` messages go to a customer on one
    ticket a day (the merchant's calendar): two bots answering each other stop there.
    """
    text = body.strip()
    low, high = REPLY_BODY_CHARS
    if not low <= len(text) <= high:
        raise DomainError(f"a reply's body must be {low} to {high} characters")
    merchant = ticket.merchant
    sent_today = customer_messages_sent_today(ticket)
    if sent_today >= merchant.max_customer_messages_per_day:
        raise DomainError(
            f"{ticket.reference}'s customer was already sent {sent_today} messages today, "
            f"{merchant.name}'s daily limit per ticket; nothing was sent"
        )
    return thread.signed(text, merchant.name)


def customer_reply_send(
    *,
    ticket: Ticket,
    body: str,
    run_id: str | uuid.UUID | None,
    ledger_entry_id: int | None,
    message_id: str,
    headers: thread.ReplyHeaders | None = None,
) -> OutboundEmail:
    """Record a reply to the ticket's customer on its thread: threaded, from the merchant, signed.

    ``headers`` are the ones the reply left with (a mail server); without them they are
    worked out now. The thread line carries the Message-ID the customer's answer threads by.
    """
    # The daily cap was checked before it left (``customer_reply_check``); the record of a
    # reply that left is never refused.
    signed_body = thread.signed(body, ticket.merchant.name)
    h = headers or thread.reply_headers(ticket)
    return email_send(
        ticket=ticket,
        subject=reply_subject(h.subject)[:SUBJECT_MAX_CHARS],
        body=signed_body,
        run_id=run_id,
        ledger_entry_id=ledger_entry_id,
        message_id=message_id,
        from_address=h.from_address,
        in_reply_to=h.in_reply_to,
        references=h.references,
    )


def email_check(*, subject: str, body: str) -> tuple[str, str]:
    """The subject and body as they would be sent, or the reason they cannot be."""
    subject, body = subject.strip(), body.strip()
    if not subject or "\n" in subject or "\r" in subject:
        raise DomainError("an email subject must be one non-empty line")
    if len(subject) > SUBJECT_MAX_CHARS:
        raise DomainError(f"an email subject can be at most {SUBJECT_MAX_CHARS} characters")
    if not body:
        raise DomainError("an email needs a body")
    return subject, body


# --- reversible ticket writes ------------------------------------------------


def _locked(ticket: Ticket) -> Ticket:
    return row_by_pk(Ticket, ticket.pk, related=("assignee",), lock=True)


def _clean_tags(tags: Sequence[str]) -> list[str]:
    clean: list[str] = []
    for raw in tags:
        tag = str(raw).strip().lower()
        if not tag:
            raise DomainError("a tag cannot be blank")
        if len(tag) > TAG_MAX_CHARS:
            raise DomainError(f"a tag can be at most {TAG_MAX_CHARS} characters: {tag[:60]!r}")
        if tag not in clean:
            clean.append(tag)
    return clean


@transaction.atomic
def ticket_tag(*, ticket: Ticket, tags: Sequence[str]) -> TicketChange:
    """Add tags (lower-cased, de-duplicated); tags already there stay where they are."""
    clean = _clean_tags(tags)
    ticket = _locked(ticket)
    before = list(ticket.tags)
    after = before + [t for t in clean if t not in before]
    if after == before:
        return TicketChange(ticket, None)
    ticket.tags = after
    ticket.save(update_fields=["tags", "updated_at"])
    return TicketChange(ticket, {"op": "set_tags", "ticket_id": ticket.pk, "tags": before})


@transaction.atomic
def ticket_set_priority(*, ticket: Ticket, priority: str) -> TicketChange:
    if priority not in Priority.values:
        raise DomainError(f"priority must be one of {', '.join(Priority.values)}")
    ticket = _locked(ticket)
    before = ticket.priority
    if before == priority:
        return TicketChange(ticket, None)
    ticket.priority = priority
    ticket.save(update_fields=["priority", "updated_at"])
    return TicketChange(ticket, {"op": "set_priority", "ticket_id": ticket.pk, "priority": before})


@transaction.atomic
def ticket_set_status(*, ticket: Ticket, status: str) -> TicketChange:
    if status not in TicketStatus.values:
        raise DomainError(f"status must be one of {', '.join(TicketStatus.values)}")
    ticket = _locked(ticket)
    before = ticket.status
    if before == status:
        return TicketChange(ticket, None)
    ticket.status = status
    ticket.save(update_fields=["status", "updated_at"])
    return TicketChange(ticket, {"op": "set_status", "ticket_id": ticket.pk, "status": before})


def _require_member(user: User, merchant_id: int) -> None:
    if not Membership.objects.filter(user_id=user.pk, merchant_id=merchant_id).exists():
        raise DomainError(
            f"{user.email} is not a member of this merchant, so cannot be assigned its tickets"
        )


@transaction.atomic
def ticket_assign(*, ticket: Ticket, assignee: User) -> TicketChange:
    """Give the ticket to a person who works at the ticket's merchant (any role)."""
    _require_member(assignee, ticket.merchant_id)
    ticket = _locked(ticket)
    before = ticket.assignee_id
    if before == assignee.pk:
        return TicketChange(ticket, None)
    ticket.assignee = assignee
    ticket.save(update_fields=["assignee", "updated_at"])
    return TicketChange(
        ticket, {"op": "set_assignee", "ticket_id": ticket.pk, "assignee_id": before}
    )


@transaction.atomic
def ticket_note_add(
    *,
    ticket: Ticket,
    body: str,
    run_id: str | uuid.UUID | None = None,
    author: User | None = None,
) -> TicketChange:
    """Leave an internal note: on the thread for staff, never sent to the customer."""
    body = body.strip()
    if not body:
        raise DomainError("a note cannot be blank")
    message = TicketMessage.objects.create(
        ticket=ticket,
        kind=MessageKind.NOTE,
        channel=MessageChannel.WEB,
        direction=MessageDirection.INTERNAL,
        body=body,
        run_id=run_id,
        author=author,
    )
    return TicketChange(ticket, {"op": "delete_message", "message_id": message.pk}, message=message)


# --- undo --------------------------------------------------------------------

INVERSE_OPS = frozenset(
    {"set_tags", "set_priority", "set_status", "set_assignee", "delete_message"}
)


def _id_field(inverse: dict[str, Any], name: str) -> int:
    value = inverse.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise DomainError(f"inverse {inverse.get('op')!r} needs an integer {name!r}")
    return value


@transaction.atomic
def inverse_apply(*, merchant_id: int, inverse: dict[str, Any]) -> str:
    """Apply a recorded inverse within ``merchant_id``; return what it did, in a sentence.

    An inverse is data from the step log, so it is treated like any input: its
    ticket or message must belong to the merchant the undo is made for, and the
    only message it may delete is an internal note (never the customer's words,
    never the record of an email that was sent).
    """
    if not isinstance(inverse, dict):
        raise DomainError("an inverse must be an object with an 'op'")
    op = inverse.get("op")
    if op not in INVERSE_OPS:
        raise DomainError(
            f"unknown inverse op {op!r}; expected one of {', '.join(sorted(INVERSE_OPS))}"
        )

    if op == "delete_message":
        message_id = _id_field(inverse, "message_id")
        message = (
            TicketMessage.objects.select_for_update(of=("self",))
            .select_related("ticket")
            .filter(pk=message_id, ticket__merchant_id=merchant_id)
            .first()
        )
        if message is None:
            raise DomainError(
                f"message {message_id} is not on any ticket of this merchant (or was already removed)"
            )
        if message.kind != MessageKind.NOTE:
            raise DomainError(
                f"message {message_id} on {message.ticket.reference} is a {message.kind} message; "
                "only an internal note can be removed"
            )
        message.delete()
        return f"Removed the internal note from {message.ticket.reference}."

    ticket_id = _id_field(inverse, "ticket_id")
    ticket = (
        Ticket.objects.select_for_update().filter(pk=ticket_id, merchant_id=merchant_id).first()
    )
    if ticket is None:
        raise DomainError(
            f"ticket {ticket_id} is not a ticket of this merchant; an inverse only applies "
            "within the merchant it was recorded for"
        )

    if op == "set_tags":
        tags = inverse.get("tags")
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise DomainError("inverse 'set_tags' needs 'tags', a list of strings")
        ticket.tags = list(tags)
        ticket.save(update_fields=["tags", "updated_at"])
        return f"Restored {ticket.reference}'s tags to {', '.join(tags) or '(none)'}."
    if op == "set_priority":
        priority = inverse.get("priority")
        if priority not in Priority.values:
            raise DomainError(f"inverse 'set_priority' has an unknown priority {priority!r}")
        ticket.priority = priority
        ticket.save(update_fields=["priority", "updated_at"])
        return f"Set {ticket.reference}'s priority back to {priority}."
    if op == "set_status":
        status = inverse.get("status")
        if status not in TicketStatus.values:
            raise DomainError(f"inverse 'set_status' has an unknown status {status!r}")
        ticket.status = status
        ticket.save(update_fields=["status", "updated_at"])
        return f"Set {ticket.reference}'s status back to {status}."

    # set_assignee
    if inverse.get("assignee_id") is None:
        ticket.assignee = None
        ticket.save(update_fields=["assignee", "updated_at"])
        return f"Unassigned {ticket.reference}."
    assignee_id = _id_field(inverse, "assignee_id")
    membership = (
        Membership.objects.select_related("user")
        .filter(user_id=assignee_id, merchant_id=merchant_id)
        .first()
    )
    if membership is None:
        raise DomainError(
            f"user {assignee_id} is not a member of this merchant, so cannot be assigned"
        )
    ticket.assignee = membership.user
    ticket.save(update_fields=["assignee", "updated_at"])
    return f"Assigned {ticket.reference} back to {membership.user.email}."
