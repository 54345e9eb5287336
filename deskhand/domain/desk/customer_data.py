"""The desk's share of erasing a customer: their record, their tickets, what was sent to them.

A customer who asks to be forgotten keeps a row, because orders and refunds hang
off it and the merchant's accounts must still add up — but the row becomes a
pseudonym (``[erased]``, ``erased-<id>@erased.invalid``) with ``erased_at`` set.
Everything written by them, to them or about them on their tickets goes: ticket
subjects, every message on the thread (theirs, the agent's, staff notes) with its
subject, the addresses it went between and its mail headers (a Message-ID is the
sender's text, and a reply quoting one must not find the old ticket again), the
emails in the outbox, and the free-text reasons on their orders and refunds. What
stays is what the accounts need: order references, items, totals, refund amounts,
statuses and times. The raw inbound mail they sent is ``deskhand.domain.mail``'s share.

The runs on those tickets (step payloads, approvals, the ledger's words, DBOS) are
``agent.privacy.erasure``'s share. ``counts`` and ``erase`` walk the same rows, so a dry run
reports exactly what the erasure then changes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.db import transaction
from django.db.models import Case, Q, QuerySet, Value, When

from deskhand.domain.desk.models import (
    Customer,
    Order,
    OutboundEmail,
    Refund,
    Ticket,
    TicketMessage,
)


def pseudonym_email(customer: Customer) -> str:
    """Unique per merchant (the customer's id), and no one's address (``.invalid`` is reserved)."""
    return f"erased-{customer.pk}@erased.invalid"


@dataclasses.dataclass(frozen=True)
class CustomerRows:
    """The desk rows that carry one customer's personal data."""

    customer: Customer

    def tickets(self) -> QuerySet[Ticket]:
        return Ticket.objects.filter(customer=self.customer)

    def messages(self) -> QuerySet[TicketMessage]:
        return TicketMessage.objects.filter(ticket__customer=self.customer)

    def emails(self) -> QuerySet[OutboundEmail]:
        return OutboundEmail.objects.filter(customer=self.customer)

    def orders(self) -> QuerySet[Order]:
        return Order.objects.filter(customer=self.customer).exclude(cancel_reason="")

    def refunds(self) -> QuerySet[Refund]:
        return Refund.objects.filter(order__customer=self.customer).exclude(reason="")

    def counts(self) -> dict[str, int]:
        return {
            "customer": 1,
            "tickets": self.tickets().count(),
            "ticket_messages": self.messages().count(),
            "emails": self.emails().count(),
            "order_reasons": self.orders().count(),
            "refund_reasons": self.refunds().count(),
        }

    def erase(self, *, marker: str, now: dt.datetime) -> dict[str, int]:
        """Replace every word of this customer's with ``marker``; return what changed."""
        with transaction.atomic():
            out = self.counts()
            self.messages().update(
                body=marker,
                body_full="",
                subject=Case(When(subject="", then=Value("")), default=Value(marker)),
                from_address="",
                to_address="",
                message_id="",
                in_reply_to="",
                references="",
            )
            # The Message-ID goes too: a reply to it must not find the erased thread again.
            self.emails().update(subject=marker, body=marker, message_id="")
            self.orders().update(cancel_reason=marker)
            self.refunds().update(reason=marker)
            for ticket in self.tickets().select_for_update():
                ticket.subject = marker
                # Tags are the desk's categories ("refund", "late"): they stay unless they name
                # the customer.
                ticket.tags = [t for t in ticket.tags if not _names(t, self.customer)]
                ticket.save(update_fields=["subject", "tags", "updated_at"])
            c = self.customer
            c.name, c.email, c.erased_at = marker, pseudonym_email(c), now
            c.save(update_fields=["name", "email", "erased_at"])
        return out


def _names(text: str, customer: Customer) -> bool:
    """Whether ``text`` carries the customer's name, a part of it, or their address."""
    lowered = text.lower()
    parts = {p for p in customer.name.lower().split() if len(p) >= 3}
    local = customer.email.lower().partition("@")[0]
    return any(p in lowered for p in parts) or local in lowered or customer.email.lower() in lowered


def customers_by_email(*, email: str, merchant_ids: list[int]) -> QuerySet[Customer]:
    """Customers with this address at these merchants (an address is unique per merchant)."""
    return (
        Customer.objects.filter(Q(email__iexact=email.strip()), merchant_id__in=merchant_ids)
        .select_related("merchant")
        .order_by("merchant__slug")
    )
