"""The edge's answers: a page with one sentence, for people and for htmx alike."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string

TITLES = {400: "Not accepted", 429: "Too many attempts", 503: "Not available right now"}


def refused(request: HttpRequest, status: int, message: str) -> HttpResponse:
    """The console's refusal page (``console/refused.html``) with ``message``; under the JSON
    API (``/api/``), the same sentence as an RFC 9457 problem, as every API refusal is."""
    if request.path.startswith("/api/"):
        problem = {
            "type": "urn:deskhand:problem:malformed" if status == 400 else "about:blank",
            "title": TITLES.get(status, "Refused"),
            "status": status,
            "detail": message,
        }
        return HttpResponse(
            json.dumps(problem), status=status, content_type="application/problem+json"
        )
    return render(
        request,
        "console/refused.html",
        {"status": status, "title": TITLES.get(status, "Refused"), "message": message},
        status=status,
    )


DATABASE_DOWN = (
    "The database is not reachable right now (it may be restarting), so nothing was read "
    "or changed; try again in a moment."
)


def database_unavailable() -> HttpResponse:
    """503 without touching the database: a standalone page, no session, no user."""
    response = HttpResponse(render_to_string("503.html", {"message": DATABASE_DOWN}), status=503)
    response["Retry-After"] = "5"
    return response
