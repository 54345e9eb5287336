"""Shopify's webhooks, one endpoint per merchant: ``/inbound/shopify/<merchant slug>/``.

The merchant the URL names has its store's connection (``ShopifyConnection``) and so its
app's client secret: a delivery is verified with that secret alone
(``shopify_webhook_verified``: base64 HMAC-SHA256 of the raw body in
``X-Shopify-Hmac-Sha256``), and its ``X-Shopify-Shop-Domain`` must be that merchant's
store, so one merchant's secret can never speak for another's orders. Then:

- a bad or missing signature, or another shop's domain, is a 401 and nothing is stored; an
  unknown merchant, or one with no store or no secret, a 404; no ``X-Shopify-Webhook-Id``,
  or a body that is not what its topic says, a 400;
- the topics Deskhand reads (``deskhand.domain.store.intake.TOPICS``) are stored once per
  webhook id and processed by a workflow; a redelivery answers 200 and changes nothing;
- any other topic is answered 200 and not stored (Shopify retries what is not a 2xx).
"""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from deskhand.domain.store.intake import TOPICS, webhook_received
from deskhand.domain.store.models import ShopifyConnection
from deskhand.domain.store.webhooks import shopify_webhook_verified


def _say(status: int, sentence: str) -> HttpResponse:
    return HttpResponse(f"{sentence}\n", status=status, content_type="text/plain; charset=utf-8")


@csrf_exempt
@require_POST
def shopify_webhook(request: HttpRequest, merchant: str) -> HttpResponse:
    connection = (
        ShopifyConnection.objects.filter(merchant__slug=merchant).select_related("merchant").first()
    )
    secret = connection.webhook_secret() if connection is not None else ""
    if connection is None or not secret:
        return _say(
            404, "No Shopify store is connected for this merchant here; nothing was stored."
        )
    if not shopify_webhook_verified(
        secret, request.body, request.headers.get("X-Shopify-Hmac-Sha256")
    ):
        return _say(
            401,
            "The Shopify signature does not verify with this merchant's app secret; nothing was "
            "stored.",
        )
    domain = (request.headers.get("X-Shopify-Shop-Domain") or "").strip().lower()
    if domain != connection.shop_domain:
        return _say(
            401,
            f"The delivery names the shop {domain[:100]!r}, not this merchant's store; nothing "
            "was stored.",
        )
    webhook_id = (request.headers.get("X-Shopify-Webhook-Id") or "").strip()
    topic = (request.headers.get("X-Shopify-Topic") or "").strip()
    if not webhook_id:
        return _say(400, "The delivery has no X-Shopify-Webhook-Id; nothing was stored.")
    if topic not in TOPICS:
        return _say(200, f"Not stored: Deskhand reads only {', '.join(TOPICS)}.")
    try:
        body = json.loads(request.body)
        if not isinstance(body, dict):
            raise ValueError("not an object")
        _, created = webhook_received(
            connection=connection, webhook_id=webhook_id, topic=topic, body=body
        )
    except (ValueError, KeyError, TypeError) as exc:
        return _say(400, f"The body is not a {topic} webhook ({exc}); nothing was stored.")
    return _say(200, "Stored." if created else "Already stored.")
