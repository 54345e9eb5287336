"""Runs, the step log and the ledger in the audit desk (read-only; see deskhand/console/audit_admin.py)."""

from __future__ import annotations

from django.contrib import admin

from agent.models import LedgerEntry, Run, Step
from approvals.models import Approval, AuditEvent
from deskhand.console.audit_admin import AuditAdmin, AuditInline, admin_list_link, admin_pk_link
from deskhand.desk.models import Refund, Ticket

# What an auditor reads of a step, inline on its run and in the step log's own list.
STEP_COLUMNS = (
    "seq",
    "kind",
    "tool",
    "risk",
    "ok",
    "replayed",
    "attempts",
    "latency_ms",
    "cost_micros",
    "created_at",
)


class StepInline(AuditInline):
    model = Step
    fields = STEP_COLUMNS
    readonly_fields = fields
    ordering = ("seq",)


@admin.register(Run)
class RunAdmin(AuditAdmin):
    list_display = (
        "id",
        "merchant",
        "ticket_link",
        "status",
        "stop_reason",
        "steps",
        "cost_micros",
        "provider",
        "model",
        "created_at",
    )
    list_filter = (
        "merchant",
        "status",
        "stop_reason",
        "provider",
        ("created_at", admin.DateFieldListFilter),
    )
    search_fields = ("=id", "ticket__reference")
    list_select_related = ("merchant", "ticket")
    date_hierarchy = "created_at"
    readonly_fields = ("related",)
    inlines = [StepInline]

    @admin.display(description="ticket", ordering="ticket__reference")
    def ticket_link(self, obj: Run) -> str:
        return admin_pk_link(Ticket, obj.ticket_id, obj.ticket.reference)

    @admin.display(description="related records")
    def related(self, obj: Run) -> str:
        return " · ".join(
            [
                admin_list_link(Step, "step log", run__id__exact=obj.pk),
                admin_list_link(LedgerEntry, "ledger", run__id__exact=obj.pk),
                admin_list_link(Approval, "approvals", run__id__exact=obj.pk),
                admin_list_link(Refund, "refunds", run__id__exact=obj.pk),
                admin_list_link(AuditEvent, "human actions", run__id__exact=obj.pk),
            ]
        )


@admin.register(Step)
class StepAdmin(AuditAdmin):
    list_display = ("run_link", *STEP_COLUMNS)
    list_filter = (
        "kind",
        "tool",
        "risk",
        "ok",
        "replayed",
        ("created_at", admin.DateFieldListFilter),
        "run__merchant",
    )
    search_fields = ("=run__id", "tool_call_id", "tool")
    list_select_related = ("run",)
    ordering = ("-created_at", "-id")

    @admin.display(description="run", ordering="run")
    def run_link(self, obj: Step) -> str:
        return admin_pk_link(Run, obj.run_id, str(obj.run_id)[:8])


@admin.register(LedgerEntry)
class LedgerEntryAdmin(AuditAdmin):
    list_display = (
        "key",
        "merchant",
        "tool",
        "ok",
        "run_link",
        "root_run_link",
        "approval_link",
        "args_hash_short",
        "created_at",
    )
    list_filter = ("merchant", "tool", "ok", ("created_at", admin.DateFieldListFilter))
    search_fields = ("key", "=run__id", "=root_run__id", "args_hash", "arguments__order_reference")
    list_select_related = ("merchant",)
    date_hierarchy = "created_at"

    @admin.display(description="run")
    def run_link(self, obj: LedgerEntry) -> str:
        return admin_pk_link(Run, obj.run_id, str(obj.run_id)[:8])

    @admin.display(description="root run")
    def root_run_link(self, obj: LedgerEntry) -> str:
        return admin_pk_link(Run, obj.root_run_id, str(obj.root_run_id)[:8])

    @admin.display(description="approval")
    def approval_link(self, obj: LedgerEntry) -> str:
        return (
            admin_pk_link(Approval, obj.approval_id, str(obj.approval_id)[:8])
            if obj.approval_id
            else "—"
        )

    @admin.display(description="args hash")
    def args_hash_short(self, obj: LedgerEntry) -> str:
        return obj.args_hash[:12]
