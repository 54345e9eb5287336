"""Template filters for the console's words (``deskhand.web.console.words``): ``{{ run.stop_reason|stop_words }}``."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django import template

from deskhand.domain.desk.money import display_cents, typed_units
from deskhand.web.console import words

register = template.Library()


@register.filter
def stop_words(code: str | None) -> str:
    return words.stop_reason(code)


@register.filter
def run_status_words(code: str | None) -> str:
    return words.run_status(code)


@register.filter
def moment_words(value: dt.datetime | None, zone: str = "UTC") -> str:
    """``{{ run.waiting_until|moment_words:merchant.timezone }}``: "Thu 10 Dec 2026, 15:06 EST"."""
    return words.moment(value, zone)


@register.filter
def audit_words(event: Any) -> str:
    """An audit event as a sentence: "The system started the run"; the codes go in a title."""
    return words.audit_line(event.action, event.actor_label, event.channel)


@register.filter
def tool_words(code: str | None) -> str:
    return words.tool(code)


@register.filter
def arg_words(code: str) -> str:
    return words.argument(str(code))


@register.filter
def duration_words(seconds: int | float | None) -> str:
    return words.duration(seconds)


@register.filter
def cents_words(amount: int | None) -> str:
    """Integer cents as the merchant reads them (``1500`` -> ``$15.00``)."""
    if isinstance(amount, bool) or not isinstance(amount, int):
        return "—"
    return display_cents(amount)


@register.filter
def in_units(amount: int | None) -> str:
    """Integer cents as a person types them in a form (``1500`` -> ``15.00``); blank if none."""
    if isinstance(amount, bool) or not isinstance(amount, int):
        return ""
    return typed_units(amount)
