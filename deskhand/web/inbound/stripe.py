"""Stripe's webhook, one endpoint per merchant: ``/inbound/stripe/<merchant slug>/``.

Each merchant's Stripe account has its own endpoint and so its own signing secret
(``DESKHAND_STRIPE_WEBHOOK_SECRET_<SLUG>``, ``agent.effects.config``): a delivery is
verified with the SDK (``stripe.WebhookSignature.verify_header``, the check
``stripe.Webhook.construct_event`` makes: the ``Stripe-Signature`` HMAC over the timestamp
and the raw body, and the timestamp's age) against the secret of
the merchant the URL names, so one merchant's secret can never speak for another. Then:

- a bad or missing signature is a 401 and nothing is stored; an unknown merchant, or one
  with no secret set, a 404; a body that is not a Stripe event, a 400;
- ``charge.refunded``, ``refund.updated`` and ``refund.failed`` are stored once per event
  id (``agent.ledger.provider_events``) and processed by a workflow; a redelivery answers
  200 and changes nothing;
- any other type is answered 200 and not stored (Stripe retries what is not a 2xx).
"""

from __future__ import annotations

import json

import stripe
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from agent.effects import config
from agent.ledger.provider_events import EVENTS, payment_event_received
from deskhand.domain.desk.models import Merchant


def _say(status: int, sentence: str) -> HttpResponse:
    return HttpResponse(f"{sentence}\n", status=status, content_type="text/plain; charset=utf-8")


@csrf_exempt
@require_POST
def stripe_webhook(request: HttpRequest, merchant: str) -> HttpResponse:
    found = Merchant.objects.filter(slug=merchant).first()
    secret = config.stripe_webhook_secret(found.slug) if found is not None else ""
    if found is None or not secret:
        return _say(404, "No Stripe endpoint is set up for this merchant here; nothing was stored.")
    try:
        # The SDK's check (what ``stripe.Webhook.construct_event`` does first): the
        # ``Stripe-Signature`` HMAC of "t.body" under this merchant's secret, and t's age.
        stripe.WebhookSignature.verify_header(
            request.body,
            request.headers.get("Stripe-Signature"),
            secret,
            tolerance=settings.DESKHAND_INBOUND_WEBHOOK_TOLERANCE_SECONDS,
        )
    except stripe.SignatureVerificationError:
        return _say(
            401,
            "The Stripe signature does not verify with this merchant's endpoint secret (or is "
            "too old); nothing was stored.",
        )
    except ValueError:  # a body that is not UTF-8
        return _say(400, "The body is not a Stripe event (JSON); nothing was stored.")
    # Parsed here rather than by construct_event, which raises AttributeError on signed JSON
    # that is not an object: a 400 with a sentence, never a 500.
    try:
        data = json.loads(request.body)
    except ValueError:
        data = None
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("id"), str)
        or not isinstance(data.get("data"), dict)
    ):
        return _say(400, "The body is not a Stripe event (no id or data); nothing was stored.")
    if data.get("type") not in EVENTS:
        return _say(200, f"Not stored: Deskhand reads only {', '.join(EVENTS)}.")
    _, created = payment_event_received(merchant=found, event=data)
    return _say(200, "Stored." if created else "Already stored.")
