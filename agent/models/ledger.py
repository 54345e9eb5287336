"""The idempotency ledger: one claim per irreversible effect, written with the effect.

Registered with the ``agent`` app (``agent.models`` imports it); its table stays
``agent_ledgerentry``.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q


class LedgerState(models.TextChoices):
    # Claimed, committed, and handed (or about to be handed) to another system under the
    # entry's key: whether that system acted is not yet known here.
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


class LedgerEntry(models.Model):
    """One claim per irreversible effect, keyed by root run + tool call id + arguments hash.

    In-database effects: written ``done`` (or ``failed``) in the same transaction as the
    refund, email or cancellation it records. A step that re-executes finds its own key and
    returns ``result`` instead of acting. Effects in another system (``adapter``: a payment
    provider, a mail server) are claimed ``pending`` first and committed, then the other
    system is called with the key as its idempotency key, then the answer is recorded
    (``agent.effects``); a step that re-executes finds the pending claim and repeats the
    call under the same key. ``identity`` is what the effect *is* (the registry's
    identity fields, e.g. order and amount): a call anywhere in the lineage (the
    runs sharing ``root_run``) with the same identity and the same content fields
    (``ToolDef.content``; the rest of its arguments is wording) is answered from this
    row instead of being performed again (``agent.ledger.lineage``).
    """

    key = models.CharField(max_length=200, unique=True)
    merchant = models.ForeignKey(
        "desk.Merchant", on_delete=models.PROTECT, related_name="ledger_entries"
    )
    root_run = models.ForeignKey("agent.Run", on_delete=models.PROTECT, related_name="+")
    run = models.ForeignKey("agent.Run", on_delete=models.PROTECT, related_name="ledger_entries")
    tool = models.CharField(max_length=40)
    tool_call_id = models.CharField(max_length=80)
    args_hash = models.CharField(max_length=64)
    identity = models.CharField(
        max_length=64,
        blank=True,
        help_text="sha256 of the tool and its identity fields (agent.tools.registry.identity_hash).",
    )
    arguments = models.JSONField()
    approval = models.ForeignKey(
        "approvals.Approval",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="ledger_entries",
    )
    ok = models.BooleanField(default=True)
    result = models.TextField()
    state = models.CharField(
        max_length=8,
        choices=LedgerState.choices,
        default=LedgerState.DONE,
        db_default=LedgerState.DONE,
    )
    # Which adapter made (or is making) the effect: a re-execution finishes with the one that
    # claimed, whatever the merchant's setting says by then.
    adapter = models.CharField(max_length=12, default="database", db_default="database")
    # The other system's id for the effect (a provider refund ``re_…``, a ``Message-ID``).
    provider_ref = models.CharField(max_length=250, blank=True, default="", db_default="")
    # How many times the other system was called under this key (retries, re-executions).
    provider_calls = models.PositiveIntegerField(default=0, db_default=0)
    recorded_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "ledger entries"
        indexes = [
            models.Index(fields=["merchant", "-created_at"], name="ledger_merchant_recent"),
            models.Index(fields=["root_run", "identity"], name="ledger_lineage_identity"),
            models.Index(
                fields=["created_at"], condition=Q(state="pending"), name="ledger_pending"
            ),
        ]

    def __str__(self) -> str:
        return self.key

    @property
    def is_pending(self) -> bool:
        return self.state == LedgerState.PENDING
