"""The audit desk's admin site: Django's, answering only the methods a browser's admin uses.

Django's admin views treat any method that is not POST as a GET: a PUT, PATCH or
DELETE to a changelist or a change page got the page back with a 200, which reads
as "done" to any client that sent a write. Every admin view here takes GET, HEAD
and POST; anything else is a 405 naming them, before the sign-in check, as the
console's views answer it (``tests/edge/test_real_server.py`` pins both).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from django.contrib import admin
from django.contrib.admin.apps import AdminConfig
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods

ADMIN_METHODS = ["GET", "HEAD", "POST"]
View = TypeVar("View", bound=Callable[..., Any])


class AuditSite(admin.AdminSite):
    site_header = "Deskhand audit desk"
    site_title = "Deskhand audit"
    index_title = "Read-only audit trail (every merchant)"

    def admin_view(self, view: View, cacheable: bool = False) -> View:
        return cast(View, require_http_methods(ADMIN_METHODS)(super().admin_view(view, cacheable)))

    def login(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """As Django's, with HEAD answered as GET (Django redirects a signed-in GET only)."""
        if request.method == "HEAD" and self.has_permission(request):
            return HttpResponseRedirect(reverse("admin:index", current_app=self.name))
        return super().login(request, extra_context)


class AuditAdminConfig(AdminConfig):
    """``django.contrib.admin`` with ``AuditSite`` as ``admin.site``."""

    default_site = "deskhand.admin_site.AuditSite"
