"""What a redaction writes is what the database guard accepts as one, for any JSON at all."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.privacy.redaction import ERASED, REDACTED, redact_json

# What a jsonb column can hold: no NUL (the step log replaces it) and no lone surrogates.
TEXT = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=20)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | TEXT,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from(
                ["reason", "amount_cents", "order_reference", "body", "withdrawn", "x"]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


def guard_accepts(old: object, new: object) -> bool:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT deskhand_redacts(%s::jsonb, %s::jsonb)", [json.dumps(old), json.dumps(new)]
        )
        return bool(cur.fetchone()[0])


@pytest.mark.django_db
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=JSON, marker=st.sampled_from([ERASED, REDACTED]))
def test_every_redaction_is_one_the_guard_accepts_and_redacting_twice_changes_nothing(
    value, marker
):
    once = redact_json(value, marker)
    assert guard_accepts(value, once)
    assert redact_json(once, marker) == once


@pytest.mark.django_db
def test_the_facts_stay_and_the_words_go():
    detail = {
        "approval": "7d0c…",
        "amount_cents": 3800,
        "order_reference": "NW-1042",
        "reason": "Dana's beans were stale",
        "withdrawn": ["a1", "b2"],
        "tags": ["dana"],
        "ok": True,
    }
    assert redact_json(detail, ERASED) == {
        "approval": "7d0c…",
        "amount_cents": 3800,
        "order_reference": "NW-1042",
        "reason": ERASED,
        "withdrawn": ["a1", "b2"],
        "tags": [ERASED],
        "ok": True,
    }
    assert not guard_accepts(detail, {**detail, "amount_cents": 1})
    assert not guard_accepts(detail, {**detail, "reason": "other words"})
    assert not guard_accepts(detail, {k: v for k, v in detail.items() if k != "tags"})
