"""Storing an inbound message once and handing it to a worker; the one function both ways in call.

``inbound_received`` is what the webhook and the SMTP receiver call with the raw bytes:
it stores the message (``inbound_store``), commits, and hands the row to the intake
workflow (``inbound_enqueue``: ``deskhand.inbound``, named after the row's primary key, on
the ``deskhand-intake`` queue). The receiving process does no more: threading, the
customer's line and what it does to runs happen in that workflow on a worker, as steps,
so a crash anywhere resumes there (``deskhand.engine.intake``).

Why enqueue after the commit rather than in the same transaction: DBOS 3.4's
``enqueue_in_transaction`` takes a SQLAlchemy connection, and Django's atomic block is
not one (it works only through a proxy of Django's psycopg connection that no-ops commit
and close, which is no documented API). A lost hand-on — the process dies between the
commit and the enqueue, or the enqueue fails — leaves a row ``received``; the worker's
sweep (``agent.customer.intake``) enqueues every such row after a grace period, under the
same workflow id, so a second enqueue is the same workflow and nothing runs twice. The
sender is answered only after the commit: a 250/200 is never given for a row that is not
stored.

Storing decides only what the sender must be told now: which merchant's address it was
sent to (none: rejected), whether it is over the size limit (rejected, its first bytes
kept) or unreadable as mail (rejected). Everything else (the sender checks, the volume
limits, threading) is processing, and a stored row always gets an answer the sender's
server or the mail service can act on: 250/200 for a row taken, a 5xx/406 for a refusal.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import logging
from collections.abc import Sequence
from email.message import EmailMessage

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.crypto import salted_hmac

from deskhand.domain.desk.models import SupportAddress
from deskhand.domain.desk.thread import support_address_find
from deskhand.domain.mail import parse
from deskhand.domain.mail.models import InboundEmail, InboundStatus
from deskhand.infra import crashpoints
from deskhand.infra.crashpoints import Point
from deskhand.infra.dbos import client as dbos_client

log = logging.getLogger(__name__)

# Of a message over the size limit, this much is kept: its headers, for whoever looks.
HEAD_BYTES = 64 * 1024
_HASH_SALT = "deskhand.mail.message_id"


def message_id_hash(message_id: str) -> str:
    """The dedupe key: keyed, so the stored hash does not give the sender's text back."""
    return salted_hmac(_HASH_SALT, message_id, algorithm="sha256").hexdigest()


def derived_message_id(raw_sha256: str) -> str:
    """The same bytes always get the same id, so a re-delivery is still one message."""
    return f"<{raw_sha256[:40]}@derived.deskhand.invalid>"


@dataclasses.dataclass(frozen=True)
class Refusal:
    code: str
    reason: str


def _route(msg: EmailMessage, recipients: Sequence[str]) -> tuple[SupportAddress | None, str]:
    """The support address it was sent to: the envelope first, then the delivery headers."""
    candidates = [r.strip().lower() for r in recipients if r and "@" in r]
    candidates += [
        a
        for _, a in parse.addresses(msg, "Delivered-To", "X-Original-To", "To", "Cc")
        if a not in candidates
    ]
    for candidate in candidates:
        found = support_address_find(candidate)
        if found is not None:
            return found, candidate
    return None, candidates[0] if candidates else ""


def inbound_store(
    *,
    raw: bytes,
    source: str,
    envelope_sender: str | None = None,
    envelope_recipients: Sequence[str] = (),
    verdicts: parse.Verdicts | None = None,
    received_at: dt.datetime | None = None,
) -> tuple[InboundEmail, bool]:
    """Store the message unless this merchant already has it; return (row, created)."""
    limit = settings.DESKHAND_INBOUND_MAX_BYTES
    digest = hashlib.sha256(raw).hexdigest()
    too_large = len(raw) > limit
    kept = raw[:HEAD_BYTES] if too_large else raw
    try:
        msg = parse.message_from_bytes(kept, headers_only=too_large)
    except Exception:  # the parser is lenient; this is the belt to its braces
        msg = EmailMessage()
    mid = parse.message_id(msg)
    address, recipient = _route(msg, envelope_recipients)
    _, from_address = parse.sender(msg)
    if verdicts is None:
        verdicts = parse.verdicts_from_authentication_results(
            msg, settings.DESKHAND_INBOUND_AUTHSERV_IDS
        )

    refusal: Refusal | None = None
    if address is None:
        refusal = Refusal("no_merchant", "It was sent to no address a merchant here owns.")
    elif too_large:
        refusal = Refusal(
            "too_large",
            f"It is {len(raw):,} bytes, over the limit of {limit:,} bytes a message may be.",
        )
    elif problem := parse.structure_problem(msg):
        refusal = Refusal("broken_mime", f"{problem[0].upper()}{problem[1:]}.")
    elif not from_address:
        refusal = Refusal("no_sender", "It has no From address, so nobody could be answered.")

    row = InboundEmail(
        received_at=received_at or timezone.now(),
        source=source,
        merchant_id=address.merchant_id if address else None,
        support_address=address,
        recipient=parse.clean(recipient)[:320],
        envelope_sender=None if envelope_sender is None else parse.clean(envelope_sender)[:320],
        envelope_recipients=[parse.clean(r)[:320] for r in envelope_recipients][:50],
        from_address=from_address[:320],
        subject=parse.header(msg, "Subject")[:300],
        message_id=mid or derived_message_id(digest),
        message_id_derived=not mid,
        raw=kept,
        raw_size=len(raw),
        raw_sha256=digest,
        raw_truncated=too_large,
        spf=verdicts.spf[:16],
        dkim=verdicts.dkim[:16],
        dmarc=verdicts.dmarc[:16],
        status=InboundStatus.REJECTED if refusal else InboundStatus.RECEIVED,
        reason_code=refusal.code if refusal else "",
        reason=refusal.reason if refusal else "",
        processed_at=timezone.now() if refusal else None,
    )
    row.message_id_hash = message_id_hash(row.message_id)
    try:
        with transaction.atomic():
            row.save(force_insert=True)
    except IntegrityError:
        # Delivered before (a retried webhook, a re-sent mail): the first row stands. Under
        # concurrent deliveries the insert waited for the first one's commit, so it is there.
        same = InboundEmail.objects.filter(message_id_hash=row.message_id_hash)
        if row.merchant_id is None:
            return same.get(merchant__isnull=True), False
        existing = same.get(merchant_id=row.merchant_id)
        return existing, False
    return row, True


def inbound_enqueue(row: InboundEmail) -> None:
    """Hand a stored row to its intake workflow; never raises (the sweep repeats it).

    A row already processed (a duplicate delivery) needs nothing. A row still waiting is
    enqueued under its own workflow id, whether this is its first delivery or a re-delivery
    of one whose hand-on was lost: the same id is the same workflow.
    """
    if row.status != InboundStatus.RECEIVED or row.merchant_id is None:
        return
    try:
        dbos_client.enqueue_inbound(row.pk)
    except Exception:
        log.exception("inbound mail %s was stored; the sweep hands it to a worker", row.pk)


def inbound_received(
    *,
    raw: bytes,
    source: str,
    envelope_sender: str | None = None,
    envelope_recipients: Sequence[str] = (),
    verdicts: parse.Verdicts | None = None,
) -> InboundEmail:
    """A message arrived (webhook or SMTP): store it once, then hand it to a worker."""
    row, _ = inbound_store(
        raw=raw,
        source=source,
        envelope_sender=envelope_sender,
        envelope_recipients=envelope_recipients,
        verdicts=verdicts,
    )
    crashpoints.at(Point.AFTER_STORE, "inbound")
    inbound_enqueue(row)
    crashpoints.at(Point.AFTER_ENQUEUE, "inbound")
    return row
