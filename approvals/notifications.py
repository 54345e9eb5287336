"""Telling people they are needed: the outbox rows written with the event that needs them.

An approval requested, escalated, or about to expire writes one ``Notification``
row per recipient *in the same transaction as the event* (the gate's request,
the escalation sweep's update, the expiry warning's sweep): if the event
commits, so do its notifications, and if it rolls back nobody is told of
something that did not happen. ``approvals.outbox`` sends them later.

Who: a request and an expiry warning go to the merchant's approvers (owners
and agents); an escalation to its owners. Each gets one email; a merchant with
an active webhook gets one signed webhook delivery per event as well.

What: no customer content beyond the ticket reference — the kind of action,
the ticket, when it expires and a link to the inbox. The preview (which quotes
the model and may quote the customer) stays in the console.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
import secrets
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import URLValidator
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from approvals.audit import audit_record
from approvals.models import Approval, ApprovalStatus
from approvals.notification_models import (
    Notification,
    NotificationEvent,
    Transport,
    WebhookEndpoint,
)
from deskhand.domain.desk.models import (
    Membership,
    Merchant,
    OrderSourceKind,
    Refund,
    RefundStatus,
    Role,
)
from deskhand.domain.desk.permissions import require_owner

log = logging.getLogger(__name__)

__all__ = [
    "NotificationEvent",
    "notify_approval",
    "notify_expiring_due",
    "notify_refunds_due",
    "notify_run_finished",
]

ACTIONS = {
    "issue_refund": "a refund",
    "send_customer_email": "an email to the customer",
    "reply_to_customer": "a reply to the customer",
    "ask_customer": "a question to the customer",
    "cancel_order": "an order cancellation",
}


def console_url(path: str) -> str:
    """An absolute link for mail and webhooks, on the configured console address.

    Never the request's Host header: a link in a password reset built from it could point
    at whatever host a forged request named.
    """
    return settings.DESKHAND_CONSOLE_URL.rstrip("/") + path


def approval_link(approval: Approval) -> str:
    """Where a person decides it: the console's inbox, at this approval's card."""
    return console_url(f"{reverse('console:approvals')}#approval-{approval.id}")


def active_webhook(merchant_id: int) -> WebhookEndpoint | None:
    """The merchant's webhook, if one is active."""
    return (
        WebhookEndpoint.objects.filter(merchant_id=merchant_id, active=True).order_by("id").first()
    )


def recipients(approval: Approval, event: str) -> list[str]:
    """The people to tell: owners for an escalation, owners and agents otherwise."""
    roles = [Role.OWNER] if event == NotificationEvent.ESCALATED else [Role.OWNER, Role.AGENT]
    emails = (
        Membership.objects.filter(
            merchant_id=approval.merchant_id, role__in=roles, user__is_active=True
        )
        .exclude(user__email="")
        .order_by("user__email")
        .values_list("user__email", flat=True)
    )
    return list(dict.fromkeys(emails))


def _when(value: dt.datetime, zone: str) -> str:
    from zoneinfo import ZoneInfo

    return value.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")


def _message(approval: Approval, event: str) -> tuple[str, str]:
    ticket = approval.run.ticket.reference
    merchant = approval.merchant
    action = ACTIONS.get(approval.tool, approval.tool)
    heads = {
        NotificationEvent.REQUESTED: f"Approval needed: {action} on {ticket}",
        NotificationEvent.ESCALATED: f"Escalated: {action} on {ticket} is still waiting",
        NotificationEvent.EXPIRING: f"Expiring soon: {action} on {ticket}",
    }
    subject = f"[{merchant.name}] {heads[NotificationEvent(event)]}"
    body = "\n".join(
        [
            f"The agent working on ticket {ticket} at {merchant.name} asks a person to approve "
            f"{action} ({approval.tool}).",
            "",
            f"Requested: {_when(approval.requested_at, merchant.timezone)}",
            f"Expires:   {_when(approval.expires_at, merchant.timezone)}",
            *(
                ["Escalated: it has waited past the merchant's time to answer."]
                if event == NotificationEvent.ESCALATED
                else []
            ),
            "",
            f"Decide it here: {approval_link(approval)}",
            "",
            "The details are in the console; this message carries none of the customer's words.",
        ]
    )
    return subject, body


def _payload(approval: Approval, event: str) -> dict[str, object]:
    return {
        "event": str(event),
        "merchant": approval.merchant.slug,
        "approval": {
            "id": str(approval.id),
            "tool": approval.tool,
            "ticket": approval.run.ticket.reference,
            "status": approval.status,
            "requested_at": approval.requested_at.isoformat(),
            "expires_at": approval.expires_at.isoformat(),
            "escalated_at": approval.escalated_at.isoformat() if approval.escalated_at else None,
            "url": approval_link(approval),
        },
    }


def notify_approval(approval: Approval, event: str) -> list[Notification]:
    """Write this event's notifications for ``approval`` (call inside the event's transaction).

    Idempotent per (approval, event, transport, recipient): a step re-executed after
    a crash, or two sweeps, write each row once.
    """
    now = timezone.now()
    subject, body = _message(approval, event)
    rows = [
        Notification(
            merchant_id=approval.merchant_id,
            approval=approval,
            event=event,
            transport=Transport.EMAIL,
            recipient=email,
            subject=subject[:200],
            body=body,
            next_attempt_at=now,
        )
        for email in recipients(approval, event)
    ]
    hook = active_webhook(approval.merchant_id)
    if hook is not None:
        rows.append(
            Notification(
                merchant_id=approval.merchant_id,
                approval=approval,
                event=event,
                transport=Transport.WEBHOOK,
                recipient=hook.url,
                payload=_payload(approval, event),
                next_attempt_at=now,
            )
        )
    made = Notification.objects.bulk_create(rows, ignore_conflicts=True)
    return list(made)


def notify_run_finished(run: Any) -> list[Notification]:
    """Write ``run.finished`` for the merchant's webhook, if it has one (inside the run's
    closing transaction: every terminal path goes through ``agent.run.services.run_close``).

    Idempotent per run and recipient. The payload names the run, its ticket and how it
    ended; never the summary or anything else a customer wrote.
    """
    hook = active_webhook(run.merchant_id)
    if hook is None:
        return []
    payload = {
        "event": NotificationEvent.RUN_FINISHED.value,
        "merchant": run.merchant.slug,
        "run": {
            "id": str(run.pk),
            "ticket": run.ticket.reference,
            "status": run.status,
            "stop_reason": run.stop_reason or None,
            "steps": run.steps,
            "cost_micros": run.cost_micros,
            "finished_at": run.finished_at.isoformat() if run.finished_at else None,
            "url": console_url(reverse("console:run", kwargs={"run_id": run.pk})),
        },
    }
    row = Notification(
        merchant_id=run.merchant_id,
        run_id=run.pk,
        event=NotificationEvent.RUN_FINISHED,
        transport=Transport.WEBHOOK,
        recipient=hook.url,
        payload=payload,
        next_attempt_at=timezone.now(),
    )
    return list(Notification.objects.bulk_create([row], ignore_conflicts=True))


def refund_created_payload(refund: Refund, merchant_slug: str) -> dict[str, object]:
    """No reason: the agent's words go when a customer is erased, and a delivery outlives that."""
    order = refund.order
    return {
        "event": NotificationEvent.REFUND_CREATED.value,
        "merchant": merchant_slug,
        "refund": {
            "id": refund.pk,
            "order": order.reference,
            "order_version": order.version,
            "amount_cents": refund.amount_cents,
            "currency": refund.currency,
            "provider_refund_id": refund.provider_refund_id or None,
            "created_at": refund.created_at.isoformat(),
        },
    }


def notify_refunds_due(*, limit: int = 200) -> int:
    """Write ``refund.created`` for every refund that moved (``succeeded``) on an order the
    store pushed and has not been announced to the merchant's active webhook yet.

    Called by the worker's sweep before the outbox is sent, not from inside the refund's
    transaction: a refund is made by two adapters (in this database at once, at a payment
    provider when it confirms), and the sweep sees both the same way, once each — the row
    is unique per refund and recipient. At least once, as every notification: the store
    deduplicates on ``delivery_id``. A refund still in flight is announced once it has moved;
    one a provider declined was never money and is never announced.
    """
    rows: list[Notification] = []
    hooks = {
        h.merchant_id: h
        for h in WebhookEndpoint.objects.filter(active=True).select_related("merchant")
    }
    if not hooks:
        return 0
    due = (
        Refund.objects.filter(
            merchant_id__in=list(hooks),
            status=RefundStatus.SUCCEEDED,
            order__source=OrderSourceKind.PUSHED,
        )
        .exclude(notifications__event=NotificationEvent.REFUND_CREATED)
        .select_related("order")
        .order_by("created_at", "id")[:limit]
    )
    now = timezone.now()
    for refund in due:
        hook = hooks[refund.merchant_id]
        rows.append(
            Notification(
                merchant_id=refund.merchant_id,
                refund=refund,
                event=NotificationEvent.REFUND_CREATED,
                transport=Transport.WEBHOOK,
                recipient=hook.url,
                payload=refund_created_payload(refund, hook.merchant.slug),
                next_attempt_at=now,
            )
        )
    return len(Notification.objects.bulk_create(rows, ignore_conflicts=True))


def webhook_set(
    *, merchant: Merchant, user: Any, url: str | None, channel: str
) -> tuple[WebhookEndpoint, str]:
    """Point the merchant's webhook at ``url`` with a fresh secret (owners only), or switch it
    off (``url`` None). Audited as ``webhook.change``. Returns the endpoint and the new secret,
    which is shown once and never stored anywhere else."""
    require_owner(user, merchant.pk, "change the notification webhook")
    secret = ""
    with transaction.atomic():
        hook = WebhookEndpoint.objects.select_for_update().filter(merchant=merchant).first()
        if url is None:
            if hook is None:
                raise WebhookRefused(f"{merchant.name} has no webhook to switch off.")
            hook.active = False
            hook.save(update_fields=["active"])
        else:
            validator = URLValidator(schemes=["http", "https"])
            try:
                validator(url)
            except ValidationError:
                raise WebhookRefused(f"{url[:200]!r} is not an http(s) URL.") from None
            # A Standard Webhooks secret: whsec_ and the base64 of 32 random bytes.
            secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
            hook, _ = WebhookEndpoint.objects.update_or_create(
                merchant=merchant, defaults={"url": url, "secret": secret, "active": True}
            )
        audit_record(
            merchant_id=merchant.pk,
            actor=user,
            action="webhook.change",
            channel=channel,
            detail={"url": hook.url, "active": hook.active, "new_secret": bool(secret)},
        )
    return hook, secret


class WebhookRefused(Exception):
    """The webhook cannot be set as asked; the message is one sentence."""


def notify_expiring_due(*, now: dt.datetime, limit: int = 500) -> int:
    """Warn about pending approvals that expire within ``DESKHAND_APPROVAL_EXPIRY_WARNING_SECONDS``.

    Run by the worker's sweep. Each approval is warned once (the unique row); the
    approval's row lock makes a decision that lands meanwhile win: a decided approval
    is not warned about.
    """
    window = dt.timedelta(seconds=settings.DESKHAND_APPROVAL_EXPIRY_WARNING_SECONDS)
    due = list(
        Approval.objects.filter(
            status=ApprovalStatus.PENDING, expires_at__gt=now, expires_at__lte=now + window
        )
        .exclude(notifications__event=NotificationEvent.EXPIRING)
        .values_list("pk", flat=True)[:limit]
    )
    warned = 0
    for pk in due:
        try:
            with transaction.atomic():
                approval = (
                    Approval.objects.select_for_update(of=("self",))
                    .select_related("merchant", "run__ticket")
                    .get(pk=pk)
                )
                if approval.status != ApprovalStatus.PENDING:
                    continue
                warned += bool(notify_approval(approval, NotificationEvent.EXPIRING))
        except IntegrityError:  # pragma: no cover - a concurrent sweep wrote it first
            log.info("expiry warning for approval %s already written", pk)
    return warned
