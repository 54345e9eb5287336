"""Template filters for the console's words (``deskhand.console.words``): ``{{ run.stop_reason|stop_words }}``."""

from __future__ import annotations

from django import template

from deskhand.console import words
from deskhand.desk.money import display_cents

register = template.Library()


@register.filter
def stop_words(code: str | None) -> str:
    return words.stop_reason(code)


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
    whole, fraction = divmod(amount, 100)
    return f"{whole}.{fraction:02d}"
