"""Inbound mail in the audit desk: what came in, from where, and what became of it.

The raw bytes and attachment contents are not shown here (a person reads the thread);
the facts are: source, merchant, verdicts, status and reason, size and hash.
"""

from __future__ import annotations

from django.contrib import admin

from deskhand.domain.desk.audit_admin import AuditAdmin, AuditInline, admin_link
from deskhand.domain.mail.models import InboundAttachment, InboundEmail


class InboundAttachmentInline(AuditInline):
    model = InboundAttachment
    fields = ("filename", "content_type", "size", "inline")
    readonly_fields = fields
    show_change_link = False


@admin.register(InboundEmail)
class InboundEmailAdmin(AuditAdmin):
    list_display = (
        "id",
        "received_at",
        "source",
        "merchant",
        "status",
        "reason_code",
        "automated",
        "ticket_link",
        "raw_size",
    )
    list_filter = ("source", "status", "automated", "merchant")
    search_fields = ("subject", "from_address", "ticket__reference", "=id")
    list_select_related = ("merchant", "ticket")
    exclude = ("raw",)
    inlines = [InboundAttachmentInline]

    @admin.display(description="ticket")
    def ticket_link(self, obj: InboundEmail) -> str:
        return admin_link(obj.ticket, obj.ticket.reference) if obj.ticket else "—"
