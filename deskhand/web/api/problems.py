"""Every refusal as ``application/problem+json`` (RFC 9457): a type, a title, the status, one
sentence of detail, and the field at fault when there is one.

Types are URNs (``urn:deskhand:problem:<name>``): stable names a client can switch on,
listed in docs/api.md, that point at no host that might go away.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from django.http import HttpRequest, HttpResponse

CONTENT_TYPE = "application/problem+json"


def type_uri(name: str) -> str:
    return f"urn:deskhand:problem:{name}"


class Problem(Exception):
    """Raised anywhere under an operation; the API's handler answers with it."""

    def __init__(
        self,
        status: int,
        name: str,
        detail: str,
        *,
        field: str = "",
        headers: dict[str, str] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.name = name
        self.detail = detail
        self.field = field
        self.headers = headers or {}
        self.extra = extra or {}

    def body(self, instance: str = "") -> dict[str, Any]:
        data: dict[str, Any] = {
            "type": type_uri(self.name),
            "title": HTTPStatus(self.status).phrase,
            "status": self.status,
            "detail": self.detail,
        }
        if instance:
            data["instance"] = instance[:500]
        if self.field:
            data["field"] = self.field
        data.update(self.extra)
        return data


def problem_response(request: HttpRequest | None, problem: Problem) -> HttpResponse:
    instance = request.path if request is not None else ""
    response = HttpResponse(
        json.dumps(problem.body(instance)), status=problem.status, content_type=CONTENT_TYPE
    )
    for name, value in problem.headers.items():
        response[name] = value
    return response


def not_found(what: str = "") -> Problem:
    thing = what or "that"
    return Problem(
        404, "not-found", f"There is no {thing} here, or it belongs to another merchant."
    )
