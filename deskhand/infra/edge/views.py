"""``handler500``: what no view caught. A database outage there is a 503 too."""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse
from django.views.defaults import server_error as django_server_error

from deskhand.infra.edge.errors import is_database_unavailable
from deskhand.infra.edge.pages import database_unavailable


def server_error(request: HttpRequest) -> HttpResponse:
    # Called inside Django's ``except`` block: the exception is the one being handled.
    if is_database_unavailable(sys.exc_info()[1]):
        return database_unavailable()
    return django_server_error(request)
