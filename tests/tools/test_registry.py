"""The registry is the only source of a tool's risk class, and it cannot be edited."""

from __future__ import annotations

import dataclasses

import jsonschema
import pytest

from agent.tools import REGISTRY, Risk, api_schemas, args_hash, get_tool
from agent.tools.registry import (
    FORBIDDEN_SCHEMA_KEYWORDS,
    ToolDef,
    ToolError,
    ToolOutcome,
    build_registry,
)

EXPECTED = {
    "search_kb": Risk.READ,
    "get_ticket": Risk.READ,
    "get_order": Risk.READ,
    "get_customer": Risk.READ,
    "list_refunds": Risk.READ,
    "tag_ticket": Risk.REVERSIBLE,
    "set_priority": Risk.REVERSIBLE,
    "set_ticket_status": Risk.REVERSIBLE,
    "assign_ticket": Risk.REVERSIBLE,
    "add_internal_note": Risk.REVERSIBLE,
    "issue_refund": Risk.IRREVERSIBLE,
    "send_customer_email": Risk.IRREVERSIBLE,
    "reply_to_customer": Risk.IRREVERSIBLE,
    "ask_customer": Risk.IRREVERSIBLE,
    "cancel_order": Risk.IRREVERSIBLE,
}


def _keys(schema: object) -> set[str]:
    if isinstance(schema, dict):
        return set(schema) | {k for v in schema.values() for k in _keys(v)}
    if isinstance(schema, list):
        return {k for v in schema for k in _keys(v)}
    return set()


def test_every_tool_has_the_risk_class_it_was_designed_with():
    assert {name: tool.risk for name, tool in REGISTRY.items()} == EXPECTED


def test_a_tools_risk_class_cannot_be_reassigned():
    refund = REGISTRY["issue_refund"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        refund.risk = Risk.READ  # type: ignore[misc]
    with pytest.raises(TypeError):
        REGISTRY["issue_refund"] = dataclasses.replace(refund, risk=Risk.READ)  # type: ignore[index]
    with pytest.raises(TypeError):
        del REGISTRY["issue_refund"]  # type: ignore[attr-defined]
    assert get_tool("issue_refund").risk is Risk.IRREVERSIBLE


def test_every_schema_is_accepted_in_strict_mode():
    schemas = api_schemas()
    assert [s["name"] for s in schemas] == sorted(EXPECTED)
    assert schemas == api_schemas()  # byte-stable, so the prompt cache stays warm
    for s in schemas:
        schema = s["input_schema"]
        assert s["strict"] is True
        assert s["description"].strip()
        assert schema["type"] == "object"
        assert schema["additionalProperties"] is False
        assert sorted(schema["required"]) == sorted(schema["properties"])
        assert not _keys(schema) & FORBIDDEN_SCHEMA_KEYWORDS, s["name"]
        jsonschema.Draft202012Validator.check_schema(schema)


def test_the_registry_refuses_a_schema_strict_mode_would_reject():
    def noop(ctx, args):
        return ToolOutcome(text="{}")

    bad = ToolDef(
        name="bad",
        description="x",
        risk=Risk.READ,
        input_schema={
            "type": "object",
            "additionalProperties": False,
            "properties": {"n": {"type": "integer", "minimum": 1}},
            "required": ["n"],
        },
        handler=noop,
    )
    with pytest.raises(ValueError, match="minimum"):
        build_registry([bad])
    unpreviewed = dataclasses.replace(REGISTRY["cancel_order"], name="cancel_quietly", preview=None)
    with pytest.raises(ValueError, match="preview"):
        build_registry([unpreviewed])


def test_irreversible_tools_are_exactly_those_that_touch_the_world():
    assert {n for n, t in REGISTRY.items() if t.risk is Risk.IRREVERSIBLE} == {
        "issue_refund",
        "send_customer_email",
        "reply_to_customer",
        "ask_customer",
        "cancel_order",
    }
    assert all(t.preview is not None for t in REGISTRY.values() if t.risk is Risk.IRREVERSIBLE)


def test_unknown_tool_names_are_rejected_not_guessed():
    with pytest.raises(ToolError, match="no such tool"):
        get_tool("issue_refund_but_bigger")


@pytest.mark.parametrize(
    ("tool", "args", "fragment"),
    [
        ("search_kb", {"query": "refund", "limit": 99}, "Additional properties"),
        ("search_kb", {}, "'query' is a required property"),
        (
            "issue_refund",
            {"order_reference": "NW-1042", "amount_cents": "nineteen", "reason": "stale"},
            "amount_cents",
        ),
        (
            "issue_refund",
            {"order_reference": "NW-1042", "amount_cents": 0, "reason": "stale"},
            "amount_cents must be 1 or more",
        ),
        (
            "issue_refund",
            {"order_reference": "NW-1042", "amount_cents": 1900.0, "reason": "stale"},
            "whole number",
        ),
        (
            "issue_refund",
            {"order_reference": "NW-1042", "amount_cents": True, "reason": "stale"},
            "amount_cents",
        ),
        (
            "issue_refund",
            {"order_reference": "NW-1042", "amount_cents": 1900, "reason": "  ok  "},
            "reason must be 3 to 500",
        ),
        ("list_refunds", {"since_days": 0}, "since_days must be 1 to 365"),
        ("list_refunds", {"since_days": 366}, "since_days must be 1 to 365"),
        ("tag_ticket", {"reference": "NW-1", "tags": []}, "tags must have 1 to 8 items"),
        (
            "tag_ticket",
            {"reference": "NW-1", "tags": [f"t{i}" for i in range(9)]},
            "tags must have 1 to 8 items",
        ),
        ("tag_ticket", {"reference": "NW-1", "tags": ["  "]}, "each tag"),
        ("tag_ticket", {"reference": "NW-1", "tags": [7]}, "tags/0"),
        ("set_priority", {"reference": "NW-1", "priority": "critical"}, "priority"),
        ("set_ticket_status", {"reference": "NW-1", "status": "closed"}, "status"),
        ("add_internal_note", {"reference": "NW-1", "body": ""}, "body must be 1 to 4000"),
        ("add_internal_note", {"reference": "NW-1", "body": "x" * 4001}, "body must be 1 to 4000"),
        (
            "send_customer_email",
            {"reference": "NW-1", "subject": "Hi", "body": "long enough body"},
            "subject must be 3 to 200",
        ),
        (
            "send_customer_email",
            {"reference": "NW-1", "subject": "Hello", "body": "short"},
            "body must be 10 to 4000",
        ),
        ("cancel_order", {"order_reference": "LU-2311", "reason": "no"}, "reason must be 3 to 500"),
    ],
)
def test_bad_arguments_become_a_tool_error(tool, args, fragment):
    with pytest.raises(ToolError, match=f"invalid arguments for {tool}") as info:
        REGISTRY[tool].validate(args)
    assert fragment in str(info.value)


def test_good_arguments_pass_validation_unchanged():
    args = {"order_reference": "NW-1042", "amount_cents": 3800, "reason": "Stale beans."}
    assert REGISTRY["issue_refund"].validate(dict(args)) == args


def test_previews_are_rendered_from_the_arguments_and_the_orders_currency_alone():
    refund = REGISTRY["issue_refund"].preview
    email = REGISTRY["send_customer_email"].preview
    cancel = REGISTRY["cancel_order"].preview
    assert refund is not None and email is not None and cancel is not None
    assert (
        refund({"order_reference": "NW-1042", "amount_cents": 3800, "reason": "Stale beans"}, "USD")
        == "Refund 38.00 USD against order NW-1042 — Stale beans"
    )
    # A yen has no minor unit and a Kuwaiti dinar three: the amount is never read as cents of a dollar.
    assert refund({"order_reference": "X-1", "amount_cents": 4000, "reason": "r"}, "JPY") == (
        "Refund 4000 JPY against order X-1 — r"
    )
    assert refund({"order_reference": "X-1", "amount_cents": 4000, "reason": "r"}, "KWD") == (
        "Refund 4.000 KWD against order X-1 — r"
    )
    assert (
        email(
            {
                "reference": "NW-1",
                "subject": "Your refund",
                "body": "We refunded 38.00 USD.\nSorry!",
            },
            "USD",
        )
        == "Email the customer on NW-1 — subject: 'Your refund'\n\nWe refunded 38.00 USD.\nSorry!"
    )
    assert (
        cancel({"order_reference": "LU-2311", "reason": "Duplicate charge"}, "USD")
        == "Cancel order LU-2311 — Duplicate charge"
    )


def test_args_hash_ignores_key_order_but_not_values_or_tools():
    a = args_hash(
        "issue_refund", {"order_reference": "NW-1042", "amount_cents": 1900, "reason": "r"}
    )
    b = args_hash(
        "issue_refund", {"reason": "r", "amount_cents": 1900, "order_reference": "NW-1042"}
    )
    c = args_hash(
        "issue_refund", {"order_reference": "NW-1042", "amount_cents": 190000, "reason": "r"}
    )
    d = args_hash(
        "cancel_order", {"order_reference": "NW-1042", "amount_cents": 1900, "reason": "r"}
    )
    assert a == b
    assert len({a, c, d}) == 3


def test_an_irreversible_tools_wording_is_exactly_what_its_identity_leaves_out():
    """What ``replay --diverge`` treats as wording (a soft difference) and what the ledger
    treats as the effect's identity are one declaration, checked at import."""
    for tool in REGISTRY.values():
        if tool.risk is Risk.IRREVERSIBLE:
            fields = set(tool.input_schema["properties"])
            assert set(tool.wording) == fields - set(tool.identity), tool.name
    assert REGISTRY["issue_refund"].wording == ("reason",)
    amount_is_wording = dataclasses.replace(
        REGISTRY["issue_refund"], name="refund_loosely", wording=("reason", "amount_cents")
    )
    with pytest.raises(ValueError, match="non-identity fields"):
        build_registry([amount_is_wording])
    unknown = dataclasses.replace(REGISTRY["add_internal_note"], name="note2", wording=("nope",))
    with pytest.raises(ValueError, match="wording names fields it does not take"):
        build_registry([unknown])


def test_decisions_compare_decisive_arguments_and_report_wording_as_soft():
    from agent.replay.decisions import DIVERGED, SAME, SOFT, compare

    def refund(amount: int, reason: str) -> list[dict]:
        args = {"order_reference": "NW-1042", "amount_cents": amount, "reason": reason}
        return [{"type": "tool_use", "id": "toolu_x", "name": "issue_refund", "input": args}]

    assert (
        compare(refund(3800, "stale"), "tool_use", refund(3800, "stale"), "tool_use").outcome
        == SAME
    )
    soft = compare(refund(3800, "stale"), "tool_use", refund(3800, "old beans"), "tool_use")
    assert soft.outcome == SOFT and [(r.tool, r.fields) for r in soft.reworded] == [
        ("issue_refund", ("reason",))
    ]
    assert compare(refund(3800, "x"), "tool_use", refund(1900, "x"), "tool_use").outcome == DIVERGED
    # A tool the registry does not know is compared on every argument.
    odd = [{"type": "tool_use", "id": "t", "name": "made_up", "input": {"reason": "a"}}]
    other = [{"type": "tool_use", "id": "u", "name": "made_up", "input": {"reason": "b"}}]
    assert compare(odd, "tool_use", other, "tool_use").outcome == DIVERGED
    assert compare(refund(3800, "x"), "refusal", refund(3800, "x"), "tool_use").outcome == DIVERGED
