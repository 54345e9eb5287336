"""The admin as the audit desk: every model readable, none writable, by anyone.

Read-only is enforced in the admin classes themselves (no add, change or
delete permission, not even for a superuser), so a permission granted by
mistake still cannot turn the audit trail into an editor. Access is for
staff: merchant users are not staff and the admin's own login refuses them.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from deskhand.domain.desk.money import display_cents, format_micros
from deskhand.infra.edge.admin_guard import ChangelistGuard


class AuditAdmin(ChangelistGuard, admin.ModelAdmin):
    """A read-only ModelAdmin: view lists and details, never add, change or delete.

    (``ChangelistGuard``: a filter value that cannot be applied is a 400, not a 500.)"""

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


def _meta(model: type[Model] | str) -> Any:
    """A model class, or its ``"app_label.Model"`` name: a lower app can link to a higher
    app's rows in the audit desk without importing it."""
    return (apps.get_model(model) if isinstance(model, str) else model)._meta


def admin_list_link(model: type[Model] | str, label: str, **filters: Any) -> str:
    """A link to ``model``'s changelist filtered by ``filters`` (e.g. ``run__id__exact=…``)."""
    meta = _meta(model)
    query = "&".join(f"{k}={v}" for k, v in filters.items())
    return format_html(
        '<a href="{}?{}">{}</a>',
        reverse(f"admin:{meta.app_label}_{meta.model_name}_changelist"),
        query,
        label,
    )


def admin_pk_link(model: type[Model] | str, pk: Any, label: str) -> str:
    """A link to one row's admin page by primary key (no query for the related row)."""
    if pk is None:
        return "—"
    meta = _meta(model)
    return format_html(
        '<a href="{}">{}</a>',
        reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[pk]),
        label,
    )


def money(cents: int | None, currency: str = "USD") -> str:
    """Integer minor units as a person reads them, in their currency: ``3800`` -> ``$38.00``,
    ``4000`` JPY -> ``¥4,000`` (``deskhand.domain.desk.money.display_cents``)."""
    return "—" if cents is None else display_cents(int(cents), currency)


def spend(micros: int | None) -> str:
    """Model spend in dollars (micro-dollars kept to the last digit spent): ``$0.0123``."""
    return "—" if micros is None else format_micros(int(micros))


def full_id(model: type[Model] | str, pk: Any) -> str:
    """A link labelled with the whole id: ids are what an auditor copies, so never cut."""
    return admin_pk_link(model, pk, str(pk)) if pk is not None else "—"


def person(user: Any) -> str:
    """A user as a person reads them: full name and email, or the email alone."""
    if user is None:
        return "—"
    name = user.get_full_name() if hasattr(user, "get_full_name") else ""
    email = getattr(user, "email", "") or str(user)
    return f"{name} <{email}>" if name else email
