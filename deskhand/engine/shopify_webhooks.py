"""The durable way in for Shopify's webhooks: a stored delivery processed on a worker.

``deskhand.shopify_webhook`` (id ``shopify-webhook-<row pk>``): one step,
``shopify.webhook``, which applies an ``orders/*`` or ``refunds/create`` delivery to the
order mirror (``deskhand.domain.store.intake``) or erases the customer a
``customers/redact`` names (``agent.privacy.platform``). It waits on the intake queue,
enqueued by the web view once the row is committed. The step retries like intake's (a
database that blinked, Shopify not answering a read), and is idempotent: a processed row
answers what it concluded.
"""

from __future__ import annotations

from dbos import DBOS
from django.db import close_old_connections

from agent.privacy.platform import redact_webhook_process
from deskhand.domain.store.intake import REDACT_TOPIC, order_webhook_process
from deskhand.domain.store.models import ShopifyWebhook
from deskhand.infra.dbos.names import SHOPIFY_WEBHOOK_WORKFLOW
from deskhand.infra.fleet.lease import guard
from deskhand.infra.retry import INTAKE_STEP, dbos_step

WEBHOOK_STEP = "shopify.webhook"


@DBOS.step(name=WEBHOOK_STEP, **dbos_step(INTAKE_STEP))
def webhook_step(row_id: int) -> str:
    guard()
    close_old_connections()
    try:
        topic = ShopifyWebhook.objects.values_list("topic", flat=True).get(pk=row_id)
        if topic == REDACT_TOPIC:
            return redact_webhook_process(row_id)
        return order_webhook_process(row_id)
    finally:
        close_old_connections()


@DBOS.workflow(name=SHOPIFY_WEBHOOK_WORKFLOW, max_recovery_attempts=10_000)
def shopify_webhook_workflow(row_id: int) -> str:
    """Process stored Shopify webhook ``row_id``."""
    return webhook_step(row_id)
