"""Top-level URLs: sign-in, the console, the audit desk (admin), inbound mail, the JSON API,
static files.

Static files are served by Django itself (``staticfiles``' finder view) so the
ASGI process alone — ``python manage.py web`` — is a
complete web server for the demo; behind a real proxy, serve ``collectstatic``
output from the proxy instead and drop the route.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from django.contrib import admin
from django.contrib.auth.views import LogoutView
from django.contrib.staticfiles import finders
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import include, path, re_path
from django.views.decorators.http import require_http_methods, require_safe

from deskhand.infra.edge.throttle import throttled
from deskhand.web.api.urls import unknown as api_unknown
from deskhand.web.console import passwords, team_views
from deskhand.web.console.auth import login_view
from deskhand.web.console.health import healthz


@require_safe
def static_file(request: HttpRequest, path: str) -> HttpResponse:
    """A static file by its finder path (whole-body response: no sync iterator under ASGI)."""
    found = finders.find(path.lstrip("/"))
    if not found or not Path(found).is_file():
        raise Http404("no such static file")
    content_type = mimetypes.guess_type(found)[0] or "application/octet-stream"
    response = HttpResponse(Path(found).read_bytes(), content_type=content_type)
    response["Cache-Control"] = "public, max-age=300"
    return response


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("accounts/login/", login_view, name="login"),
    path("accounts/logout/", LogoutView.as_view(), name="logout"),
    path("accounts/password/", passwords.password_change, name="password_change"),
    path("accounts/password/done/", passwords.password_change_done, name="password_change_done"),
    path("accounts/password/reset/", passwords.password_reset, name="password_reset"),
    path(
        "accounts/password/reset/sent/", passwords.password_reset_done, name="password_reset_done"
    ),
    path(
        "accounts/password/reset/<uidb64>/<token>/",
        passwords.password_reset_confirm,
        name="password_reset_confirm",
    ),
    path(
        "accounts/password/reset/done/",
        passwords.password_reset_complete,
        name="password_reset_complete",
    ),
    # An invitation's link (approvals.team): public, the token is the credential.
    path("invitations/<str:token>/", team_views.invitation, name="invitation"),
    # The admin's own sign-in, behind the same shared throttle as the console's.
    path(
        "admin/login/", require_http_methods(["GET", "HEAD", "POST"])(throttled(admin.site.login))
    ),
    path("admin/", admin.site.urls),
    re_path(r"^static/(?P<path>.+)$", static_file),
    # Mail services' inbound webhooks (signed; CSRF-exempt like any webhook).
    path("inbound/", include("deskhand.web.inbound.urls")),
    # The JSON API (docs/api.md): bearer keys, not sessions; problems, not pages.
    path("api/v1/", include("deskhand.web.api.urls")),
    path("api/v1", api_unknown),  # not redirected to the slash: a problem, like every API path
    path("", include("deskhand.web.console.urls")),
]

handler500 = "deskhand.infra.edge.views.server_error"
