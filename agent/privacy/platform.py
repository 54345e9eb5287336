"""A store platform's request to erase a customer: Shopify's ``customers/redact``.

Who acts: **the system**, recorded as such — the erasure's audit event has no actor (it
reads "the system"), channel ``system``, and names the request (``asked_by``: the topic and
Shopify's webhook id). The store's owner asked Shopify, and Shopify asks us; no person here
clicked anything, and the record says so.

What happens while one of the customer's runs is open: **the erasure waits for it.** A run
in flight holds the customer's words in its steps and may be about to act for them (a
refund a person approved); cancelling it from a webhook would drop that decision on the
floor. So the stored delivery stays ``received`` with an outcome that names the open run,
and it is tried again by the merchant's next reconciliation step (every five minutes) until
the run has ended — then erased exactly as ``manage.py erase_customer`` erases. The
delivery's row (``ShopifyWebhook.outcome``, in the admin) says which run it waits for.
"""

from __future__ import annotations

from django.db import transaction

from agent.models import OPEN_STATUSES, Run
from agent.privacy.erasure import Erasure, ErasureRefused, customer_erase
from approvals.models import Channel
from deskhand.domain.desk.models import Customer
from deskhand.domain.store.intake import REDACT_TOPIC, finish
from deskhand.domain.store.models import ShopifyWebhook, ShopifyWebhookStatus


def redact_webhook_process(row_id: int) -> str:
    """Erase the customer a stored ``customers/redact`` names, once, or say what it waits for."""
    with transaction.atomic():
        row = ShopifyWebhook.objects.select_for_update().get(pk=row_id)
        if row.status == ShopifyWebhookStatus.PROCESSED:
            return row.outcome
        email = str(row.data.get("customer_email") or "").strip()
        customer = Customer.objects.filter(
            merchant_id=row.merchant_id, email__iexact=email, erased_at__isnull=True
        ).first()
        if not email or customer is None:
            return finish(row, "no customer with that address here (or already erased)")
        runs = list(Run.objects.filter(ticket__customer=customer).order_by("created_at"))
        live = [r for r in runs if r.status in OPEN_STATUSES]
        if live:
            row.outcome = (
                f"waiting: run {live[0].pk} on {live[0].ticket.reference} is {live[0].status}; "
                "the customer is erased once it has ended"
            )
            row.save(update_fields=["outcome"])
            return row.outcome
        try:
            counts = customer_erase(
                Erasure(customer=customer, runs=runs),
                user=None,
                channel=Channel.SYSTEM,
                asked_by=f"shopify {REDACT_TOPIC} {row.webhook_id}",
            )
        except ErasureRefused as exc:  # a run's workflow still finishing: the next pass
            row.outcome = f"waiting: {exc}"
            row.save(update_fields=["outcome"])
            return row.outcome
        return finish(row, f"customer {customer.pk} erased by the system: {counts}")


def redactions_waiting(merchant_id: int) -> int:
    """Try every waiting ``customers/redact`` of the merchant again; how many it erased."""
    ids = ShopifyWebhook.objects.filter(
        merchant_id=merchant_id, topic=REDACT_TOPIC, status=ShopifyWebhookStatus.RECEIVED
    ).values_list("pk", flat=True)
    done = 0
    for row_id in list(ids):
        redact_webhook_process(row_id)
        done += ShopifyWebhook.objects.filter(
            pk=row_id, status=ShopifyWebhookStatus.PROCESSED
        ).count()
    return done
