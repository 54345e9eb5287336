"""A merchant's connection to its Shopify store, its credentials sealed at rest.

One per merchant. The custom app's Admin API access token and its client secret (which signs
the webhooks) are stored only sealed (``deskhand.infra.sealed``: Fernet keys from the
environment, rotated with ``manage.py rotate_secrets``). They are write-only: set through
``ShopifyConnection.connect`` or the setters, read back only by the code that calls Shopify or
checks a signature, shown to people as "set" (``token_shown``), and kept out of every repr,
form, admin page and log line.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from deskhand.domain.desk.models import Merchant
from deskhand.domain.store import shopify
from deskhand.infra import sealed

# A store's permanent address: <name>.myshopify.com (the admin's custom domains are not it).
SHOP_DOMAIN = re.compile(r"^[a-z0-9][a-z0-9-]{0,59}\.myshopify\.com$")
API_VERSION = re.compile(r"^\d{4}-(01|04|07|10)$")


def shop_domain_valid(value: str) -> None:
    if not SHOP_DOMAIN.match(value):
        raise ValidationError(
            f"{value[:80]!r} is not a store's address: it looks like your-store.myshopify.com."
        )


class ShopifyConnection(models.Model):
    merchant = models.OneToOneField(
        Merchant, on_delete=models.CASCADE, related_name="shopify_connection"
    )
    shop_domain = models.CharField(max_length=100, validators=[shop_domain_valid])
    access_token_sealed = models.TextField()
    webhook_secret_sealed = models.TextField(blank=True, default="")
    api_version = models.CharField(max_length=7, default=shopify.API_VERSION)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=~models.Q(access_token_sealed=""), name="shopify_token_is_set"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.shop_domain} (Shopify, {self.api_version})"

    def __repr__(self) -> str:
        return f"<ShopifyConnection {self.shop_domain} merchant={self.merchant_id}>"

    # --- the secrets: write-only ----------------------------------------------------------

    def set_access_token(self, token: str) -> None:
        token = token.strip()
        if not token:
            raise ValidationError("Paste the store's Admin API access token.")
        self.access_token_sealed = sealed.seal(token)

    def set_webhook_secret(self, secret: str) -> None:
        self.webhook_secret_sealed = sealed.seal(secret.strip()) if secret.strip() else ""

    @property
    def token_shown(self) -> str:
        """What a page shows for the token: never any part of it."""
        return "set" if self.access_token_sealed else "not set"

    @property
    def webhook_secret_shown(self) -> str:
        return "set" if self.webhook_secret_sealed else "not set"

    def webhook_secret(self) -> str:
        """The client secret, opened to check a webhook's signature ("" if none is set)."""
        return sealed.unseal(self.webhook_secret_sealed) if self.webhook_secret_sealed else ""

    def reseal(self) -> None:
        """Seal both secrets again under the first key (not saved: the caller saves)."""
        self.access_token_sealed = sealed.reseal(self.access_token_sealed)
        if self.webhook_secret_sealed:
            self.webhook_secret_sealed = sealed.reseal(self.webhook_secret_sealed)

    # --- using it --------------------------------------------------------------------------

    def client(self, **options: object) -> shopify.ShopifyClient:
        """A client for this store at its pinned version (the token opened only here)."""
        return shopify.ShopifyClient(
            self.shop_domain,
            sealed.unseal(self.access_token_sealed),
            api_version=self.api_version,
            base_url=settings.DESKHAND_SHOPIFY_BASE_URL,
            **options,  # type: ignore[arg-type]
        )

    @classmethod
    def connect(
        cls, *, merchant: Merchant, shop_domain: str, access_token: str, webhook_secret: str = ""
    ) -> ShopifyConnection:
        """Create or replace the merchant's connection (validated, secrets sealed)."""
        domain = shop_domain.strip().lower()
        shop_domain_valid(domain)
        connection = cls.objects.filter(merchant=merchant).first() or cls(merchant=merchant)
        connection.shop_domain = domain
        connection.set_access_token(access_token)
        connection.set_webhook_secret(webhook_secret)
        connection.save()
        return connection


class ShopifyOrder(models.Model):
    """What Deskhand last learned of one Shopify order, beside the ``Order`` row it mirrors.

    A Shopify order is read at Shopify, but a refund made here needs a row to point at (the
    ``Refund``, its ledger entry, every ceiling and reconciliation count against ``Order``
    rows), so the order is mirrored into ``Order`` with ``source="shopify"`` and this row
    holds what only Shopify has: the order's id (``gid``), its sale (what a refund is made
    against), what Shopify counts as refunded (refunds made anywhere, Deskhand's and
    others'), and ``updated_at`` — the version. A read (``deskhand.domain.store.mirror``) or a
    webhook moves the mirror only forwards: an older ``updated_at`` never overwrites a newer.
    """

    order = models.OneToOneField(
        "desk.Order", on_delete=models.CASCADE, related_name="shopify_order"
    )
    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="+")
    gid = models.CharField(max_length=100)
    updated_at = models.DateTimeField()
    refunded_cents = models.BigIntegerField(default=0)
    sale_gid = models.CharField(max_length=100, blank=True, default="")
    sale_gateway = models.CharField(max_length=60, blank=True, default="")
    financial_status = models.CharField(max_length=40, blank=True, default="")
    seen_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["merchant", "gid"], name="shopify_order_per_merchant"),
        ]

    def __str__(self) -> str:
        return f"{self.gid} ({self.updated_at.isoformat()})"


class ShopifyWebhookStatus(models.TextChoices):
    RECEIVED = "received"  # stored; its workflow processes it
    PROCESSED = "processed"


class ShopifyWebhook(models.Model):
    """A Shopify webhook delivery, verified and stored once before it is processed.

    ``webhook_id`` is Shopify's ``X-Shopify-Webhook-Id`` (one per delivery; a retry of a
    delivery repeats it), unique per merchant: a redelivery is the same row and is processed
    once. ``data`` is what processing needs of the body and nothing more (an order's money,
    name, email and times; a redaction's customer), never the addresses or line items.
    """

    merchant = models.ForeignKey(Merchant, on_delete=models.CASCADE, related_name="+")
    webhook_id = models.CharField(max_length=100)
    topic = models.CharField(max_length=40)
    data = models.JSONField(default=dict)
    status = models.CharField(
        max_length=10, choices=ShopifyWebhookStatus.choices, default=ShopifyWebhookStatus.RECEIVED
    )
    outcome = models.TextField(blank=True)
    received_at = models.DateTimeField(auto_now_add=True)
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["merchant", "webhook_id"], name="shopify_webhook_once")
        ]

    def __str__(self) -> str:
        return f"{self.topic} {self.webhook_id}"
