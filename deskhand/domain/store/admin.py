"""Store connections in the audit desk: the shop and its API version, the secrets only as
"set" (their sealed columns are excluded, so not even ciphertext is shown)."""

from __future__ import annotations

from django.contrib import admin

from deskhand.domain.desk.audit_admin import AuditAdmin
from deskhand.domain.store.models import ShopifyConnection


@admin.register(ShopifyConnection)
class ShopifyConnectionAdmin(AuditAdmin):
    list_display = ("shop_domain", "merchant", "api_version", "token_shown", "updated_at")
    list_filter = ("merchant",)
    exclude = ("access_token_sealed", "webhook_secret_sealed")
    readonly_fields = ("token_shown", "webhook_secret_shown")
