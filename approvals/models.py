"""Approvals bind a person's decision to one exact call; audit records every human act."""

from __future__ import annotations

import uuid
from typing import Any

from django.conf import settings
from django.db import models

from deskhand.infra.dbos.names import approval_topic


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"
    # The run was cancelled while the request was pending: nobody decided, a person withdrew it.
    WITHDRAWN = "withdrawn"


class Channel(models.TextChoices):
    WEB = "web"
    CLI = "cli"
    SYSTEM = "system"
    # Decided by a merchant's approval rule (``ApprovalPolicy``), which a person wrote.
    POLICY = "policy"
    # Through the JSON API, by a key (``deskhand.web.api``); the key is named in the event's detail.
    API = "api"


def person_name(user: Any) -> str:
    """How a person is named in records that outlive their account: their email, else username."""
    return str(getattr(user, "email", "") or user.get_username())


class Approval(models.Model):
    """A request to perform one irreversible call, and (once) its decision.

    ``args_hash`` is sha256 of the canonical JSON ``{tool, args}``: the run
    re-computes it from the call it is about to make and refuses on mismatch.
    A database trigger (migration 0002) keeps what a person was asked fixed
    (run, call, tool, arguments, hash, preview) and a decision final: pending
    may become approved, denied, expired or withdrawn (migration 0003), and
    nothing else ever changes.

    A *withdrawal* (the run was cancelled while this was pending) reuses
    ``decided_by``/``decided_at``/``channel`` for who withdrew it, when and
    through what: it is the one final act on the request, the trigger already
    freezes those columns once the status leaves pending, and every listing
    (run page, ``approvals --json``, admin) already shows them. ``decided_by``
    is empty when the system withdrew it (DBOS cancelled the workflow outside
    Deskhand). ``reason`` stays a decider's own words, so it is left blank.

    *Approve with changes* (migration 0005): ``arguments``/``args_hash`` stay what
    the model proposed; ``approved_arguments``/``approved_hash`` are what the decider
    approved — equal to the proposal for a plain approval, narrower when a person
    changed it (a smaller refund, an edited body: the fields the tool registry
    declares). The run executes exactly the approved call. The trigger lets these
    columns be written only in the pending → approved transition, never after.

    A *policy* decision (``channel`` ``policy``) names the merchant's rule version
    (``policy``) and the rule that matched (``policy_rule``, 1-based); ``decided_by``
    is empty, since a rule a person wrote decided, not a person at that moment.
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
    # What the run's lineage and every earlier run on its ticket had already done to the same
    # order or customer when this was requested (``agent.ledger.lineage.prior_effects``), for the card.
    prior_effects = models.JSONField(default=list, blank=True)
    # The order's money as the person was shown it (``agent.tools.order_facts.RefundFacts``:
    # total, refunded, left), for a call on an order's money; empty for any other. The effect
    # reads them again before it pays and asks again if the refunded total moved (migration 0017).
    facts = models.JSONField(default=dict, blank=True)
    requested_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    status = models.CharField(
        max_length=10, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    # Who decided (or withdrew), kept when their account is deleted (``decided_by`` is then null).
    decided_by_name = models.CharField(max_length=254, blank=True, default="", db_default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    reason = models.TextField(blank=True)
    channel = models.CharField(max_length=8, choices=Channel.choices, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    escalated_at = models.DateTimeField(null=True, blank=True)
    approved_arguments = models.JSONField(null=True, blank=True)
    approved_hash = models.CharField(max_length=64, blank=True, default="", db_default="")
    policy = models.ForeignKey(
        "approvals.ApprovalPolicy",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="approvals",
    )
    policy_rule = models.PositiveSmallIntegerField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["run", "tool_call_id"], name="one_approval_per_call")
        ]
        indexes = [
            models.Index(fields=["merchant", "status", "requested_at"], name="approval_inbox")
        ]

    def __str__(self) -> str:
        return f"{self.preview} [{self.status}]"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.decided_by is not None and not self.decided_by_name:
            self.decided_by_name = person_name(self.decided_by)
            fields = kwargs.get("update_fields")
            if fields is not None and "decided_by" in fields:
                kwargs["update_fields"] = [*fields, "decided_by_name"]
        super().save(*args, **kwargs)

    @property
    def decider(self) -> str:
        """Who decided, readable whether or not their account still exists ("" if nobody)."""
        return self.decided_by_name or (self.decided_by.email if self.decided_by else "")

    @property
    def topic(self) -> str:
        """The DBOS topic the run waits on for this decision (the rule is ``dbos_client``'s)."""
        return approval_topic(self.id)

    @property
    def executes(self) -> dict[str, Any]:
        """The arguments the run performs: what was approved, or (no decision yet) the proposal."""
        approved = self.approved_arguments
        return dict(approved if isinstance(approved, dict) else self.arguments or {})

    @property
    def currency(self) -> str:
        """The currency of the order the call moves money on, as the facts recorded it (an
        approval that recorded none is in the default, USD)."""
        facts = self.facts if isinstance(self.facts, dict) else {}
        return str(facts.get("currency") or "USD")

    @property
    def changed(self) -> bool:
        """A person approved something narrower than the proposal."""
        return bool(self.approved_hash) and self.approved_hash != self.args_hash

    @property
    def decided_by_label(self) -> str:
        """Who decided, in words: a person's email, a policy rule, or the system."""
        if self.channel == Channel.POLICY and self.policy is not None:
            return f"policy v{self.policy.version} rule {self.policy_rule}"
        if self.decider:
            return self.decider
        return "the system" if self.status != ApprovalStatus.PENDING else ""


class ApprovalPolicy(models.Model):
    """One version of a merchant's approval rules, written by an owner. Never edited: a change
    is a new version, so every policy decision names the exact rules that made it.

    ``rules`` is a list of ``{"tool", "max_amount_cents"?, "max_per_day"}`` (validated by
    ``agent.consent.policy``, which knows the tool registry). The newest version is in force;
    an empty list means every call waits for a person.
    """

    merchant = models.ForeignKey(
        "desk.Merchant", on_delete=models.PROTECT, related_name="approval_policies"
    )
    version = models.PositiveIntegerField()
    rules = models.JSONField(default=list, blank=True)
    # Who wrote it: the live link while the account exists, and the name, kept when it is
    # deleted (the only change the database lets a version undergo: migration 0009).
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_by_name = models.CharField(max_length=254, blank=True, default="", db_default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["merchant", "version"], name="one_policy_version_per_merchant"
            )
        ]
        ordering = ["merchant", "-version"]
        verbose_name_plural = "approval policies"

    def __str__(self) -> str:
        return f"{self.merchant_id} policy v{self.version}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("an approval policy version is never edited; save a new version")
        if self.created_by is not None and not self.created_by_name:
            self.created_by_name = person_name(self.created_by)
        super().save(*args, **kwargs)

    @property
    def author(self) -> str:
        """Who wrote this version, readable whether or not their account still exists."""
        return self.created_by_name or (self.created_by.email if self.created_by else "")


class StaffNote(models.Model):
    """Guidance from staff to a live run, handed to the model at its next turn.

    ``author_name`` keeps who wrote it when their account is deleted (``author`` then
    becomes null).
    """

    run = models.ForeignKey("agent.Run", on_delete=models.CASCADE, related_name="staff_notes")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    author_name = models.CharField(max_length=254, blank=True, default="", db_default="")
    body = models.TextField()
    channel = models.CharField(max_length=8, choices=Channel.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    # Set when DBOS accepted the send; the reconciler re-sends only notes without it.
    delivered_at = models.DateTimeField(null=True, blank=True)
    # The step-log row (seq) that handed it to the model, on runs that read notes from this
    # table inside their model step (agent.run.steering.notes_take); empty until then.
    taken_seq = models.PositiveIntegerField(null=True, blank=True)

    def __str__(self) -> str:
        return f"note {self.pk} on run {self.run_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.author is not None and not self.author_name:
            self.author_name = person_name(self.author)
        super().save(*args, **kwargs)


class AuditEvent(models.Model):
    """Append-only record of human actions: start, cancel, steer, decide, undo, erase.

    Who acted is kept with the event itself — ``actor_ref`` (their user id, stable:
    Postgres never reuses one) and ``actor_name`` (their email) — so a staff member
    who leaves can be deactivated and even deleted while every record of what they
    did still names them. ``actor`` is the live link while the account exists and
    becomes null when it is deleted (SET_NULL); all three are empty for the system's
    own acts (an expiry, an escalation, a retention sweep).

    Append-only is enforced twice: ``save`` refuses an update, and a database
    trigger refuses an UPDATE that rewrites what happened (migration 0002; 0006
    allows the two updates that are not rewrites: a deleted account's link set to
    null, and a privacy redaction of the words in ``detail``, ``agent.privacy.redaction``).
    """

    merchant = models.ForeignKey(
        "desk.Merchant", on_delete=models.PROTECT, related_name="audit_events"
    )
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    actor_ref = models.BigIntegerField(null=True, blank=True)
    actor_name = models.CharField(max_length=254, blank=True, default="", db_default="")
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
        return f"{self.action} by {self.actor_label} via {self.channel}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("audit events are append-only")
        if self.actor is not None:
            self.actor_ref, self.actor_name = self.actor.pk, person_name(self.actor)
        super().save(*args, **kwargs)

    @property
    def actor_label(self) -> str:
        """Who acted, readable whether or not their account still exists."""
        if not self.actor_name and self.actor_ref is None:
            return "the system"
        return self.actor_name or f"user #{self.actor_ref}"


# The notification outbox lives in its own module; imported here so Django registers it.
from approvals.notification_models import (  # noqa: E402
    Notification,
    NotificationEvent,
    Transport,
    WebhookDelivery,
    WebhookEndpoint,
)

__all__ = [
    "Approval",
    "ApprovalPolicy",
    "ApprovalStatus",
    "AuditEvent",
    "Channel",
    "Notification",
    "NotificationEvent",
    "StaffNote",
    "Transport",
    "WebhookDelivery",
    "WebhookEndpoint",
]
