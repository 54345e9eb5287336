"""The local SMTP receiver (aiosmtpd): mail in without a mail service.

Each DATA is handed, as the bytes received, to ``inbound_received`` — the function the
webhook calls — and answered only once its row is committed: ``250`` when the message was
taken (threaded, held for a person, or a duplicate of one already stored), a ``5xx`` with
the reason when it is refused (``550`` no merchant owns the address, ``552`` too large,
``554`` unreadable), which is stored all the same. A database that cannot be reached is
``451``: the sending server keeps the message and tries again.

In production it sits behind a real mail server (which does TLS, SPF/DKIM/DMARC and
spam filtering, and relays to it on a private address); in the demo it listens on
loopback by itself. It does not authenticate anyone: never expose it to the internet.
"""

from __future__ import annotations

import logging
from typing import Any

from aiosmtpd.smtp import SMTP, Envelope, Session
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from deskhand.domain.mail.intake import inbound_received
from deskhand.domain.mail.models import InboundEmail, InboundSource, InboundStatus

log = logging.getLogger(__name__)

_REFUSALS = {
    "no_merchant": "550 5.1.1",
    "too_large": "552 5.3.4",
    "broken_mime": "554 5.6.0",
    "no_sender": "554 5.6.0",
}


def smtp_reply(row: InboundEmail) -> str:
    """The SMTP answer for a stored row: one ASCII line."""
    if row.status == InboundStatus.REJECTED:
        code = _REFUSALS.get(row.reason_code, "554 5.7.1")
        reason = " ".join(row.reason.split()).encode("ascii", "replace").decode()
        return f"{code} {reason}"
    return "250 2.0.0 Message stored"


def _receive(raw: bytes, mail_from: str, rcpt_tos: list[str]) -> str:
    close_old_connections()
    try:
        row = inbound_received(
            raw=raw,
            source=InboundSource.SMTP,
            envelope_sender=mail_from,
            envelope_recipients=rcpt_tos,
        )
        return smtp_reply(row)
    finally:
        close_old_connections()


class InboundHandler:
    """aiosmtpd's handler: every message through ``inbound_received``."""

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or b""
        try:
            # Not thread-sensitive: concurrent deliveries store side by side on a pool of
            # threads (each with its own connection), not one after another on one thread
            # (measured: 20 senders queued ~50 ms each behind one another).
            return await sync_to_async(_receive, thread_sensitive=False)(
                raw, envelope.mail_from or "", list(envelope.rcpt_tos)
            )
        except Exception:
            log.exception("inbound mail could not be stored")
            return "451 4.3.0 The message could not be stored now; try again later"


def smtp_options() -> dict[str, Any]:
    """Room past the size limit, so an oversized message is still stored (and refused)."""
    return {
        "data_size_limit": 2 * settings.DESKHAND_INBOUND_MAX_BYTES,
        "enable_SMTPUTF8": True,
        "decode_data": False,
    }
