"""Mail to build and post: raw messages, Mailgun's signed inbound posts, a test signing key."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import socket
import time
from collections.abc import Iterator
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.db import close_old_connections
from django.utils import timezone

from deskhand.domain.desk.models import Routing, TicketMessage
from deskhand.domain.mail.intake import inbound_received
from deskhand.domain.mail.models import InboundEmail, InboundStatus
from deskhand.domain.mail.process import inbound_process
from deskhand.domain.mail.smtp import InboundHandler, smtp_options
from tests.support.waiting import PATIENCE_S, until

# A real key, of the shape Mailgun issues, that the server under test is configured with.
SIGNING_KEY = "key-" + "3ax6xnjp29jd6fds4gc373sgvjxteol0"[:32]
NORTHWIND = "support@northwind.test"
LUMEN = "help@lumen.test"
DANA = "dana.whitfield@example.com"  # NW-1's customer in the seed


def mail(
    *,
    to: str = NORTHWIND,
    sender: str = "Sam Rivera <sam@example.org>",
    subject: str = "Where is my order?",
    body: str | None = "Hello, my order has not arrived.",
    message_id: str | None = "<auto>",
    headers: dict[str, str] | None = None,
    html: str | None = None,
    attachments: list[tuple[str, str, bytes]] = (),  # type: ignore[assignment]
) -> bytes:
    """A message as a mail client would send it (``message_id=None``: without one)."""
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = to
    msg["Subject"] = subject
    msg["Date"] = format_datetime(timezone.now())
    if message_id == "<auto>":
        message_id = f"<{secrets.token_hex(8)}@mail.example.org>"
    if message_id:
        msg["Message-ID"] = message_id
    for name, value in (headers or {}).items():
        msg[name] = value
    if html is not None and body is None:
        msg.set_content(html, subtype="html")
    else:
        msg.set_content(body or "")
        if html is not None:
            msg.add_alternative(html, subtype="html")
    for filename, ctype, data in attachments:
        maintype, _, subtype = ctype.partition("/")
        msg.add_attachment(data, maintype=maintype, subtype=subtype, filename=filename)
    return msg.as_bytes()


def mailgun_sign(
    fields: dict[str, Any], *, key: str = SIGNING_KEY, at: int | None = None
) -> dict[str, Any]:
    """Mailgun's signature block added to ``fields``: HMAC-SHA256 of timestamp + token."""
    timestamp = str(int(time.time()) if at is None else at)
    token = secrets.token_hex(25)  # 50 characters, as Mailgun's
    signature = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    return {**fields, "timestamp": timestamp, "token": token, "signature": signature}


def mailgun_parsed(
    *,
    recipient: str = NORTHWIND,
    sender: str = "sam@example.org",
    subject: str = "Grinder arrived broken",
    body: str = "The burr grinder arrived with a cracked hopper.",
    message_id: str = "<CAEPk3R+4Zr@mail.example.org>",
    spf: str = "Pass",
    dkim: str = "Pass",
    extra_headers: list[list[str]] | None = None,
) -> dict[str, Any]:
    """Mailgun's "fully parsed" forward() post, the fields its documentation lists."""
    headers = [
        ["X-Mailgun-Spam-Rules", "DKIM_SIGNED, DKIM_VALID, DKIM_VALID_AU"],
        ["X-Mailgun-Dkim-Check-Result", dkim],
        ["X-Mailgun-Spf", spf],
        ["X-Mailgun-Sscore", "0.1"],
        ["X-Mailgun-Sflag", "No"],
        ["X-Mailgun-Incoming", "Yes"],
        ["X-Envelope-From", f"<{sender}>"],
        ["Received", "from mail.example.org by mxa.mailgun.org with ESMTP"],
        ["Mime-Version", "1.0"],
        ["From", f"Sam Rivera <{sender}>"],
        ["Date", format_datetime(timezone.now())],
        ["Message-Id", message_id],
        ["Subject", subject],
        ["To", f"Northwind Support <{recipient}>"],
        ["Content-Type", 'multipart/alternative; boundary="089e0825ccf874a0bb055b4f7e23"'],
        *(extra_headers or []),
    ]
    return mailgun_sign(
        {
            "recipient": recipient,
            "sender": sender,
            "from": f"Sam Rivera <{sender}>",
            "subject": subject,
            "message-headers": json.dumps(headers),
            "body-plain": body,
            "body-html": f"<div>{body}</div>",
            "stripped-text": body,
            "stripped-html": f"<div>{body}</div>",
        }
    )


def mailgun_mime(
    raw: bytes, *, recipient: str = NORTHWIND, sender: str = "sam@example.org"
) -> dict[str, Any]:
    """Mailgun's raw-MIME forward() post (a route URL ending in ``mime``)."""
    return mailgun_sign(
        {"recipient": recipient, "sender": sender, "body-mime": raw.decode("utf-8")}
    )


@pytest.fixture
def signing_key(settings):
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": SIGNING_KEY}
    return SIGNING_KEY


def free_port() -> int:
    # aiosmtpd probes its own port after binding, so it cannot be handed port 0.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def intake_now(row: InboundEmail) -> InboundEmail:
    """The intake workflow's first step, run here: what a worker does to a stored row.

    For tests of the processing rules (threading, hygiene, holds), inside the test's own
    transaction; the workflow itself is driven by the tests that run a worker or an
    executor (tests/mail/test_intake.py, the crash sweep). The line is not routed here,
    as a line added in a test's transaction never was.
    """
    return inbound_process(row.pk) or row


def received(raw: bytes, **kwargs: Any) -> InboundEmail:
    """Store ``raw`` as a receiver does, then process it as the intake workflow does."""
    kwargs.setdefault("source", "smtp")
    return intake_now(inbound_received(raw=raw, **kwargs))


def intake_idle(timeout: float = PATIENCE_S) -> None:
    """Wait until every stored message is processed and every customer line routed.

    A receiver answers once the message is stored; a worker (here the test's in-process
    executor) processes it a moment later.
    """

    def counts() -> tuple[int, int]:
        close_old_connections()
        return (
            InboundEmail.objects.filter(status=InboundStatus.RECEIVED).count(),
            TicketMessage.objects.filter(routing=Routing.PENDING).count(),
        )

    until(
        "every stored message processed and every customer line routed",
        lambda: counts() == (0, 0),
        timeout=timeout,
        seen=lambda: "{} messages unprocessed, {} lines unrouted".format(*counts()),
    )


@pytest.fixture
def receiver(tseeded) -> Iterator[int]:
    """The SMTP receiver (our aiosmtpd handler) on a loopback port, on the test database.

    It stores and enqueues; a test that wants what it stored processed runs a worker too
    (``dbos_executor`` in process, or ``worker_process``)."""
    port = free_port()
    controller = Controller(InboundHandler(), hostname="127.0.0.1", port=port, **smtp_options())
    controller.start()
    yield port
    controller.stop()
