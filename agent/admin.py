"""Runs, the step log and the ledger in the audit desk (read-only; see deskhand/domain/desk/audit_admin.py)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from agent.models import Run, Step
from agent.models.effects import EffectFinding, PaymentEvent
from agent.models.ledger import LedgerEntry
from agent.models.privacy import Redaction
from approvals.models import Approval, AuditEvent
from deskhand.domain.desk.audit_admin import (
    AuditAdmin,
    AuditInline,
    admin_list_link,
    admin_pk_link,
    full_id,
    spend,
)
from deskhand.domain.desk.models import Refund, Ticket

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
    "cost",
    "created_at",
)


# The inline reads the same columns; its cost is a method of its own (an inline has no ``cost``).
STEP_INLINE_COLUMNS: tuple[str, ...] = tuple(
    "step_cost" if c == "cost" else c for c in STEP_COLUMNS
)


class StepInline(AuditInline):
    model = Step
    fields = STEP_INLINE_COLUMNS
    readonly_fields = fields
    ordering = ("seq",)

    @admin.display(description="cost")
    def step_cost(self, obj: Step) -> str:
        return spend(obj.cost_micros)


@admin.register(Run)
class RunAdmin(AuditAdmin):
    # Newest first, in columns that fit 1280 px: the short id (the full one is the link's page).
    list_display = (
        "short_id",
        "created_at",
        "merchant",
        "ticket_link",
        "status",
        "stop_reason",
        "steps",
        "cost",
    )
    list_display_links = ("short_id",)
    ordering = ("-created_at", "-id")
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

    @admin.display(description="run", ordering="id")
    def short_id(self, obj: Run) -> str:
        return str(obj.pk)[:8]

    @admin.display(description="cost", ordering="cost_micros")
    def cost(self, obj: Run) -> str:
        return spend(obj.cost_micros)

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

    @admin.display(description="cost", ordering="cost_micros")
    def cost(self, obj: Step) -> str:
        return spend(obj.cost_micros)

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
        return full_id(Run, obj.run_id)


@admin.register(LedgerEntry)
class LedgerEntryAdmin(AuditAdmin):
    list_display = (
        "key",
        "merchant",
        "tool",
        "ok",
        "state",
        "adapter",
        "provider_ref",
        "provider_calls",
        "run_link",
        "root_run_link",
        "approval_link",
        "args_hash_short",
        "created_at",
    )
    list_filter = (
        "merchant",
        "tool",
        "ok",
        "state",
        "adapter",
        ("created_at", admin.DateFieldListFilter),
    )
    search_fields = (
        "key",
        "=run__id",
        "=root_run__id",
        "args_hash",
        "arguments__order_reference",
        "provider_ref",
    )
    list_select_related = ("merchant",)
    date_hierarchy = "created_at"

    @admin.display(description="run")
    def run_link(self, obj: LedgerEntry) -> str:
        return full_id(Run, obj.run_id)

    @admin.display(description="root run")
    def root_run_link(self, obj: LedgerEntry) -> str:
        return full_id(Run, obj.root_run_id)

    @admin.display(description="approval")
    def approval_link(self, obj: LedgerEntry) -> str:
        return full_id(Approval, obj.approval_id)

    @admin.display(description="args hash")
    def args_hash_short(self, obj: LedgerEntry) -> str:
        return obj.args_hash  # whole: it is what a person matches against an approval


class OpenFilter(admin.SimpleListFilter):
    title = "open"
    parameter_name = "open"

    def lookups(self, request: Any, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "open"), ("no", "settled by a person")]

    def queryset(self, request: Any, queryset: Any) -> Any:
        if self.value() == "yes":
            return queryset.filter(resolved_at__isnull=True)
        if self.value() == "no":
            return queryset.filter(resolved_at__isnull=False)
        return queryset


@admin.register(EffectFinding)
class EffectFindingAdmin(AuditAdmin):
    """Reconciliation's findings: shown, never fixed here (``manage.py effects_findings``)."""

    list_display = (
        "found_at",
        "merchant",
        "kind",
        "provider_ref",
        "ledger_link",
        "ledger_amount_cents",
        "provider_amount_cents",
        "detail",
        "last_seen_at",
        "resolved_at",
    )
    list_filter = ("merchant", "kind", OpenFilter, ("found_at", admin.DateFieldListFilter))
    search_fields = ("provider_ref", "ledger_entry__key", "detail")
    list_select_related = ("merchant", "ledger_entry")
    date_hierarchy = "found_at"

    @admin.display(description="ledger entry")
    def ledger_link(self, obj: EffectFinding) -> str:
        entry = obj.ledger_entry
        return admin_pk_link(LedgerEntry, entry.pk, entry.key) if entry is not None else "—"


@admin.register(PaymentEvent)
class PaymentEventAdmin(AuditAdmin):
    """Stripe's webhook events as stored, and what processing concluded of each."""

    list_display = ("received_at", "merchant", "type", "event_id", "status", "outcome")
    list_filter = ("merchant", "type", "status", ("received_at", admin.DateFieldListFilter))
    search_fields = ("=event_id", "outcome")
    list_select_related = ("merchant",)
    date_hierarchy = "received_at"


@admin.register(Redaction)
class RedactionAdmin(AuditAdmin):
    """Which runs lost their words, why and when (counts only: the words are gone)."""

    list_display = ("created_at", "reason", "run_link", "what")
    list_filter = ("reason", ("created_at", admin.DateFieldListFilter), "run__merchant")
    search_fields = ("=run__id",)
    date_hierarchy = "created_at"

    @admin.display(description="run")
    def run_link(self, obj: Redaction) -> str:
        return full_id(Run, obj.run_id)
