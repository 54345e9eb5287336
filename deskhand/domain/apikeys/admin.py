"""The audit desk's read-only view of keys (never their digest), help-desk sources (never
their secret), what the desks sent and the replies relayed to them."""

from __future__ import annotations

from django.contrib import admin

from deskhand.domain.apikeys.models import ApiKey, HelpdeskDelivery, HelpdeskReply, HelpdeskSource
from deskhand.domain.desk.audit_admin import AuditAdmin


@admin.register(ApiKey)
class ApiKeyAdmin(AuditAdmin):
    list_display = (
        "name",
        "prefix",
        "merchant",
        "scopes",
        "created_by_name",
        "last_used_at",
        "revoked_at",
    )
    list_filter = ("merchant",)
    search_fields = ("=prefix", "name")
    exclude = ("digest",)


@admin.register(HelpdeskSource)
class HelpdeskSourceAdmin(AuditAdmin):
    list_display = ("slug", "merchant", "reply_url", "active", "created_at")
    list_filter = ("merchant", "active")
    exclude = ("secret",)


@admin.register(HelpdeskDelivery)
class HelpdeskDeliveryAdmin(AuditAdmin):
    list_display = ("webhook_id", "source", "ticket", "received_at")
    search_fields = ("=webhook_id",)


@admin.register(HelpdeskReply)
class HelpdeskReplyAdmin(AuditAdmin):
    """The relay's delivery log: attempts, the desk's last answer, and when it took it."""

    list_display = (
        "webhook_id",
        "source",
        "attempts",
        "last_status",
        "sent_at",
        "next_attempt_at",
        "last_error",
    )
    list_filter = ("source", ("sent_at", admin.EmptyFieldListFilter))
    search_fields = ("=webhook_id",)
