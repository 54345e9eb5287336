"""Mail services' inbound webhooks, through django-anymail: Mailgun's signed routes.

Anymail verifies the signature (an HMAC-SHA256 of the timestamp and token, keyed with
Mailgun's webhook signing key) and turns either of Mailgun's forms — "fully parsed"
fields, or the raw MIME when the route's URL ends in ``mime`` — into one
``AnymailInboundMessage``. Here, on top of that:

- a signature older than ``DESKHAND_INBOUND_WEBHOOK_TOLERANCE_SECONDS`` is refused as
  stale (a captured post cannot be replayed next week);
- every refusal of the request itself (forged, stale, not set up, not an inbound post)
  is a 4xx with one sentence, and stores nothing;
- every message the post carries is handed to ``inbound_received``, the same function
  the SMTP receiver calls; the answer is 200 for a message taken (threaded, held or
  a duplicate), and 406 — Mailgun's "rejected, do not retry" — for one refused
  (to no merchant's address, too large, unreadable), which is stored all the same.
"""

from __future__ import annotations

import time
from typing import Any

from anymail.exceptions import (
    AnymailConfigurationError,
    AnymailError,
    AnymailWebhookValidationFailure,
)
from anymail.webhooks.mailgun import MailgunInboundWebhookView
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from deskhand.domain.mail.intake import inbound_received
from deskhand.domain.mail.models import InboundSource, InboundStatus
from deskhand.domain.mail.parse import Verdicts


def _say(status: int, sentence: str) -> HttpResponse:
    return HttpResponse(f"{sentence}\n", status=status, content_type="text/plain; charset=utf-8")


def _verdict(message: Any, name: str) -> str:
    value = message.get(name)
    return str(value).strip().lower()[:16] if value is not None else ""


def _raw(request: HttpRequest, message: Any) -> bytes:
    """The message's bytes: Mailgun's raw MIME when the route posts it, else anymail's rebuild."""
    mime = request.POST.get("body-mime")
    if mime is not None:
        return mime.encode("utf-8", "surrogateescape")
    try:
        return bytes(message.as_bytes())
    except Exception:  # a header the policy will not fold: the text form still holds it all
        return str(message.as_string()).encode("utf-8", "replace")


@csrf_exempt
@require_POST
def mailgun_inbound(request: HttpRequest) -> HttpResponse:
    key = settings.ANYMAIL.get("MAILGUN_WEBHOOK_SIGNING_KEY", "")
    if not key:
        return _say(404, "Mailgun inbound mail is not set up on this server (no signing key).")
    view = MailgunInboundWebhookView(webhook_signing_key=key)
    try:
        view.run_validators(request)
    except AnymailWebhookValidationFailure:
        return _say(403, "The Mailgun signature does not match; nothing was stored.")
    except RequestDataTooBig:
        return _say(413, "The post is larger than this server takes; nothing was stored.")
    try:
        signed_at = int(request.POST["timestamp"])
    except (KeyError, ValueError):
        return _say(400, "The Mailgun post has no usable timestamp; nothing was stored.")
    tolerance = settings.DESKHAND_INBOUND_WEBHOOK_TOLERANCE_SECONDS
    if abs(time.time() - signed_at) > tolerance:
        return _say(
            403,
            f"The Mailgun signature is more than {tolerance} seconds old (or from the "
            "future), so it may be a replay; nothing was stored.",
        )
    try:
        events = view.parse_events(request)
    except (AnymailConfigurationError, AnymailError, KeyError, ValueError) as exc:
        return _say(
            400, f"This is not a Mailgun inbound post ({type(exc).__name__}); nothing was stored."
        )

    refused = []
    for event in events:
        message = event.message
        row = inbound_received(
            raw=_raw(request, message),
            source=InboundSource.MAILGUN,
            envelope_sender=message.envelope_sender,
            envelope_recipients=[r for r in [message.envelope_recipient] if r],
            verdicts=Verdicts(
                spf=_verdict(message, "X-Mailgun-Spf"),
                dkim=_verdict(message, "X-Mailgun-Dkim-Check-Result"),
            ),
        )
        if row.status == InboundStatus.REJECTED:
            refused.append(row.reason)
    if refused:
        return _say(406, f"Stored but refused: {refused[0]}")
    return _say(200, "Stored.")
