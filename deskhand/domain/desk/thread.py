"""A ticket is a thread: finding the ticket a message answers, opening one, adding a line.

Inbound mail (``deskhand.domain.mail``) and, later, the API and help-desk connectors write a
customer's words through these functions, so every channel threads by the same rules:

1. the mail headers first: ``In-Reply-To`` / ``References`` against the Message-IDs on
   the merchant's threads (what we sent, and what we stored);
2. then a reply token, the part after ``+`` in the address it was sent to
   (``support+nw-12.3fa9c01b2e@…``), which only we can mint (``reply_token``);
3. then a ticket reference in the subject (``[#NW-12]``).

Whichever matched, the sender must be that ticket's customer: a stranger who guesses a
reference, or quotes a Message-ID, opens a ticket of their own and writes nothing into
someone else's conversation (which a model with a refund tool then reads as the customer).
A customer who was erased is gone from every match: if they write again, they are a new
customer with a new ticket, and nothing erased comes back.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re

from django.db import transaction
from django.db.models import BigIntegerField, Max
from django.db.models.functions import Cast, Lower, Substr
from django.dispatch import Signal
from django.utils.crypto import constant_time_compare, salted_hmac

from deskhand.domain.desk.models import (
    Customer,
    Merchant,
    MessageDirection,
    MessageKind,
    Routing,
    SupportAddress,
    Ticket,
    TicketMessage,
    TicketStatus,
)

SUBJECT_MAX_CHARS = 300  # Ticket.subject's width.

customer_wrote = Signal()
"""Sent once a customer's new line on a thread is committed (``message_id``: its pk).

The desk cannot know what runs do (they sit above it); the agent connects
``agent.customer.route.on_customer_wrote`` here, which hands the line to its routing
workflow, so a message from any channel (the API, a help desk) wakes the run waiting for it
or opens one as the merchant allows. Mail routes its lines in its own intake workflow."""
_TOKEN_SALT = "deskhand.desk.thread.reply_token"
_SUBJECT_REF = re.compile(r"\[#\s*([A-Za-z][A-Za-z0-9]{0,7}-[0-9]{1,9})\s*\]")
_MESSAGE_ID = re.compile(r"<[^<>\s]{1,246}>")


# --- addresses -------------------------------------------------------------------


def address_parts(address: str) -> tuple[str, str]:
    """``support+nw-12.ab12@x.test`` -> (``support@x.test``, ``nw-12.ab12``), lower-cased."""
    local, _, domain = address.strip().lower().rpartition("@")
    base, _, tag = local.partition("+")
    return f"{base}@{domain}", tag


def support_address_find(address: str) -> SupportAddress | None:
    """The support address mail to ``address`` belongs to (plus-tags ignored), or None."""
    base, _ = address_parts(address)
    if not base.strip("@"):
        return None
    return (
        SupportAddress.objects.select_related("merchant")
        .annotate(lower=Lower("address"))
        .filter(lower=base)
        .first()
    )


# --- reply tokens ------------------------------------------------------------------


def reply_token(ticket: Ticket) -> str:
    """The tag of a ticket's reply address: its reference and a MAC only we can make."""
    key = f"{ticket.pk}:{ticket.reference.lower()}"
    mac = salted_hmac(_TOKEN_SALT, key, algorithm="sha256").hexdigest()[:10]
    return f"{ticket.reference.lower()}.{mac}"


def reply_address(ticket: Ticket, support_address: str) -> str:
    """``support+<token>@domain``: a reply to it finds the ticket even without headers."""
    local, _, domain = support_address.rpartition("@")
    return f"{local}+{reply_token(ticket)}@{domain}"


def _ticket_for_token(merchant_id: int, token: str) -> Ticket | None:
    reference, _, mac = token.rpartition(".")
    if not reference or not mac:
        return None
    ticket = Ticket.objects.filter(merchant_id=merchant_id, reference__iexact=reference).first()
    if ticket is None or not constant_time_compare(reply_token(ticket), token.lower()):
        return None
    return ticket


# --- finding the ticket a message answers ------------------------------------------


def message_ids(*headers: str) -> list[str]:
    """Every ``<id>`` in ``In-Reply-To`` / ``References`` values, nearest parent first."""
    found: list[str] = []
    for value in headers:
        for mid in reversed(_MESSAGE_ID.findall(value or "")):
            if mid not in found:
                found.append(mid)
    return found


def tickets_by_message_ids(merchant_id: int, ids: list[str]) -> list[Ticket]:
    """The merchant's tickets whose threads hold these Message-IDs, in the order of ``ids``."""
    if not ids:
        return []
    by_id = {
        m.message_id: m.ticket
        for m in TicketMessage.objects.filter(
            ticket__merchant_id=merchant_id, message_id__in=ids
        ).select_related("ticket__customer")
    }
    return [by_id[mid] for mid in ids if mid in by_id]


def ticket_for_reply(
    *,
    merchant_id: int,
    sender: str,
    in_reply_to: str = "",
    references: str = "",
    tag: str = "",
    subject: str = "",
) -> tuple[Ticket | None, str]:
    """The ticket a customer's message answers, and how it was found (or why not).

    Returns ``(ticket, "headers" | "token" | "subject")`` on a match, or
    ``(None, sentence)``: the sentence says why a message that looked like a reply
    opens a new ticket (empty when it did not look like one).
    """
    sender = sender.strip().lower()
    candidates: list[tuple[str, Ticket]] = [
        ("headers", t)
        for t in tickets_by_message_ids(merchant_id, message_ids(in_reply_to, references))
    ]
    if tag:
        ticket = _ticket_for_token(merchant_id, tag)
        if ticket is not None:
            candidates.append(("token", ticket))
    for reference in _SUBJECT_REF.findall(subject or ""):
        ticket = (
            Ticket.objects.select_related("customer")
            .filter(merchant_id=merchant_id, reference__iexact=reference)
            .first()
        )
        if ticket is not None:
            candidates.append(("subject", ticket))
    if not candidates:
        return None, ""
    for how, ticket in candidates:
        if ticket.customer.erased_at is None and ticket.customer.email.lower() == sender:
            return ticket, how
    how, ticket = candidates[0]
    if ticket.customer.erased_at is not None:
        return None, f"it answers a ticket whose customer was erased ({how}), so it opens a new one"
    return None, (
        f"it answers {ticket.reference} ({how}) but comes from another address than that "
        "ticket's customer, so it opens a new one"
    )


# --- customers and tickets -----------------------------------------------------------


def customer_for_address(*, merchant: Merchant, address: str, name: str = "") -> Customer:
    """The merchant's (not erased) customer with this address, created if there is none.

    Call it under the merchant's row lock (``inbound_process`` holds it): two first
    messages from one new address then make one customer.
    """
    address = address.strip()
    found = Customer.objects.filter(
        merchant=merchant, email__iexact=address, erased_at__isnull=True
    ).first()
    if found is not None:
        return found
    display = " ".join(name.split())[:200] or address.partition("@")[0][:200] or address
    return Customer.objects.create(merchant=merchant, name=display, email=address)


def ticket_reference_next(merchant: Merchant) -> str:
    """``<prefix>-<n+1>`` for the highest ``<prefix>-<n>`` the merchant has (under its lock)."""
    prefix = merchant.reference_prefix
    top = (
        Ticket.objects.filter(merchant=merchant, reference__regex=rf"^{re.escape(prefix)}-[0-9]+$")
        .annotate(n=Cast(Substr("reference", len(prefix) + 2), BigIntegerField()))
        .aggregate(top=Max("n"))["top"]
    )
    return f"{prefix}-{(top or 0) + 1}"


@transaction.atomic
def ticket_open(*, merchant: Merchant, customer: Customer, subject: str) -> Ticket:
    """A new open ticket for the customer, numbered after the merchant's last one."""
    merchant = Merchant.locked(merchant.pk)
    subject = " ".join(subject.split())[:SUBJECT_MAX_CHARS] or "(no subject)"
    return Ticket.objects.create(
        merchant=merchant,
        customer=customer,
        reference=ticket_reference_next(merchant),
        subject=subject,
    )


@transaction.atomic
def thread_customer_message_add(
    *,
    ticket: Ticket,
    channel: str,
    body: str,
    body_full: str = "",
    subject: str = "",
    from_address: str = "",
    to_address: str = "",
    message_id: str = "",
    in_reply_to: str = "",
    references: str = "",
    automated: str = "",
    sent_at: dt.datetime | None = None,
    received_at: dt.datetime | None = None,
    announce: bool = True,
) -> TicketMessage:
    """Add the customer's words to the thread (once per Message-ID), reopening a resolved ticket.

    A message a machine wrote (``automated``) is shown on the thread but leaves the
    ticket's status alone: an out-of-office answer is not the customer coming back.
    ``announce=False`` sends no ``customer_wrote``: the caller routes the line itself, as
    the mail intake's workflow does in its next step.
    """
    if message_id:
        existing = TicketMessage.objects.filter(ticket=ticket, message_id=message_id).first()
        if existing is not None:
            return existing
    message = TicketMessage.objects.create(
        ticket=ticket,
        kind=MessageKind.CUSTOMER,
        channel=channel,
        direction=MessageDirection.INBOUND,
        subject=subject[:SUBJECT_MAX_CHARS],
        body=body,
        body_full=body_full if body_full != body else "",
        from_address=from_address[:320],
        to_address=to_address[:320],
        message_id=message_id[:250],
        in_reply_to=in_reply_to[:250],
        references=references,
        automated=automated,
        sent_at=sent_at,
        received_at=received_at,
        routing=Routing.PENDING,
    )
    # Once committed, whatever a customer's message does to runs happens (the agent's
    # ``customer_message_route`` listens): the same for every channel that adds one here.
    if announce:
        transaction.on_commit(
            lambda: customer_wrote.send(sender=TicketMessage, message_id=message.pk)
        )
    if not automated and ticket.status == TicketStatus.RESOLVED:
        Ticket.objects.filter(pk=ticket.pk).update(
            status=TicketStatus.OPEN, updated_at=message.created_at
        )
    return message


# --- replies to the customer ---------------------------------------------------------

REFERENCES_KEPT = 20  # a long thread's References keeps its root and its newest ids


@dataclasses.dataclass(frozen=True)
class ReplyHeaders:
    """How a reply to a ticket's customer is addressed and threaded (RFC 5322 §3.6.4).

    ``from_address`` is the merchant's support address the customer wrote to (else its
    primary one; empty when the merchant has none, and the mail server's default From is
    used); ``reply_to`` carries the ticket's reply token, so an answer finds the ticket even
    from a client that drops the headers.
    """

    from_name: str
    from_address: str
    reply_to: str
    subject: str
    in_reply_to: str
    references: str


def last_customer_message(ticket: Ticket) -> TicketMessage | None:
    """The customer's newest line on the thread (written by a person, not an auto-reply)."""
    return (
        TicketMessage.objects.filter(ticket=ticket, kind=MessageKind.CUSTOMER, automated="")
        .order_by("-created_at", "-id")
        .first()
    )


def merchant_support_address(ticket: Ticket, written_to: str = "") -> str:
    """The support address a reply on this ticket comes from (see ``ReplyHeaders``)."""
    addresses = list(
        SupportAddress.objects.filter(merchant_id=ticket.merchant_id).order_by("-primary", "pk")
    )
    base, _ = address_parts(written_to) if written_to else ("", "")
    for a in addresses:
        if a.address.lower() == base:
            return a.address
    return addresses[0].address if addresses else ""


def reply_headers(ticket: Ticket) -> ReplyHeaders:
    """``In-Reply-To`` the customer's last message, ``References`` its chain plus its id."""
    last = last_customer_message(ticket)
    support = merchant_support_address(ticket, last.to_address if last else "")
    chain: list[str] = []
    if last is not None and last.message_id:
        chain = [*_MESSAGE_ID.findall(last.references or ""), last.message_id]
        if len(chain) > REFERENCES_KEPT:
            chain = chain[:1] + chain[-(REFERENCES_KEPT - 1) :]
    subject = (last.subject if last and last.subject else "") or ticket.subject
    if not re.match(r"(?i)^\s*re\s*:", subject):
        subject = f"Re: {subject}"
    tag = f"[#{ticket.reference}]"
    if tag.lower() not in subject.lower():
        subject = f"{subject} {tag}"
    return ReplyHeaders(
        from_name=ticket.merchant.name,
        from_address=support,
        reply_to=reply_address(ticket, support) if support else "",
        subject=" ".join(subject.split())[:SUBJECT_MAX_CHARS],
        in_reply_to=last.message_id if last is not None else "",
        references=" ".join(chain),
    )


def signed(body: str, merchant_name: str) -> str:
    """The reply's text as the customer reads it: the merchant signs it, once."""
    body = body.strip()
    if body.splitlines() and body.splitlines()[-1].strip() == merchant_name:
        return body
    return f"{body}\n\n{merchant_name}"


def outbound_message_id(seed: str, from_address: str) -> str:
    """A ``Message-ID`` for a message we send, stable for ``seed`` (a ledger claim), on the
    domain it is sent from: every copy of one reply carries the same id."""
    domain = from_address.rpartition("@")[2] or "deskhand.invalid"
    return f"<{hashlib.sha256(seed.encode()).hexdigest()[:32]}.deskhand@{domain}>"
