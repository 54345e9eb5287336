"""What reconciliation found between the ledger and the system an effect lives in.

Registered with the ``agent`` app (``agent.models`` imports it).
"""

from __future__ import annotations

from django.db import models


class FindingKind(models.TextChoices):
    PROVIDER_ONLY = "provider_only", "refund at the provider with no ledger entry"
    LEDGER_ONLY = "ledger_only", "ledger entry the provider does not know"
    AMOUNT_DIFFERS = "amount_differs", "amounts differ"
    UNRESOLVED = "unresolved", "claim whose outcome could not be confirmed"
    PROVIDER_FAILED = "provider_failed", "refund the provider says failed after it was recorded"


class EffectFinding(models.Model):
    """A disagreement between the ledger and the system an effect lives in, found by reconciliation.

    Reconciliation (``agent.ledger.provider_reconciliation``) only ever reports: it never refunds, voids
    or edits a ledger entry to make one go away. ``fingerprint`` makes a finding seen again
    on the next pass the same row (``last_seen_at`` moves on); a person settles it
    (``resolved_*``), and only a person.
    """

    merchant = models.ForeignKey(
        "desk.Merchant", on_delete=models.PROTECT, related_name="effect_findings"
    )
    kind = models.CharField(max_length=16, choices=FindingKind.choices)
    fingerprint = models.CharField(max_length=300, unique=True)
    ledger_entry = models.ForeignKey(
        "agent.LedgerEntry",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="findings",
    )
    provider_ref = models.CharField(max_length=250, blank=True)
    ledger_amount_cents = models.BigIntegerField(null=True, blank=True)
    provider_amount_cents = models.BigIntegerField(null=True, blank=True)
    detail = models.TextField()
    found_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    # A person's settlement (``manage.py effects_findings --resolve``): who, when, what they did.
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=254, blank=True)
    resolution = models.TextField(blank=True)

    class Meta:
        indexes = [models.Index(fields=["merchant", "-found_at"], name="finding_merchant_recent")]

    def __str__(self) -> str:
        return f"{self.kind}: {self.provider_ref or self.ledger_entry_id}"

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None


class PaymentEventStatus(models.TextChoices):
    RECEIVED = "received"  # stored; its workflow (or the reconciliation pass) processes it
    PROCESSED = "processed"


class PaymentEvent(models.Model):
    """A payment provider's webhook event, verified and stored once before it is processed.

    Stripe signs each delivery with the secret of the merchant's endpoint
    (``deskhand.web.inbound.stripe``); the event's id is unique per merchant, so a
    redelivery is the same row. ``data`` is what processing needs of the event's object
    (ids, status, amount, currency, the ledger key in its metadata) and nothing more: a
    charge's billing details never reach this table. Processing
    (``agent.ledger.provider_events``) compares it with the ledger and reports, never reverses.
    """

    merchant = models.ForeignKey(
        "desk.Merchant", on_delete=models.PROTECT, related_name="payment_events"
    )
    provider = models.CharField(max_length=16, default="stripe")
    event_id = models.CharField(max_length=255)
    type = models.CharField(max_length=64)
    data = models.JSONField(default=dict)
    status = models.CharField(
        max_length=10, choices=PaymentEventStatus.choices, default=PaymentEventStatus.RECEIVED
    )
    outcome = models.TextField(blank=True)
    received_at = models.DateTimeField(auto_now_add=True)
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["merchant", "provider", "event_id"], name="payment_event_once"
            )
        ]
        indexes = [models.Index(fields=["status", "received_at"], name="payment_event_waiting")]

    def __str__(self) -> str:
        return f"{self.provider} {self.type} {self.event_id}"
