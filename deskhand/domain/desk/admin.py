"""The domain in the audit desk: merchants, people, customers, orders, refunds, tickets."""

from __future__ import annotations

from django.contrib import admin
from django.utils import timezone

from deskhand.domain.desk.audit_admin import (
    AuditAdmin,
    AuditInline,
    admin_link,
    full_id,
    money,
    person,
    spend,
)
from deskhand.domain.desk.models import (
    Customer,
    Invitation,
    KbArticle,
    Membership,
    Merchant,
    Order,
    OrderItem,
    OutboundEmail,
    Refund,
    SupportAddress,
    Ticket,
    TicketMessage,
)


class MembershipInline(AuditInline):
    model = Membership
    fields = ("user", "role")


class SupportAddressInline(AuditInline):
    model = SupportAddress
    fields = ("address", "primary")
    readonly_fields = fields
    show_change_link = False


@admin.register(Merchant)
class MerchantAdmin(AuditAdmin):
    list_display = (
        "name",
        "slug",
        "timezone",
        "daily_spend_cap",
        "daily_refund_ceiling",
        "run_refund_ceiling",
        "refund_adapter",
        "mail_adapter",
    )
    search_fields = ("name", "slug")
    inlines = [MembershipInline, SupportAddressInline]

    @admin.display(description="daily model spend cap", ordering="daily_spend_cap_micros")
    def daily_spend_cap(self, obj: Merchant) -> str:
        return spend(obj.daily_spend_cap_micros)

    @admin.display(description="daily refund ceiling", ordering="daily_refund_ceiling_cents")
    def daily_refund_ceiling(self, obj: Merchant) -> str:
        return money(obj.daily_refund_ceiling_cents)

    @admin.display(description="refund ceiling per run", ordering="run_refund_ceiling_cents")
    def run_refund_ceiling(self, obj: Merchant) -> str:
        return money(obj.run_refund_ceiling_cents)


@admin.register(Membership)
class MembershipAdmin(AuditAdmin):
    list_display = ("who", "merchant", "role")
    list_filter = ("merchant", "role")

    @admin.display(description="person", ordering="user__email")
    def who(self, obj: Membership) -> str:
        return person(obj.user)

    search_fields = ("user__email",)
    list_select_related = ("user", "merchant")


@admin.register(Invitation)
class InvitationAdmin(AuditAdmin):
    """Who was offered which role, by whom, and what became of it (the token is never here)."""

    list_display = ("email", "merchant", "role", "invited_by_name", "sent_at", "state")
    list_filter = ("merchant", "role")
    search_fields = ("email",)
    exclude = ("token_hash",)
    list_select_related = ("merchant",)

    @admin.display(description="state")
    def state(self, obj: Invitation) -> str:
        if obj.accepted_at:
            return f"accepted {obj.accepted_at:%Y-%m-%d %H:%M}"
        if obj.revoked_at:
            return f"withdrawn {obj.revoked_at:%Y-%m-%d %H:%M}"
        return "expired" if timezone.now() >= obj.expires_at else "waiting"


@admin.register(Customer)
class CustomerAdmin(AuditAdmin):
    list_display = ("name", "email", "merchant")
    list_filter = ("merchant",)
    search_fields = ("name", "email")
    list_select_related = ("merchant",)


class OrderItemInline(AuditInline):
    model = OrderItem
    fields = ("sku", "description", "quantity", "unit_price_cents")
    show_change_link = False


class RefundInline(AuditInline):
    model = Refund
    fields = ("amount_cents", "currency", "reason", "run", "ledger_entry", "created_at")
    readonly_fields = fields
    fk_name = "order"


@admin.register(Order)
class OrderAdmin(AuditAdmin):
    list_display = (
        "reference",
        "merchant",
        "customer",
        "status",
        "total",
        "placed_at",
        "delivered_at",
        "source",
        "version",
        "pushed_at",
    )
    list_filter = ("merchant", "status", "source", ("placed_at", admin.DateFieldListFilter))
    search_fields = ("reference", "customer__email")
    list_select_related = ("merchant", "customer")
    date_hierarchy = "placed_at"
    inlines = [OrderItemInline, RefundInline]

    @admin.display(description="total", ordering="total_cents")
    def total(self, obj: Order) -> str:
        return money(obj.total_cents, obj.currency)


@admin.register(Refund)
class RefundAdmin(AuditAdmin):
    list_display = (
        "id",
        "merchant",
        "order_link",
        "amount",
        "status",
        "provider_refund_id",
        "run_link",
        "ledger_link",
        "created_at",
    )
    list_filter = ("merchant", "status", ("created_at", admin.DateFieldListFilter))
    search_fields = ("order__reference", "ledger_entry__key", "=run__id", "provider_refund_id")
    list_select_related = ("merchant", "order", "ledger_entry")
    date_hierarchy = "created_at"

    @admin.display(description="amount", ordering="amount_cents")
    def amount(self, obj: Refund) -> str:
        return money(obj.amount_cents, obj.currency)

    @admin.display(description="order", ordering="order__reference")
    def order_link(self, obj: Refund) -> str:
        return admin_link(obj.order, obj.order.reference)

    @admin.display(description="run")
    def run_link(self, obj: Refund) -> str:
        return full_id("agent.Run", obj.run_id)

    @admin.display(description="ledger entry")
    def ledger_link(self, obj: Refund) -> str:
        entry = obj.ledger_entry
        return admin_link(entry, entry.key) if entry is not None else "—"


class TicketMessageInline(AuditInline):
    model = TicketMessage
    fields = ("kind", "channel", "direction", "author", "from_address", "body", "run", "created_at")
    readonly_fields = fields
    show_change_link = False


@admin.register(Ticket)
class TicketAdmin(AuditAdmin):
    list_display = (
        "reference",
        "merchant",
        "subject",
        "customer",
        "status",
        "priority",
        "created_at",
    )
    list_filter = ("merchant", "status", "priority", ("created_at", admin.DateFieldListFilter))
    search_fields = ("reference", "subject", "customer__email")
    list_select_related = ("merchant", "customer")
    inlines = [TicketMessageInline]


@admin.register(OutboundEmail)
class OutboundEmailAdmin(AuditAdmin):
    list_display = (
        "id",
        "merchant",
        "customer",
        "subject",
        "ticket",
        "message_id",
        "run_link",
        "ledger_link",
        "sent_at",
    )
    list_filter = ("merchant", ("sent_at", admin.DateFieldListFilter))
    search_fields = (
        "subject",
        "customer__email",
        "ticket__reference",
        "ledger_entry__key",
        "=run__id",
    )
    list_select_related = ("merchant", "customer", "ticket", "ledger_entry")

    @admin.display(description="run")
    def run_link(self, obj: OutboundEmail) -> str:
        return full_id("agent.Run", obj.run_id)

    @admin.display(description="ledger entry")
    def ledger_link(self, obj: OutboundEmail) -> str:
        entry = obj.ledger_entry
        return admin_link(entry, entry.key) if entry is not None else "—"


@admin.register(KbArticle)
class KbArticleAdmin(AuditAdmin):
    list_display = ("title", "slug", "merchant")
    list_filter = ("merchant",)
    search_fields = ("title", "slug")
    exclude = ("search",)
