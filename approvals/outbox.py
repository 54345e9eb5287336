"""Sending the notification outbox: at least once, with a stable id, retried with backoff.

``outbox_send_due`` is called by the worker's sweep (``agent.ops.reconciler``) every
few seconds. Each due row is claimed with ``FOR UPDATE SKIP LOCKED`` (two
workers never send the same row at once), sent, and marked ``sent_at`` in the
same transaction. A crash after the receiver accepted it and before that
commit leaves the row unsent, so it is sent again: delivery is at least once,
and every copy carries the same id — the email's ``Message-ID``
(``<notification id@domain>``: mail clients show one), the webhook's
``webhook-id`` and ``X-Deskhand-Delivery`` headers (the receiver deduplicates). A webhook
is signed with Standard Webhooks (``webhook-signature``) and, for receivers written
before it, with ``X-Deskhand-Signature`` too.

A failure is recorded on the row (``attempts``, ``last_error``) and retried
after ``deskhand.infra.retry.backoff`` (5 s doubling, capped at an hour);
nothing is ever dropped. Each webhook attempt is also a ``WebhookDelivery``
row, the delivery log the admin shows.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
import time
import urllib.error
import urllib.request
import uuid

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.utils import timezone
from standardwebhooks import Webhook

from approvals.notification_models import Notification, Transport, WebhookDelivery, WebhookEndpoint
from deskhand.infra import crashpoints
from deskhand.infra.crashpoints import Point
from deskhand.infra.retry import backoff

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT = 10.0


def message_id(notification: Notification) -> str:
    return f"<{notification.id}@{settings.DESKHAND_MESSAGE_ID_DOMAIN}>"


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 over ``"<timestamp>.<body>"`` with the merchant's secret."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return f"sha256={mac.hexdigest()}"


def standard_signer(secret: str) -> Webhook:
    """The Standard Webhooks signer for an endpoint's secret.

    A secret made since the API (``whsec_<base64>``) is the key it names; an older one is
    keyed by its own bytes, so its receiver verifies with ``whsec_`` + base64 of that
    secret (docs/api.md: moving a receiver over).
    """
    if secret.startswith("whsec_"):
        return Webhook(secret)
    return Webhook(secret.encode())


def standard_headers(
    secret: str, *, webhook_id: str, when: dt.datetime, body: bytes
) -> dict[str, str]:
    """``webhook-id``, ``webhook-timestamp`` and ``webhook-signature`` (standardwebhooks.com)."""
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": standard_signer(secret).sign(webhook_id, when, body),
    }


def webhook_body(notification: Notification) -> bytes:
    """The JSON body: the payload written with the event, plus its delivery id."""
    data = {**notification.payload, "delivery_id": str(notification.id)}
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def _send_email(notification: Notification) -> None:
    # A one-time secret (an invitation's link, a routing check's token) waits in the payload,
    # scrubbed once sent, never in the body.
    body = notification.body.replace("{secret}", str(notification.payload.get("secret", "")))
    EmailMessage(
        subject=notification.subject,
        body=body,
        to=[notification.recipient],
        headers={"Message-ID": message_id(notification)},
    ).send(fail_silently=False)


def _send_webhook(notification: Notification) -> str:
    """POST it; log the attempt; return the error ("" when the receiver took it)."""
    hook = (
        WebhookEndpoint.objects.filter(merchant_id=notification.merchant_id).first()
        if notification.merchant_id is not None
        else None
    )
    if hook is None or not hook.active:
        return "the merchant's webhook was removed or switched off"
    body = webhook_body(notification)
    now = dt.datetime.fromtimestamp(int(time.time()), tz=dt.UTC)
    stamp = str(int(now.timestamp()))
    request = urllib.request.Request(
        notification.recipient,
        data=body,
        method="POST",
        headers={
            "Content-Type": "application/json",
            "User-Agent": "Deskhand-Webhook/1",
            "X-Deskhand-Event": notification.event,
            "X-Deskhand-Delivery": str(notification.id),
            "X-Deskhand-Timestamp": stamp,
            # Today's signature, kept while receivers move to the standard headers below.
            "X-Deskhand-Signature": signature(hook.secret, stamp, body),
            # Standard Webhooks: the notification id is the webhook-id, the same on every retry.
            **standard_headers(hook.secret, webhook_id=str(notification.id), when=now, body=body),
        },
    )
    started = time.monotonic()
    status: int | None = None
    error = ""
    try:
        with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status, error = exc.code, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"
    ok = status is not None and 200 <= status < 300
    WebhookDelivery.objects.create(
        notification=notification,
        attempt=notification.attempts + 1,
        status_code=status,
        ok=ok,
        error=error[:2000],
        duration_ms=int((time.monotonic() - started) * 1000),
    )
    return "" if ok else (error or f"HTTP {status}")


def _send(notification: Notification) -> str:
    """Send it; the error in words, or "" if the receiver accepted it."""
    if notification.transport == Transport.EMAIL:
        _send_email(notification)
        return ""
    return _send_webhook(notification)


def outbox_send_one(pk: uuid.UUID, *, now: dt.datetime) -> bool | None:
    """Send one due row: ``True`` sent, ``False`` failed (retried later), ``None`` not due/claimed.

    Crash points ``before_send`` and ``after_send`` (by transport) sit on either side of
    the send (``deskhand.infra.crashpoints``; the SIGKILL tests install them in a worker).
    """
    with transaction.atomic():
        row = (
            Notification.objects.select_for_update(skip_locked=True)
            .filter(pk=pk, sent_at__isnull=True, next_attempt_at__lte=now)
            .first()
        )
        if row is None:
            return None
        crashpoints.at(Point.BEFORE_SEND, row.transport)
        try:
            with transaction.atomic():  # a savepoint: a crashing backend leaves the row usable
                error = _send(row)
        except Exception as exc:  # any failure is the receiver's: keep the row, retry later
            error = f"{type(exc).__name__}: {exc}"
        if error:
            row.attempts += 1
            row.last_error = error[:2000]
            row.next_attempt_at = now + backoff(row.attempts)
            row.save(update_fields=["attempts", "last_error", "next_attempt_at"])
            log.warning("notification %s attempt %d failed: %s", row.pk, row.attempts, error)
            return False
        # Accepted by the receiver; a crash before this commit sends it again (same id).
        crashpoints.at(Point.AFTER_SEND, row.transport)
        row.attempts += 1
        row.sent_at = timezone.now()
        row.last_error = ""
        fields = ["attempts", "sent_at", "last_error"]
        if "secret" in row.payload:  # a one-time token: kept in clear only until sent
            row.payload = {k: v for k, v in row.payload.items() if k != "secret"}
            fields.append("payload")
        row.save(update_fields=fields)
    return True


def outbox_send_due(*, now: dt.datetime | None = None, limit: int = 100) -> dict[str, int]:
    """Send every notification due at ``now`` (oldest first); counts of sent and failed."""
    now = now or timezone.now()
    due = list(
        Notification.objects.filter(sent_at__isnull=True, next_attempt_at__lte=now)
        .order_by("next_attempt_at", "created_at")
        .values_list("pk", flat=True)[:limit]
    )
    counts = {"sent": 0, "failed": 0}
    for pk in due:
        done = outbox_send_one(pk, now=now)
        if done is True:
            counts["sent"] += 1
        elif done is False:
            counts["failed"] += 1
    return counts
