"""Less to the model: email addresses and phone numbers in tool results, masked.

Why: every tool result is copied into the step log, DBOS's checkpoint of the
step, and every later model request of the run. A support agent can resolve a
ticket without the customer's full address or number — it knows whose ticket
it is, and the tools are scoped to that customer — so a result carries
``d***@e***.com`` and ``***-***-**88`` instead. What the model saw is what the
step row keeps, so the run page shows the same masked form.

A tool whose purpose needs an address in full declares the result fields that
carry it (``ToolDef.unmasked``, e.g. a staff member's address to assign the
ticket to, or the merchant's own knowledge base); everything else in its result
is masked. Masking is idempotent: a masked address is not an address any more.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from typing import Any

EMAIL = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}")
# A run of 7-15 digits with phone punctuation (spaces, dots, dashes, brackets) and an
# optional leading +, not glued to a word, a reference (NW-1042), a time or a longer number.
PHONE = re.compile(r"(?<![\w.+\-/*:])\+?[\d(][\d ().\-]{5,22}\d(?![\w\-/*:])")
# What a phone candidate must not be: a date, a date and an hour ("2026-03-10 14"), a decimal.
_NOT_PHONE = re.compile(r"^\d{4}-\d{2}-\d{2}|^\d{1,2}\.\d{1,2}\.\d{2,4}$|^\d+\.\d+$")


def mask_email(address: str) -> str:
    """``dana.whitfield@example.com`` → ``d***@e***.com``: enough to tell two apart, not to write."""
    local, _, domain = address.partition("@")
    labels = domain.split(".")
    return f"{local[:1]}***@{labels[0][:1]}***.{labels[-1]}"


def _phone(match: re.Match[str]) -> str:
    text = match.group(0)
    digits = sum(c.isdigit() for c in text)
    plain = text.isdigit()
    if not 7 <= digits <= 15 or _NOT_PHONE.match(text) or (plain and digits < 10):
        return text
    keep = digits - 2  # the last two digits stay, as on a card statement
    out = []
    for c in text:
        if c.isdigit() and keep > 0:
            out.append("*")
            keep -= 1
        else:
            out.append(c)
    return "".join(out)


def mask_text(text: str) -> str:
    """Every email address and phone number in ``text``, masked."""
    return PHONE.sub(_phone, EMAIL.sub(lambda m: mask_email(m.group(0)), text))


def _walk(value: Any, unmasked: Collection[str]) -> Any:
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, list):
        return [_walk(v, unmasked) for v in value]
    if isinstance(value, dict):
        return {k: v if k in unmasked else _walk(v, unmasked) for k, v in value.items()}
    return value


def mask_result(text: str, unmasked: Collection[str] = ()) -> str:
    """A tool result with its addresses and numbers masked, except under the ``unmasked`` keys.

    Results are one JSON object (``agent.tools.reads.outcome``); they stay one, with the
    same key order. Anything else (an error sentence) is masked as plain text.
    """
    try:
        data = json.loads(text)
    except ValueError:
        return mask_text(text)
    if not isinstance(data, dict | list):
        return mask_text(text)
    return json.dumps(_walk(data, unmasked), sort_keys=True)
