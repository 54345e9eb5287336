"""``/api/v1/``: the operations, the OpenAPI document (``openapi.json``) and its docs page.

Ninja's own 405 is plain text, and a path it does not know falls to the site's HTML 404:
both are answered here as problems, like every other refusal of the API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, URLResolver, path, re_path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

from deskhand.web.api import decisions, orders, runs, tickets, usage
from deskhand.web.api.core import api
from deskhand.web.api.helpdesk import helpdesk_webhook
from deskhand.web.api.problems import Problem, problem_response

api.add_router("", tickets.router)
api.add_router("", runs.router)
api.add_router("", decisions.router)
api.add_router("", usage.router)
api.add_router("", orders.router)


def _as_problems(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if response.status_code == 405 and not response.get("Content-Type", "").startswith(
            "application/problem"
        ):
            allowed = response.get("Allow", "")
            answer = problem_response(
                request,
                Problem(
                    405, "method-not-allowed", f"{request.method} is not taken here; use {allowed}."
                ),
            )
            answer["Allow"] = allowed
            return answer
        return response

    wrapper.csrf_exempt = True  # type: ignore[attr-defined]
    return wrapper


@csrf_exempt
def unknown(request: HttpRequest, rest: str = "") -> HttpResponse:
    return problem_response(
        request, Problem(404, "not-found", "There is no such API path; see /api/v1/docs.")
    )


def _patterns() -> list[URLPattern | URLResolver]:
    patterns, _app, _namespace = api.urls
    out: list[URLPattern | URLResolver] = []
    for p in patterns:
        if isinstance(p, URLPattern) and p.name == "api-root":
            # Ninja's root (which it reverses for the document's prefix) is an HTML 404.
            p.callback = unknown
        elif isinstance(p, URLPattern):
            if p.name in ("openapi-json", "openapi-view"):
                p.callback = require_safe(p.callback)  # documents: read, never posted to
            p.callback = _as_problems(p.callback)
        out.append(p)
    return out


app_name = "api-v1"
urlpatterns = [
    *_patterns(),
    path("helpdesk/<slug:merchant>/<slug:source>", helpdesk_webhook, name="helpdesk"),
    re_path(r"^(?P<rest>.*)$", unknown),
]
