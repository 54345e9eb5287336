"""Answers at the edge, before and after the views.

``content_length`` (the outermost middleware): every whole-body answer leaves with
a ``Content-Length`` computed from the body it actually carries. Django's
``CommonMiddleware`` computes it deep inside the stack; any middleware outside it
that writes a body afterwards (as the 405 sentence below once did) left the old
value behind, and uvicorn, seeing more bytes than declared, aborted the answer and
dropped the connection (LESSONS #40). Computed last, the header cannot go stale.

``refuse_malformed``: a path with a control character (a NUL byte above all:
Postgres text cannot hold one) or a query with one names nothing here. It is
answered 400 with a sentence before any view, form or query sees it.

It also gives Django's bare 405 (a GET to a POST-only action) its sentence, as a
new response rather than by editing the one it was handed.

``DatabaseUnavailableMiddleware``: a view that finds the database down or
restarting (``OperationalError`` / ``InterfaceError``) is answered 503 with a
page that needs no database, not a 500 with a traceback in the log.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable

from asgiref.sync import iscoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import sync_and_async_middleware
from django.utils.deprecation import MiddlewareMixin

from deskhand.infra.edge.errors import is_database_unavailable
from deskhand.infra.edge.pages import database_unavailable, refused

log = logging.getLogger(__name__)

_PATH_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Tab, newline and carriage return may be typed into a search box; nothing else may.
_QUERY_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def malformed(request: HttpRequest) -> str | None:
    """The sentence that refuses ``request``, or None when its path and query are clean."""
    if _PATH_CONTROL.search(request.path_info):
        return "The address contains a control character (such as a NUL byte), so it names nothing here."
    for key, values in request.GET.lists():
        if _QUERY_CONTROL.search(key) or any(_QUERY_CONTROL.search(v) for v in values):
            return "A query parameter contains a control character (such as a NUL byte); remove it and try again."
    return None


def _explain_405(response: HttpResponse) -> HttpResponse:
    """Django's empty 405, answered again with a sentence (and the same headers)."""
    if response.status_code != 405 or response.streaming or response.content:
        return response
    allowed = response.get("Allow", "POST")
    explained = HttpResponse(
        f"This address does not take that method; it takes {allowed}.\n",
        status=405,
        content_type="text/plain; charset=utf-8",
    )
    for name, value in response.items():
        if name.lower() not in ("content-type", "content-length"):
            explained[name] = value
    explained.cookies = response.cookies
    explained["Content-Length"] = str(len(explained.content))
    return explained


def _with_length(response: HttpResponse) -> HttpResponse:
    if not response.streaming:
        response["Content-Length"] = str(len(response.content))
    return response


@sync_and_async_middleware
def content_length(
    get_response: Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]],
) -> Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]:
    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponse:
            return _with_length(await get_response(request))

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponse:
        return _with_length(get_response(request))  # type: ignore[arg-type]

    return middleware


@sync_and_async_middleware
def refuse_malformed(
    get_response: Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]],
) -> Callable[[HttpRequest], HttpResponse | Awaitable[HttpResponse]]:
    if iscoroutinefunction(get_response):

        async def async_middleware(request: HttpRequest) -> HttpResponse:
            sentence = malformed(request)
            if sentence is not None:
                return await sync_to_async(refused)(request, 400, sentence)
            return _explain_405(await get_response(request))

        return async_middleware

    def middleware(request: HttpRequest) -> HttpResponse:
        sentence = malformed(request)
        if sentence is not None:
            return refused(request, 400, sentence)
        return _explain_405(get_response(request))  # type: ignore[arg-type]

    return middleware


class DatabaseUnavailableMiddleware(MiddlewareMixin):
    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_database_unavailable(exception):
            return None
        log.warning(
            "database unavailable during %s %s: %s",
            request.method,
            request.path,
            " ".join(str(exception).split())[:200],
        )
        return database_unavailable()
