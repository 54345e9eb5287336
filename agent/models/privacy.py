"""Redactions: runs whose words were removed, and why.

Registered with the ``agent`` app (``agent.models`` imports it).
"""

from __future__ import annotations

from django.db import models


class RedactionReason(models.TextChoices):
    RETENTION = "retention"
    ERASURE = "erasure"


class Redaction(models.Model):
    """A run whose words were removed: by the merchant's retention period, or a customer's erasure.

    The step payloads' text, the approvals' wording, staff notes, the summary's account and
    the run's DBOS history are gone; what stays is what the accounts need (amounts, orders,
    times, approvers, argument hashes, the ledger). ``what`` counts what was removed — never
    the words themselves. A redacted run (or a fork whose inherited steps were redacted) can
    no longer be replayed or forked (``agent.privacy.redaction.replay_refusal``).
    """

    run = models.ForeignKey("agent.Run", on_delete=models.CASCADE, related_name="redactions")
    reason = models.CharField(max_length=12, choices=RedactionReason.choices)
    what = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        ordering = ["created_at", "pk"]

    def __str__(self) -> str:
        return f"{self.reason} redaction of run {self.run_id}"
