"""The admin as the audit desk: every model readable, none writable, by anyone.

Read-only is enforced in the admin classes themselves (no add, change or
delete permission, not even for a superuser), so a permission granted by
mistake still cannot turn the audit trail into an editor. Access is for
staff: merchant users are not staff and the admin's own login refuses them.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html


class AuditAdmin(admin.ModelAdmin):
    """A read-only ModelAdmin: view lists and details, never add, change or delete."""

    actions = None
    list_per_page = 50
    show_full_result_count = False  # no COUNT(*) over the unfiltered table on every page

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class AuditInline(admin.TabularInline):
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def admin_link(obj: Model | None, label: str | None = None) -> str:
    """A link to ``obj``'s admin page (or a dash)."""
    if obj is None:
        return "—"
    meta = obj._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, label if label is not None else str(obj))


def admin_list_link(model: type[Model], label: str, **filters: Any) -> str:
    """A link to ``model``'s changelist filtered by ``filters`` (e.g. ``run__id__exact=…``)."""
    meta = model._meta
    query = "&".join(f"{k}={v}" for k, v in filters.items())
    return format_html(
        '<a href="{}?{}">{}</a>',
        reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"),
        query,
        label,
    )


def admin_pk_link(model: type[Model], pk: Any, label: str) -> str:
    """A link to one row's admin page by primary key (no query for the related row)."""
    if pk is None:
        return "—"
    meta = model._meta
    return format_html(
        '<a href="{}">{}</a>',
        reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[pk]),
        label,
    )
