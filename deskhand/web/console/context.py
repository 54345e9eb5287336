"""What every console page shows in its navigation (how many things wait for a person) and
the merchant's time zone its times are told in (``words.moment``)."""

from __future__ import annotations

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from deskhand.web.console.attention import attention_counts


def attention(request: HttpRequest) -> dict[str, object]:
    """The attention counters, for a page rendered under a merchant membership (else none)."""
    membership = getattr(request, "membership", None)
    if membership is None:
        return {}
    # Lazy: an htmx partial that never shows the navigation costs no query.
    return {
        "attention": SimpleLazyObject(lambda: attention_counts(merchant_id=membership.merchant_id)),
        "zone": SimpleLazyObject(lambda: membership.merchant.timezone),
    }
