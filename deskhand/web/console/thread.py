"""How a ticket's thread reads on the ticket page: as a help desk shows a conversation.

Each line says who wrote it, to whom and how (by email, in the console), when, and
whether the customer saw it: an internal note is drawn apart from everything the
customer was told. The customer's words are marked untrusted (they reach the model
fenced); a message a machine wrote says so, and that it starts no run. The quoted
history trimmed from what the model reads, the attachments and the mail headers are
one click away, never in the way.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.db.models import BooleanField, ExpressionWrapper, Prefetch, Q

from deskhand.domain.desk.models import (
    MessageChannel,
    MessageDirection,
    MessageKind,
    Ticket,
    TicketMessage,
)
from deskhand.domain.mail.models import Automated, InboundAttachment


@dataclasses.dataclass(frozen=True)
class Attachment:
    filename: str
    content_type: str
    size: str
    kept: bool


@dataclasses.dataclass(frozen=True)
class ThreadLine:
    message: TicketMessage
    who: str  # "Dana Whitfield <dana@…>", "Agent", "owner@northwind.test"
    how: str  # "wrote by email", "was emailed", "internal note"
    to: str
    at: dt.datetime
    direction: str
    automated: str
    quoted: str  # the whole text, when the reader sees a trimmed one
    attachments: list[Attachment]
    text: str  # what the reader reads under the line's subject

    @property
    def internal(self) -> bool:
        return self.direction == MessageDirection.INTERNAL

    @property
    def from_customer(self) -> bool:
        return self.message.kind == MessageKind.CUSTOMER


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB"):
        if n < 1024 or unit == "MB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n = n / 1024  # type: ignore[assignment]
    return f"{n} bytes"


def _who(m: TicketMessage, ticket: Ticket) -> str:
    if m.kind == MessageKind.CUSTOMER:
        name = ticket.customer.name
        return f"{name} <{m.from_address}>" if m.from_address else name
    if m.kind == MessageKind.AGENT:
        return "Agent"
    return m.author.email if m.author else "Staff"


_BY: dict[str, str] = {
    MessageChannel.EMAIL: "by email",
    MessageChannel.WEB: "in the console",
    MessageChannel.API: "through the API",
    MessageChannel.HELPDESK: "from the help desk",
}


def _direction(m: TicketMessage) -> str:
    """A customer's line is inbound and a note internal, whatever a bulk copy left."""
    if m.kind == MessageKind.CUSTOMER:
        return MessageDirection.INBOUND
    if m.kind == MessageKind.NOTE:
        return MessageDirection.INTERNAL
    return m.direction


def _how(m: TicketMessage, direction: str) -> str:
    by = _BY.get(m.channel, m.channel)
    if direction == MessageDirection.INTERNAL:
        return "internal note — the customer never sees it"
    if direction == MessageDirection.INBOUND:
        return f"wrote {by}"
    return f"told the customer {by}"


def _text(m: TicketMessage) -> str:
    """The body without the ``Subject:`` line an email's thread copy opens with.

    The copy keeps that line because the model reads the thread as text (and its prompts
    must not change under a run); the page shows the subject once, above the body.
    """
    head = f"Subject: {m.subject}\n\n"
    return m.body.removeprefix(head) if m.subject else m.body


def thread_lines(ticket: Ticket) -> list[ThreadLine]:
    messages = (
        TicketMessage.objects.filter(ticket=ticket)
        .select_related("author", "inbound_email")
        .prefetch_related(
            Prefetch(
                "inbound_email__attachments",
                queryset=InboundAttachment.objects.defer("content").annotate(
                    kept_bytes=ExpressionWrapper(
                        Q(content__isnull=False), output_field=BooleanField()
                    )
                ),
            )
        )
        .order_by("created_at", "id")
    )
    lines = []
    for m in messages:
        inbound = getattr(m, "inbound_email", None)
        files = list(inbound.attachments.all()) if inbound is not None else []
        direction = _direction(m)
        lines.append(
            ThreadLine(
                message=m,
                who=_who(m, ticket),
                how=_how(m, direction),
                to=m.to_address,
                at=m.received_at or m.sent_at or m.created_at,
                direction=direction,
                automated=Automated(m.automated).label
                if m.automated in Automated.values[1:]
                else "",
                quoted=m.body_full if m.body_full and m.body_full != m.body else "",
                attachments=[
                    Attachment(
                        a.filename or "(unnamed)", a.content_type, _size(a.size), a.kept_bytes
                    )
                    for a in files
                ],
                text=_text(m),
            )
        )
    return lines
