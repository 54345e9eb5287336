"""Approvals, staff notes and the human-action audit in the audit desk (read-only).

The run and ledger models are reached through the foreign keys (``_meta``), not
imported: the approvals app never imports the agent app.
"""

from __future__ import annotations

from django.contrib import admin
from django.db.models import Model

from approvals.models import (
    Approval,
    ApprovalPolicy,
    AuditEvent,
    Notification,
    StaffNote,
    WebhookDelivery,
    WebhookEndpoint,
)
from deskhand.domain.desk.audit_admin import AuditAdmin, admin_list_link, full_id, money, person


def _related(name: str) -> type[Model]:
    model = Approval._meta.get_field(name).related_model
    assert isinstance(model, type) and issubclass(model, Model)
    return model


Run = _related("run")
LedgerEntry = _related("ledger_entries")


@admin.register(Approval)
class ApprovalAdmin(AuditAdmin):
    list_display = (
        "id",
        "merchant",
        "tool",
        "amount",
        "status",
        "run_link",
        "decider",
        "decided_at",
        "channel",
        "decided_how",
        "escalated_at",
        "requested_at",
    )
    list_filter = (
        "merchant",
        "tool",
        "status",
        "channel",
        ("requested_at", admin.DateFieldListFilter),
    )
    search_fields = ("=id", "=run__id", "args_hash", "arguments__order_reference", "preview")
    list_select_related = ("merchant", "decided_by", "policy")
    date_hierarchy = "requested_at"
    readonly_fields = ("ledger",)

    @admin.display(description="amount")
    def amount(self, obj: Approval) -> str:
        """The money the call would move (refunds), from its arguments; blank for others."""
        args = obj.arguments if isinstance(obj.arguments, dict) else {}
        cents = args.get("amount_cents")
        return (
            money(cents, obj.currency)
            if isinstance(cents, int) and not isinstance(cents, bool)
            else ""
        )

    @admin.display(description="decided how")
    def decided_how(self, obj: Approval) -> str:
        """A policy rule, a change a person made, or (blank) a person as proposed."""
        if obj.policy_id is not None:
            return f"by {obj.decided_by_label}"
        return "with changes" if obj.changed else ""

    @admin.display(description="run")
    def run_link(self, obj: Approval) -> str:
        return full_id("agent.Run", obj.run_id)

    @admin.display(description="ledger entries")
    def ledger(self, obj: Approval) -> str:
        return admin_list_link(
            "agent.LedgerEntry", "ledger entries for this approval", approval__id__exact=obj.pk
        )


@admin.register(StaffNote)
class StaffNoteAdmin(AuditAdmin):
    list_display = ("id", "run_link", "author_name", "channel", "created_at", "delivered_at")
    list_filter = ("channel", ("created_at", admin.DateFieldListFilter), "run__merchant")
    search_fields = ("=run__id", "author_name", "body")

    @admin.display(description="run")
    def run_link(self, obj: StaffNote) -> str:
        return full_id("agent.Run", obj.run_id)


@admin.register(AuditEvent)
class AuditEventAdmin(AuditAdmin):
    list_display = ("created_at", "merchant", "who", "action", "channel", "run_link")
    list_filter = ("merchant", "action", "channel", ("created_at", admin.DateFieldListFilter))
    search_fields = ("=run__id", "actor_name", "action")
    list_select_related = ("merchant",)

    @admin.display(description="actor")
    def who(self, obj: AuditEvent) -> str:
        """Kept with the event, so a deleted account's acts still name them."""
        return obj.actor_label

    date_hierarchy = "created_at"

    @admin.display(description="run")
    def run_link(self, obj: AuditEvent) -> str:
        return full_id("agent.Run", obj.run_id)


@admin.register(ApprovalPolicy)
class ApprovalPolicyAdmin(AuditAdmin):
    list_display = ("merchant", "version", "rules", "author", "created_at")
    list_filter = ("merchant",)
    list_select_related = ("merchant", "created_by")

    @admin.display(description="written by", ordering="created_by__email")
    def author(self, obj: ApprovalPolicy) -> str:
        return person(obj.created_by)


@admin.register(Notification)
class NotificationAdmin(AuditAdmin):
    """The outbox: who was (or is still to be) told, how often it was tried, and why it failed."""

    list_display = (
        "created_at",
        "merchant",
        "event",
        "transport",
        "recipient",
        "attempts",
        "sent_at",
        "next_attempt_at",
        "last_error",
    )
    list_filter = ("merchant", "event", "transport", ("sent_at", admin.EmptyFieldListFilter))
    search_fields = ("=id", "=approval__id", "recipient")
    list_select_related = ("merchant",)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(AuditAdmin):
    """The webhook delivery log: one row per attempt, with the receiver's answer."""

    list_display = ("at", "notification_id", "attempt", "status_code", "ok", "error", "duration_ms")
    list_filter = ("ok", ("at", admin.DateFieldListFilter))
    search_fields = ("=notification__id",)


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(AuditAdmin):
    """A merchant's chat webhook, read-only here (``manage.py webhook`` sets it); the secret
    is never shown again after it was issued."""

    list_display = ("merchant", "url", "active")
    list_filter = ("active",)
    exclude = ("secret",)
