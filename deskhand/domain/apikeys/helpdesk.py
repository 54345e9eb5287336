"""A help desk's signed channel in: tickets and customer messages, once each.

Verified with Standard Webhooks (``standardwebhooks``: ``webhook-id``,
``webhook-timestamp`` within five minutes of our clock, ``webhook-signature`` an HMAC of
``"{id}.{timestamp}.{body}"`` under the source's ``whsec_`` secret). Once each twice over:
by ``webhook-id`` (a redelivery answers what the first delivery did) and by the desk's own
ticket id (``external_id``, unique per merchant and source). Both are checked under the
merchant's row lock, the lock inbound mail takes, so five copies at once make one ticket.
Customer lines go through ``thread_customer_message_add``, the function mail uses.
"""

from __future__ import annotations

import base64
import dataclasses
import secrets
from typing import Any

from django.db import transaction
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from deskhand.domain.apikeys.models import ExternalTicket, HelpdeskDelivery, HelpdeskSource
from deskhand.domain.desk.models import Merchant, MessageChannel
from deskhand.domain.desk.permissions import require_owner
from deskhand.domain.desk.thread import (
    customer_for_address,
    thread_customer_message_add,
    ticket_open,
)

EVENTS = ("ticket.created", "message.created")


class HelpdeskRefused(Exception):
    """The delivery is not one we take; ``status`` and ``field`` say how to answer it."""

    def __init__(self, status: int, message: str, field: str = "") -> None:
        super().__init__(message)
        self.status, self.field = status, field


@dataclasses.dataclass(frozen=True)
class Delivered:
    result: dict[str, Any]
    duplicate: bool


def source_create(
    *, merchant: Merchant, user: Any, slug: str, reply_url: str = ""
) -> tuple[HelpdeskSource, str]:
    """A new help-desk source (owners only), or a fresh secret for one; the secret, shown once."""
    require_owner(user, merchant, "connect a help desk")
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    source, _ = HelpdeskSource.objects.update_or_create(
        merchant=merchant,
        slug=slug,
        defaults={"secret": secret, "reply_url": reply_url, "active": True},
    )
    return source, secret


def verify(source: HelpdeskSource, body: bytes, headers: dict[str, str]) -> Any:
    try:
        return Webhook(source.secret).verify(body, headers)
    except WebhookVerificationError as exc:
        raise HelpdeskRefused(
            401, f"The webhook signature does not verify ({exc}); nothing was stored."
        ) from None
    except ValueError:  # verified, but the body is not JSON
        raise HelpdeskRefused(400, "The body must be a JSON object.", "body") from None


def _text(data: dict[str, Any], field: str, limit: int, required: bool = True) -> str:
    value = data.get(field, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise HelpdeskRefused(422, f"{field} must be a non-empty string.", field)
    if len(value) > limit or "\x00" in value:
        raise HelpdeskRefused(422, f"{field} is at most {limit} characters, with no NUL.", field)
    return value


def deliver(*, source: HelpdeskSource, webhook_id: str, data: Any) -> Delivered:
    """Store what one verified delivery says, once (see the module)."""
    if not isinstance(data, dict):
        raise HelpdeskRefused(400, "The body must be a JSON object.", "body")
    event = data.get("type")
    if event not in EVENTS:
        raise HelpdeskRefused(422, f"type must be one of {', '.join(EVENTS)}.", "type")
    external_id = _text(data, "external_id", 120)
    body = _text(data, "body", 20000)
    with transaction.atomic():
        merchant = Merchant.locked(source.merchant_id)
        seen = HelpdeskDelivery.objects.filter(source=source, webhook_id=webhook_id).first()
        if seen is not None:
            return Delivered(seen.result, duplicate=True)
        known = (
            ExternalTicket.objects.filter(source=source, external_id=external_id)
            .select_related("ticket", "ticket__customer")
            .first()
        )
        if event == "ticket.created" and known is None:
            customer_data = data.get("customer")
            if not isinstance(customer_data, dict):
                raise HelpdeskRefused(422, "customer must be an object with an email.", "customer")
            email = _text(customer_data, "email", 254)
            if "@" not in email:
                raise HelpdeskRefused(422, "customer.email must be an address.", "customer.email")
            name = _text(customer_data, "name", 200, required=False)
            subject = _text(data, "subject", 300, required=False)
            customer = customer_for_address(merchant=merchant, address=email, name=name)
            ticket = ticket_open(merchant=merchant, customer=customer, subject=subject)
            ExternalTicket.objects.create(source=source, external_id=external_id, ticket=ticket)
        elif known is None:
            raise HelpdeskRefused(
                404, f"No ticket came from {source.slug} as {external_id[:60]!r}.", "external_id"
            )
        else:
            ticket = known.ticket
        message = thread_customer_message_add(
            ticket=ticket,
            channel=MessageChannel.HELPDESK,
            body=body,
            subject=ticket.subject if event == "ticket.created" else "",
            from_address=ticket.customer.email,
            # The desk's delivery id: the thread keeps one line per message id.
            message_id=f"<{webhook_id[:200]}@{source.slug}.helpdesk>",
        )
        result = {
            "ticket": ticket.reference,
            "external_id": external_id,
            "message": message.pk,
            "event": event,
        }
        HelpdeskDelivery.objects.create(
            source=source, webhook_id=webhook_id, ticket=ticket, result=result
        )
    return Delivered(result, duplicate=False)
