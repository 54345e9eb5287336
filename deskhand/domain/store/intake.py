"""Shopify's webhooks, the durable way in: stored once, then processed by a workflow.

``webhook_received`` is what the web view calls once the delivery's HMAC verified with the
secret of the merchant its URL names and its ``X-Shopify-Shop-Domain`` matched that
merchant's store: the delivery is stored once per ``X-Shopify-Webhook-Id`` (a retry is the
same row) and handed to ``deskhand.shopify_webhook`` on the intake queue.

Processing (``order_webhook_process``, the workflow's step, under the row's lock, once):

* ``orders/updated``, ``orders/create``, ``orders/cancelled``, ``orders/paid``,
  ``orders/fulfilled`` — the body's order (its ``updated_at``) is applied to the mirror,
  which never moves backwards (``mirror.apply``): the same delivery five times, or an older
  one arriving last, leave the newest. Shopify's ``updated_at`` counts whole seconds, so a
  delivery with the stored version and other facts is a tie, settled by reading the order
  at Shopify now;
* ``refunds/create`` — the body is a refund, not the order: the order is read at Shopify
  as it is *now* and applied (Shopify's advice: read the current state rather than trust
  the order of arrival). An order Deskhand never mirrored is left alone.

``customers/redact`` is stored here too and processed by ``agent.privacy`` (an erasure is
the agent's business: its runs, steps and ledger are redacted with the customer's rows).
"""

from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from deskhand.domain.desk.orders import SourceUnavailable
from deskhand.domain.store import mirror
from deskhand.domain.store.models import (
    ShopifyConnection,
    ShopifyOrder,
    ShopifyWebhook,
    ShopifyWebhookStatus,
)
from deskhand.infra.dbos import client as dbos_client

log = logging.getLogger(__name__)

ORDER_TOPICS = (
    "orders/create",
    "orders/updated",
    "orders/cancelled",
    "orders/paid",
    "orders/fulfilled",
)
REFUND_TOPIC = "refunds/create"
REDACT_TOPIC = "customers/redact"
TOPICS = (*ORDER_TOPICS, REFUND_TOPIC, REDACT_TOPIC)

_ORDER_KEYS = (
    "id",
    "admin_graphql_api_id",
    "name",
    "email",
    "currency",
    "total_price",
    "financial_status",
    "created_at",
    "updated_at",
    "cancelled_at",
)


def kept(topic: str, body: dict[str, Any]) -> dict[str, Any]:
    """What processing needs of a body, nothing more. Raises ``ValueError`` for a body that
    is not what its topic says."""
    if topic in ORDER_TOPICS:
        data = {k: body.get(k) for k in _ORDER_KEYS}
        data["refunds"] = [
            {
                "transactions": [
                    {k: t.get(k) for k in ("kind", "status", "amount")}
                    for t in r.get("transactions") or []
                ]
            }
            for r in body.get("refunds") or []
        ]
        mirror.snapshot_from_webhook(data)  # refuses a body that is not an order
        return data
    if topic == REFUND_TOPIC:
        return {"order_id": int(body["order_id"]), "id": body.get("id")}
    if topic == REDACT_TOPIC:
        customer = body["customer"]
        return {
            "customer_email": str(customer.get("email") or ""),
            "customer_id": customer.get("id"),
            "orders_to_redact": list(body.get("orders_to_redact") or []),
        }
    raise ValueError(f"{topic} is not a topic Deskhand reads")


def webhook_received(
    *, connection: ShopifyConnection, webhook_id: str, topic: str, body: dict[str, Any]
) -> tuple[ShopifyWebhook, bool]:
    """Store a verified delivery once, then hand it to a worker. Returns (row, stored now).
    Raises ``ValueError`` (nothing stored) for a body that is not what its topic says."""
    data = kept(topic, body)
    row, created = ShopifyWebhook.objects.get_or_create(
        merchant_id=connection.merchant_id,
        webhook_id=webhook_id[:100],
        defaults={"topic": topic, "data": data},
    )
    if row.status == ShopifyWebhookStatus.RECEIVED:
        try:
            dbos_client.enqueue_shopify_webhook(row.pk)
        except Exception:
            log.exception("shopify webhook %s was stored; its enqueue was lost", row.pk)
    return row, created


def _finish(row: ShopifyWebhook, outcome: str) -> str:
    row.status, row.outcome, row.processed_at = (
        ShopifyWebhookStatus.PROCESSED,
        outcome,
        timezone.now(),
    )
    row.save(update_fields=["status", "outcome", "processed_at"])
    return outcome


def _order_now(merchant_id: int, order_id: int) -> str:
    gid = f"gid://shopify/Order/{order_id}"
    if not ShopifyOrder.objects.filter(merchant_id=merchant_id, gid=gid).exists():
        return f"order {gid} is not mirrored here; nothing to update"
    connection = ShopifyConnection.objects.get(merchant_id=merchant_id)
    with connection.client() as client:
        now = client.order(gid)
    if now is None:
        return f"Shopify has no order {gid} any more; the mirror is left as it was"
    order, what = mirror.apply(merchant_id, mirror.snapshot_of(now), read=True)
    return f"order {order.reference} read at Shopify: {what}"


def order_webhook_process(row_id: int) -> str:
    """Apply one stored ``orders/*`` or ``refunds/create`` delivery to the mirror, once.

    Raises ``ShopifyError`` when the order cannot be read at Shopify (the step retries)."""
    with transaction.atomic():
        row = ShopifyWebhook.objects.select_for_update().get(pk=row_id)
        if row.status == ShopifyWebhookStatus.PROCESSED:
            return row.outcome
        try:
            if row.topic in ORDER_TOPICS:
                order, what = mirror.apply(row.merchant_id, mirror.snapshot_from_webhook(row.data))
                outcome = f"order {order.reference} at version {order.version}: {what}"
            elif row.topic == REFUND_TOPIC:
                outcome = _order_now(row.merchant_id, int(row.data["order_id"]))
            else:
                raise ValueError(f"{row.topic} is not processed here")
        except SourceUnavailable as exc:
            outcome = f"not mirrored: {exc}"
        return _finish(row, outcome)


def finish(row: ShopifyWebhook, outcome: str) -> str:
    """Mark a row processed with what it concluded (for processors outside this module)."""
    return _finish(row, outcome)
