"""Processing a stored message: believe it or hold it, then thread it or leave it aside.

``inbound_process(inbound_id)`` is a plain function over one stored row, idempotent: it
takes the row's lock, does nothing if the row was already processed, and otherwise writes
its outcome in the same transaction as the thread line it adds. Run twice, or by two
processes at once, it adds one line. The intake workflow (``deskhand.inbound``, named after
the row's primary key: ``deskhand.engine.intake``) calls it as its first step on a
worker, and routes the customer's line it added as its second.

In order:

1. **Sender checks**: a message that failed the sender authentication it was given
   (``parse.Verdicts.failure``) is quarantined: a forged From must not speak for a customer.
2. **Volume**: more than the merchant's hourly limit from one sender, or to one support
   address, is quarantined (kept for a person; never threaded, never a run).
3. **Machines**: a bounce is never on a thread (it is linked to the ticket whose message
   it reports on, if any); an auto-reply or bulk mail joins a ticket it answers, flagged,
   and opens none.
4. **Threading** (``deskhand.domain.desk.thread``): the ticket it answers, else a new ticket for
   the customer with that address (made if new; an erased customer is a new one).
5. **The thread line**: the trimmed text for readers, the whole text kept beside it; the
   attachments kept by name, type and size, their bytes up to a limit, never in the text.
"""

from __future__ import annotations

import datetime as dt
from email.message import EmailMessage

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from deskhand.domain.desk.addresses import routing_check_returned
from deskhand.domain.desk.models import Merchant, MessageChannel
from deskhand.domain.desk.thread import (
    address_parts,
    customer_for_address,
    message_ids,
    thread_customer_message_add,
    ticket_for_reply,
    ticket_open,
    tickets_by_message_ids,
)
from deskhand.domain.mail import hygiene, parse
from deskhand.domain.mail.models import (
    Automated,
    InboundAttachment,
    InboundEmail,
    InboundStatus,
)

HOUR = dt.timedelta(hours=1)


def _hold(row: InboundEmail, status: str, code: str, reason: str) -> None:
    row.status, row.reason_code, row.reason = status, code, reason


def _over_volume(row: InboundEmail, merchant: Merchant) -> tuple[str, str] | None:
    """(code, sentence) when this message is one too many this hour, else None.

    Counted over the rows stored before it (whatever became of them): a flood is a flood,
    and the count of a row never changes however often it is processed.
    """
    earlier = InboundEmail.objects.filter(
        merchant=merchant, received_at__gte=row.received_at - HOUR, pk__lt=row.pk
    )
    limit = merchant.inbound_per_sender_per_hour
    if earlier.filter(from_address=row.from_address).count() >= limit:
        return "volume_sender", (
            f"Over the limit of {limit} messages an hour from one sender; held for a person."
        )
    limit = merchant.inbound_per_address_per_hour
    if row.support_address_id and (
        earlier.filter(support_address_id=row.support_address_id).count() >= limit
    ):
        return "volume_address", (
            f"Over the limit of {limit} messages an hour to this support address; held for a person."
        )
    return None


def _attachments(row: InboundEmail, found: list[parse.Attachment]) -> list[InboundAttachment]:
    keep = settings.DESKHAND_INBOUND_ATTACHMENT_MAX_BYTES
    return InboundAttachment.objects.bulk_create(
        InboundAttachment(
            inbound=row,
            filename=a.filename,
            content_type=a.content_type,
            size=len(a.content),
            content=a.content if len(a.content) <= keep else None,
            inline=a.inline,
        )
        for a in found[: settings.DESKHAND_INBOUND_MAX_ATTACHMENTS]
    )


def _thread(row: InboundEmail, merchant: Merchant, msg: EmailMessage) -> None:
    automated = hygiene.automated(
        msg, from_address=row.from_address, envelope_sender=row.envelope_sender
    )
    row.automated = automated
    in_reply_to = parse.header(msg, "In-Reply-To")
    references = parse.header(msg, "References")

    if automated == Automated.BOUNCE:
        ids = message_ids(in_reply_to, references) + parse.reported_message_ids(msg)
        tickets = tickets_by_message_ids(merchant.pk, ids)
        row.ticket = tickets[0] if tickets else None
        about = f" about a message on {row.ticket.reference}" if row.ticket else ""
        _hold(
            row,
            InboundStatus.IGNORED,
            "bounce",
            f"A delivery report (bounce){about}: stored, never on a thread or a reason to run.",
        )
        return

    _, tag = address_parts(row.recipient)
    # This very message already on a thread (its row was reset, or written by another way
    # in): it belongs where it is, and adding it again adds nothing.
    already = tickets_by_message_ids(merchant.pk, [row.message_id])
    ticket, how = (
        (already[0], "again")
        if already
        else ticket_for_reply(
            merchant_id=merchant.pk,
            sender=row.from_address,
            in_reply_to=in_reply_to,
            references=references,
            tag=tag,
            subject=row.subject,
        )
    )
    if ticket is None and automated:
        _hold(
            row,
            InboundStatus.IGNORED,
            "automated_no_ticket",
            f"An {Automated(automated).label} that answers no ticket of ours opens none.",
        )
        return

    name, _ = parse.sender(msg)
    code = f"threaded_{how}" if ticket is not None else "threaded_new"
    if ticket is None:
        customer = customer_for_address(merchant=merchant, address=row.from_address, name=name)
        ticket = ticket_open(merchant=merchant, customer=customer, subject=row.subject)
        row.opened_ticket = True
        row.reason = f"Opened {ticket.reference}: {how}." if how else ""
    found = parse.content(msg)
    attachments = _attachments(row, found.attachments)
    body = found.trimmed or (
        f"(no text; {len(attachments)} attachment(s))" if attachments else "(no text)"
    )
    row.thread_message = thread_customer_message_add(
        ticket=ticket,
        channel=MessageChannel.EMAIL,
        body=body,
        body_full=found.text,
        subject=row.subject,
        from_address=row.from_address,
        to_address=row.support_address.address if row.support_address else row.recipient,
        message_id=row.message_id if len(row.message_id) <= 250 else "",
        in_reply_to=in_reply_to[:250],
        references=references,
        automated=automated,
        sent_at=parse.date(msg),
        received_at=row.received_at,
        announce=False,  # the intake workflow routes the line as its next step
    )
    row.ticket, row.customer = ticket, ticket.customer
    _hold(row, InboundStatus.THREADED, code, row.reason)


def inbound_process(inbound_id: int) -> InboundEmail | None:
    """Decide what a stored message is and act on it, once (see the module).

    Under the merchant's row lock (one new customer and one next ticket number at a time),
    every message of the merchant still waiting that was stored before this one is processed
    first, in the order they were stored: workers take messages from the intake queue
    several at a time, and a customer's reply must never be threaded before the message it
    answers, whichever workflow got here first. Their own workflows then find them done.
    """
    merchant_id = (
        InboundEmail.objects.filter(pk=inbound_id).values_list("merchant_id", flat=True).first()
    )
    with transaction.atomic():
        if merchant_id is None:
            row = InboundEmail.objects.select_for_update().filter(pk=inbound_id).first()
            if row is not None and row.status == InboundStatus.RECEIVED:
                # Storing rejects these; only a hand-edited row gets here.
                _hold(row, InboundStatus.REJECTED, "no_merchant", "It belongs to no merchant.")
                row.processed_at = timezone.now()
                row.save()
            return row
        # The merchant's lock first, then the rows': every processor takes them in this order.
        merchant = Merchant.locked(merchant_id)
        waiting = (
            InboundEmail.objects.select_for_update(of=("self",))
            .select_related("support_address")
            .filter(merchant_id=merchant_id, status=InboundStatus.RECEIVED, pk__lte=inbound_id)
            .order_by("pk")
        )
        for row in waiting:
            _process_locked(row, merchant)
        return InboundEmail.objects.select_related("support_address").filter(pk=inbound_id).first()


def _check_text(msg: EmailMessage) -> str:
    try:
        return parse.content(msg).text
    except Exception:  # an unreadable body carries no check; the usual checks deal with it
        return ""


def _process_locked(row: InboundEmail, merchant: Merchant) -> None:
    """Process one waiting row; the caller holds the merchant's lock and the row's."""
    msg = parse.message_from_bytes(bytes(row.raw))
    address = row.support_address
    check = None if address is None else routing_check_returned(address, _check_text(msg))
    failure = parse.Verdicts(row.spf, row.dkim, row.dmarc).failure()
    volume = None if failure or check else _over_volume(row, merchant)
    if check is not None:
        # Our own routing check, back through the merchant's mail server: never a ticket.
        _hold(
            row,
            InboundStatus.IGNORED,
            "routing_check",
            f"The routing check of {address} came back: mail to it reaches Deskhand.",
        )
    elif address is not None and address.verified_at is None:
        _hold(
            row,
            InboundStatus.QUARANTINED,
            "address_unverified",
            f"{address} has not passed its routing check: its mail opens no ticket until it"
            " does (Merchant → Addresses). Held for a person.",
        )
    elif failure:
        _hold(
            row,
            InboundStatus.QUARANTINED,
            "auth_failed",
            f"{failure[0].upper()}{failure[1:]}; held for a person, never threaded.",
        )
    elif volume is not None:
        _hold(row, InboundStatus.QUARANTINED, *volume)
    else:
        _thread(row, merchant, msg)
    row.processed_at = timezone.now()
    row.save()
