"""Connecting a merchant's Shopify store: the credentials sealed, the webhooks subscribed.

``store_connect`` is what the owner's settings page calls. The store is asked first, with
the credentials as typed: its webhook subscriptions are listed and the ones Deskhand needs
(``WEBHOOK_TOPICS``, to ``/inbound/shopify/<slug>/`` under ``DESKHAND_CONSOLE_URL``) are
created with ``webhookSubscriptionCreate`` where missing. Only when Shopify accepted the
token is the connection saved — a token Shopify refuses leaves nothing behind, and the
sentence says why. The privacy webhooks (``customers/redact``) are not subscribed: Shopify
takes their address from the app's configuration, which the merchant sets to the same URL.

``subscriptions_missing`` is what ``health`` asks: the topics whose subscription to this
Deskhand is gone (Shopify deletes one after repeated failed deliveries).
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.urls import reverse

from deskhand.domain.desk.models import Merchant
from deskhand.domain.store import shopify
from deskhand.domain.store.models import ShopifyConnection, shop_domain_valid
from deskhand.infra import sealed

WEBHOOK_TOPICS = ("orders/updated", "orders/cancelled", "refunds/create")


class ConnectRefused(Exception):
    """The store could not be connected; the message is a sentence for the owner."""


def webhook_address(slug: str) -> str:
    path = reverse("mail:shopify", kwargs={"merchant": slug})
    return settings.DESKHAND_CONSOLE_URL.rstrip("/") + path


def _enum(topic: str) -> str:
    return topic.upper().replace("/", "_")


def _missing(client: shopify.ShopifyClient, address: str) -> list[str]:
    have = {(s.topic, s.uri) for s in client.webhook_subscriptions()}
    return [t for t in WEBHOOK_TOPICS if (_enum(t), address) not in have]


def store_connect(
    *, merchant: Merchant, shop_domain: str, access_token: str, webhook_secret: str
) -> tuple[ShopifyConnection, list[str]]:
    """Connect (or reconnect) the store; returns the connection and the topics subscribed now.

    Raises ``ConnectRefused`` with a sentence (nothing saved) when the address is not a
    store's, a secret is missing, or Shopify refuses the token or a subscription."""
    domain = shop_domain.strip().lower()
    try:
        shop_domain_valid(domain)
    except Exception as exc:
        raise ConnectRefused(" ".join(getattr(exc, "messages", [str(exc)]))) from None
    if not access_token.strip() or not webhook_secret.strip():
        raise ConnectRefused(
            "Paste both the Admin API access token and the app's client secret (it signs the "
            "webhooks)."
        )
    trial = ShopifyConnection(merchant=merchant, shop_domain=domain)
    trial.access_token_sealed = sealed.seal(access_token.strip())
    address = webhook_address(merchant.slug)
    created: list[str] = []
    try:
        with trial.client() as client:
            for topic in _missing(client, address):
                client.webhook_subscribe(topic, address)
                created.append(topic)
    except shopify.ShopifyError as exc:
        raise ConnectRefused(f"Shopify did not accept the connection: {exc}") from None
    with transaction.atomic():
        connection = ShopifyConnection.connect(
            merchant=merchant,
            shop_domain=domain,
            access_token=access_token,
            webhook_secret=webhook_secret,
        )
    return connection, created


def subscriptions_missing(connection: ShopifyConnection) -> list[str]:
    """The topics whose subscription to this Deskhand is gone. Raises ``ShopifyError``."""
    with connection.client() as client:
        return _missing(client, webhook_address(connection.merchant.slug))
