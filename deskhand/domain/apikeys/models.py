"""API keys, the answers kept for retried writes, and the help desks that post to us."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models


class Scope(models.TextChoices):
    READ = "read"
    WRITE = "write"  # tickets, messages, runs (start, cancel, steer)
    DECIDE = "decide"  # approvals, always for a named member who may approve
    ORDERS = "orders"  # the store's own system pushing its orders (PUT /api/v1/orders/…)


class ApiKey(models.Model):
    """One merchant's key: found by ``prefix`` (kept in clear, shown in lists), proven by
    ``digest`` (sha256 of the whole token; the token itself is shown once and never stored).

    ``window_start``/``window_count`` are the key's rate window, counted in Postgres so
    every web process shares it (the same choice as the sign-in throttle's failures).
    """

    merchant = models.ForeignKey("desk.Merchant", on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=80)
    prefix = models.CharField(max_length=16, unique=True)
    digest = models.CharField(max_length=64, unique=True)
    scopes = ArrayField(models.CharField(max_length=8, choices=Scope.choices))
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by_name = models.CharField(max_length=254, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by_name = models.CharField(max_length=254, blank=True, default="")
    last_used_at = models.DateTimeField(null=True, blank=True)
    window_start = models.DateTimeField(null=True, blank=True)
    window_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["merchant", "-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…, {'revoked' if self.revoked_at else 'active'})"

    @property
    def label(self) -> str:
        """How the audit trail names the key: its name and its public prefix."""
        return f"{self.name} ({self.prefix})"

    def allows(self, scope: str) -> bool:
        return scope in self.scopes


class StoredResponse(models.Model):
    """The first answer to a write sent with an ``Idempotency-Key``, for its retries.

    ``status_code`` is null while the first request is still being answered. Kept until
    ``expires_at`` (24 hours); ``customer_id`` is the customer the answer is about, so
    erasing them removes it (``deskhand.domain.apikeys.erasure``).
    """

    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="responses")
    idempotency_key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)  # sha256 of method, path and body
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    body = models.JSONField(null=True, blank=True)
    customer_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["api_key", "idempotency_key"], name="one_response_per_idempotency_key"
            )
        ]

    def __str__(self) -> str:
        return f"{self.idempotency_key} -> {self.status_code or 'in progress'}"


class HelpdeskSource(models.Model):
    """A help desk (or chat bot) that posts tickets and customer messages to us, signed with
    Standard Webhooks under ``secret`` (``whsec_…``), and receives the agent's replies."""

    merchant = models.ForeignKey(
        "desk.Merchant", on_delete=models.CASCADE, related_name="helpdesk_sources"
    )
    slug = models.SlugField(max_length=40)
    secret = models.CharField(max_length=200)
    reply_url = models.URLField(max_length=500, blank=True)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["merchant", "slug"], name="one_source_slug_per_merchant"
            )
        ]

    def __str__(self) -> str:
        return f"{self.slug} ({'active' if self.active else 'off'})"


class HelpdeskDelivery(models.Model):
    """One ``webhook-id`` a source sent, once: a redelivery answers what the first did."""

    source = models.ForeignKey(HelpdeskSource, on_delete=models.CASCADE, related_name="deliveries")
    webhook_id = models.CharField(max_length=255)
    received_at = models.DateTimeField(auto_now_add=True)
    ticket = models.ForeignKey(
        "desk.Ticket", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    result: Any = models.JSONField(default=dict, blank=True)

    class Meta:
        verbose_name = "help-desk delivery"
        verbose_name_plural = "help-desk deliveries"
        constraints = [
            models.UniqueConstraint(
                fields=["source", "webhook_id"], name="one_delivery_per_webhook_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.webhook_id} from source {self.source_id}"


class ExternalTicket(models.Model):
    """A help desk's own id for one of our tickets: unique per merchant and source."""

    source = models.ForeignKey(HelpdeskSource, on_delete=models.CASCADE, related_name="tickets")
    external_id = models.CharField(max_length=120)
    ticket = models.OneToOneField("desk.Ticket", on_delete=models.CASCADE, related_name="external")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["source", "external_id"], name="one_ticket_per_external_id"
            )
        ]

    def __str__(self) -> str:
        return f"{self.external_id} -> ticket {self.ticket_id}"


class HelpdeskReply(models.Model):
    """An agent's reply on a ticket that came from a help desk, relayed to the desk's
    ``reply_url``: one row per thread line (claimed once), sent at least once under the
    stable ``webhook_id`` the desk deduplicates on, retried with backoff (``relay.py``)."""

    source = models.ForeignKey(HelpdeskSource, on_delete=models.CASCADE, related_name="replies")
    message = models.OneToOneField(
        "desk.TicketMessage", on_delete=models.CASCADE, related_name="helpdesk_reply"
    )
    webhook_id = models.CharField(max_length=80, unique=True)
    payload: Any = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)
    next_attempt_at = models.DateTimeField()
    attempts = models.PositiveIntegerField(default=0)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        verbose_name = "help-desk reply"
        verbose_name_plural = "help-desk replies"
        indexes = [
            models.Index(
                fields=["next_attempt_at"],
                condition=models.Q(sent_at__isnull=True),
                name="helpdesk_reply_due",
            )
        ]

    def __str__(self) -> str:
        return f"{self.webhook_id} ({'sent' if self.sent_at else 'pending'})"
