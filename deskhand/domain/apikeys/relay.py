"""The agent's replies on help-desk tickets, relayed to the desk as signed webhooks.

Each agent line on the thread of a ticket that came from a source with a ``reply_url`` gets
one ``HelpdeskReply`` row (unique per line: claimed once), written by the worker's sweep.
The row is POSTed with Standard Webhooks headers under the source's secret and a stable
``webhook-id`` (``reply_<line id>``), so a copy sent again after a crash or a failure is
one the desk deduplicates: at least once, never dropped, retried with backoff
(5 s doubling, at most an hour). Each attempt's outcome stays on the row (the admin shows it).

The line itself is written by the run's email effect, claimed once in the ledger. On a
ticket whose desk takes replies (``relays_replies``) that effect stays in the database
whatever the merchant's mail adapter (``agent.ledger.intents.adapter_name``): the reply
reaches the customer through the desk only, never also as an email.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import urllib.error
import urllib.request

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from standardwebhooks import Webhook

from deskhand.domain.apikeys.models import ExternalTicket, HelpdeskReply
from deskhand.domain.desk.models import MessageDirection, MessageKind, TicketMessage
from deskhand.infra.retry import backoff

log = logging.getLogger(__name__)

TIMEOUT = 10.0


def relays_replies(ticket_id: int) -> bool:
    """Does this ticket's agent line leave as a webhook to the help desk it came from?

    The condition ``replies_claim`` relays under: the ticket came from a source that is
    active and has a ``reply_url``.
    """
    return (
        ExternalTicket.objects.filter(ticket_id=ticket_id, source__active=True)
        .exclude(source__reply_url="")
        .exists()
    )


def replies_claim(*, now: dt.datetime, limit: int = 200) -> int:
    """One relay row per agent line on a help-desk ticket written since its source connected."""
    lines = (
        TicketMessage.objects.filter(
            kind=MessageKind.AGENT,
            direction=MessageDirection.OUTBOUND,
            helpdesk_reply__isnull=True,
            ticket__external__source__active=True,
            created_at__gte=F("ticket__external__source__created_at"),
        )
        .exclude(ticket__external__source__reply_url="")
        .select_related("ticket")
        .order_by("id")[:limit]
    )
    rows = []
    for line in lines:
        link = ExternalTicket.objects.select_related("source").get(ticket=line.ticket)
        rows.append(
            HelpdeskReply(
                source=link.source,
                message=line,
                webhook_id=f"reply_{line.pk}",
                payload={
                    "type": "message.created",
                    "external_id": link.external_id,
                    "ticket": line.ticket.reference,
                    "message": {
                        "id": line.pk,
                        "subject": line.subject,
                        "body": line.body,
                        "created_at": line.created_at.isoformat(),
                    },
                },
                next_attempt_at=now,
            )
        )
    return len(HelpdeskReply.objects.bulk_create(rows, ignore_conflicts=True))


def _post(reply: HelpdeskReply) -> tuple[int | None, str]:
    body = json.dumps(reply.payload, sort_keys=True, separators=(",", ":")).encode()
    when = dt.datetime.fromtimestamp(int(timezone.now().timestamp()), tz=dt.UTC)
    request = urllib.request.Request(
        reply.source.reply_url,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "Deskhand-Webhook/1",
            "webhook-id": reply.webhook_id,
            "webhook-timestamp": str(int(when.timestamp())),
            "webhook-signature": Webhook(reply.source.secret).sign(reply.webhook_id, when, body),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, ""
    except urllib.error.HTTPError as exc:
        return exc.code, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def reply_send_one(pk: int, *, now: dt.datetime) -> bool | None:
    """Send one due row: True sent, False failed (retried later), None not due or taken."""
    with transaction.atomic():
        row = (
            HelpdeskReply.objects.select_for_update(skip_locked=True)
            .select_related("source")
            .filter(pk=pk, sent_at__isnull=True, next_attempt_at__lte=now)
            .first()
        )
        if row is None:
            return None
        status, error = _post(row)
        row.attempts += 1
        row.last_status = status
        if status is not None and 200 <= status < 300:
            row.sent_at, row.last_error = timezone.now(), ""
            row.save(update_fields=["attempts", "last_status", "sent_at", "last_error"])
            return True
        row.last_error = (error or f"HTTP {status}")[:2000]
        row.next_attempt_at = now + backoff(row.attempts)
        row.save(update_fields=["attempts", "last_status", "last_error", "next_attempt_at"])
        log.warning("help-desk reply %s attempt %d failed: %s", row.webhook_id, row.attempts, error)
        return False


def replies_relay(*, now: dt.datetime | None = None, limit: int = 100) -> dict[str, int]:
    """The worker's sweep: claim new replies, send every due one."""
    now = now or timezone.now()
    counts = {"helpdesk_replies_claimed": replies_claim(now=now), "helpdesk_replies_sent": 0}
    counts["helpdesk_replies_failed"] = 0
    due = HelpdeskReply.objects.filter(sent_at__isnull=True, next_attempt_at__lte=now).order_by(
        "next_attempt_at"
    )
    for pk in list(due.values_list("pk", flat=True)[:limit]):
        done = reply_send_one(pk, now=now)
        if done is True:
            counts["helpdesk_replies_sent"] += 1
        elif done is False:
            counts["helpdesk_replies_failed"] += 1
    return counts
