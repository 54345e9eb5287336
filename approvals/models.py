"""Approvals bind a person's decision to one exact call; audit records every human act."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


class Channel(models.TextChoices):
    WEB = "web"
    CLI = "cli"
    SYSTEM = "system"


class Approval(models.Model):
    """A request to perform one irreversible call, and (once) its decision.

    ``args_hash`` is sha256 of the canonical JSON ``{tool, args}``: the run
    re-computes it from the call it is about to make and refuses on mismatch.
    A database trigger (migration 0002) keeps what a person was asked fixed
    (run, call, tool, arguments, hash, preview) and a decision final: pending
    may become approved, denied or expired, and nothing else ever changes.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    merchant = models.ForeignKey(
        "desk.Merchant", on_delete=models.PROTECT, related_name="approvals"
    )
    run = models.ForeignKey("agent.Run", on_delete=models.PROTECT, related_name="approvals")
    tool_call_id = models.CharField(max_length=80)
    tool = models.CharField(max_length=40)
    arguments = models.JSONField()
    args_hash = models.CharField(max_length=64)
    preview = models.TextField()
    requested_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    status = models.CharField(
        max_length=10, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)
    channel = models.CharField(max_length=8, choices=Channel.choices, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "tool_call_id"], name="one_approval_per_call")
        ]
        indexes = [
            models.Index(fields=["merchant", "status", "requested_at"], name="approval_inbox")
        ]

    def __str__(self) -> str:
        return f"{self.preview} [{self.status}]"

    @property
    def topic(self) -> str:
        return approval_topic(self.id)


def approval_topic(approval_id: uuid.UUID | str) -> str:
    """The DBOS message topic a run waits on for this approval's decision."""
    return f"approval:{approval_id}"


STEER_TOPIC = "steer"


class StaffNote(models.Model):
    """Guidance from staff to a live run, handed to the model at its next turn."""

    run = models.ForeignKey("agent.Run", on_delete=models.CASCADE, related_name="staff_notes")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT)
    body = models.TextField()
    channel = models.CharField(max_length=8, choices=Channel.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"note {self.pk} on run {self.run_id}"


class AuditEvent(models.Model):
    """Append-only record of human actions: start, cancel, steer, decide, undo.

    ``actor`` is null only for the system's own acts (an expiry, an escalation);
    a person who acted cannot be deleted from under their record (PROTECT).
    Append-only is enforced twice: ``save`` refuses an update, and a database
    trigger (migration 0002) refuses an UPDATE that rewrites what happened.
    """

    merchant = models.ForeignKey(
        "desk.Merchant", on_delete=models.PROTECT, related_name="audit_events"
    )
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT)
    action = models.CharField(max_length=40)
    run = models.ForeignKey(
        "agent.Run", null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events"
    )
    channel = models.CharField(max_length=8, choices=Channel.choices)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor or 'the system'} via {self.channel}"

    def save(self, *args: object, **kwargs: object) -> None:
        if self.pk is not None:
            raise ValueError("audit events are append-only")
        super().save(*args, **kwargs)
