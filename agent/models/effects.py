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
