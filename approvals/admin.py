"""Approvals, staff notes and the human-action audit in the audit desk (read-only)."""

from __future__ import annotations

from django.contrib import admin

from agent.models import LedgerEntry, Run
from approvals.models import Approval, AuditEvent, StaffNote
from deskhand.console.audit_admin import AuditAdmin, admin_list_link, admin_pk_link


@admin.register(Approval)
class ApprovalAdmin(AuditAdmin):
    list_display = (
        "id",
        "merchant",
        "tool",
        "status",
        "run_link",
        "decided_by",
        "decided_at",
        "channel",
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
    list_select_related = ("merchant", "decided_by")
    date_hierarchy = "requested_at"
    readonly_fields = ("ledger",)

    @admin.display(description="run")
    def run_link(self, obj: Approval) -> str:
        return admin_pk_link(Run, obj.run_id, str(obj.run_id)[:8])

    @admin.display(description="ledger entries")
    def ledger(self, obj: Approval) -> str:
        return admin_list_link(
            LedgerEntry, "ledger entries for this approval", approval__id__exact=obj.pk
        )


@admin.register(StaffNote)
class StaffNoteAdmin(AuditAdmin):
    list_display = ("id", "run_link", "author", "channel", "created_at")
    list_filter = ("channel", ("created_at", admin.DateFieldListFilter), "run__merchant")
    search_fields = ("=run__id", "author__email", "body")
    list_select_related = ("author",)

    @admin.display(description="run")
    def run_link(self, obj: StaffNote) -> str:
        return admin_pk_link(Run, obj.run_id, str(obj.run_id)[:8])


@admin.register(AuditEvent)
class AuditEventAdmin(AuditAdmin):
    list_display = ("created_at", "merchant", "actor", "action", "channel", "run_link")
    list_filter = ("merchant", "action", "channel", ("created_at", admin.DateFieldListFilter))
    search_fields = ("=run__id", "actor__email", "action")
    list_select_related = ("merchant", "actor")
    date_hierarchy = "created_at"

    @admin.display(description="run")
    def run_link(self, obj: AuditEvent) -> str:
        return admin_pk_link(Run, obj.run_id, str(obj.run_id)[:8]) if obj.run_id else "—"
