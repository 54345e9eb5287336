"""Admin changelists: a filter value that cannot be applied is a 400 with a sentence.

Django's changelist turns some bad lookups into a redirect to ``?e=1`` and lets
others escape as a 500: a ``created_at__year`` of 0 or 10**40 fails while the
date range is built (``ValueError`` / ``OverflowError``), a value Postgres
refuses fails as a ``DataError``. Building the changelist inside a savepoint
and catching those answers every one of them the same way.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import ValidationError
from django.db import DataError, transaction
from django.http import HttpRequest, HttpResponse

from deskhand.infra.edge.pages import refused

BAD_FILTER = (
    "A filter in this address cannot be applied to this list (a date out of range, or a "
    "malformed id or number); remove it and try again."
)


class BadFilter(Exception):
    pass


class ChangelistGuard(admin.ModelAdmin):
    def get_changelist_instance(self, request: HttpRequest) -> Any:
        try:
            with transaction.atomic():  # a refused query must not poison the request's connection
                return super().get_changelist_instance(request)
        except (
            IncorrectLookupParameters,
            ValidationError,
            ValueError,
            OverflowError,
            DataError,
        ) as exc:
            raise BadFilter(str(exc)) from exc

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        try:
            return super().changelist_view(request, extra_context)
        except BadFilter:
            return refused(request, 400, BAD_FILTER)
