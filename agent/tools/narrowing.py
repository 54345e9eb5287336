"""Approve with changes: a person approves a *narrower* call than the model proposed.

A support lead who wants to refund 20.00 of a proposed 48.00, or to fix a word
in an email, should not have to deny and wait for the model to try again. The
tool registry declares, per tool, which fields may change and how
(``ToolDef.narrowable``: a smaller amount, an edited body); everything else —
the tool, the order, the ticket and so the recipient — is approved exactly as
proposed or not at all.

``narrowed_arguments`` is the one rule, used twice: when the decision is
recorded (the console and the CLI, through ``approval_approve_with_changes``),
and again by ``execute_irreversible`` just before the effect, so an approved
row that somehow holds a wider call (a bug, a hand-edited row) is still refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agent.tools import ToolError, args_hash, get_tool
from agent.tools.registry import Narrowing, ToolDef
from approvals.models import Approval
from approvals.services import approval_decide
from deskhand.domain.desk.money import format_cents


class NarrowingRefused(Exception):
    """These changes are not a narrowing of the proposed call; the message is one sentence."""


def _value(tool: ToolDef, field: str, value: Any, currency: str) -> str:
    if field == tool.money_field and isinstance(value, int) and not isinstance(value, bool):
        return format_cents(value, currency)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "…"


def narrowed_arguments(
    tool_name: str, proposed: Mapping[str, Any], changes: Mapping[str, Any], currency: str = "USD"
) -> dict[str, Any]:
    """``proposed`` with ``changes`` applied, if each change narrows the call; else refuse.

    A change equal to the proposed value is no change. A field the registry does not
    declare narrowable must stay as proposed; a declared one must narrow in its own way.
    The result must also pass the tool's own validation (an edited body still 10 to
    4000 characters).
    """
    try:
        tool = get_tool(tool_name)
    except ToolError as exc:
        raise NarrowingRefused(str(exc)) from None
    fields = set(tool.input_schema.get("properties", {}))
    allowed = tool.narrowing()
    approved = dict(proposed)
    for field, value in changes.items():
        if field not in fields:
            raise NarrowingRefused(f"{tool.name} has no argument {field!r}.")
        old = proposed.get(field)
        if value == old and type(value) is type(old):
            continue
        how = allowed.get(field)
        if how is None:
            may = (
                f"a person may change only {', '.join(sorted(allowed))}"
                if allowed
                else "its arguments are approved as proposed or not at all"
            )
            raise NarrowingRefused(
                f"{field} of {tool.name} cannot be changed when approving ({may}); "
                "deny it with a reason to ask for something else."
            )
        if how is Narrowing.AT_MOST:
            if isinstance(value, bool) or not isinstance(value, int):
                raise NarrowingRefused(f"{field} must be a whole number, not {value!r}.")
            if isinstance(old, int) and value > old:
                raise NarrowingRefused(
                    f"approving {_value(tool, field, value, currency)} is more than the "
                    f"{_value(tool, field, old, currency)} proposed: a person may only approve less."
                )
            if value < 1:
                raise NarrowingRefused(
                    f"{field} must be at least {_value(tool, field, 1, currency)}."
                )
        elif how is Narrowing.REWORD:
            if not isinstance(value, str) or not value.strip():
                raise NarrowingRefused(f"the edited {field} must be some text.")
            value = value.replace("\r\n", "\n").strip()
        approved[field] = value
    try:
        return tool.validate(approved)
    except ToolError as exc:
        raise NarrowingRefused(str(exc)) from None


def changes_from_form(tool_name: str, raw: Mapping[str, str]) -> dict[str, Any]:
    """Form text (``change-<field>`` inputs, prefix removed) as typed tool arguments.

    Integers must be plain whole numbers; every other field stays text. An unknown
    field is refused here, before ``narrowed_arguments`` judges the values.
    """
    try:
        tool = get_tool(tool_name)
    except ToolError as exc:
        raise NarrowingRefused(str(exc)) from None
    props = tool.input_schema.get("properties", {})
    out: dict[str, Any] = {}
    for field, text in raw.items():
        spec = props.get(field)
        if spec is None:
            raise NarrowingRefused(f"{tool.name} has no argument {field!r}.")
        if spec.get("type") == "integer":
            value = text.strip()
            digits = value[1:] if value.startswith("-") else value
            if not (digits.isascii() and digits.isdigit()) or len(digits) > 15:
                raise NarrowingRefused(f"{field} must be a whole number, not {text[:40]!r}.")
            out[field] = int(value)
        else:
            out[field] = text
    return out


def changes_text(
    tool_name: str, proposed: Mapping[str, Any], approved: Mapping[str, Any], currency: str = "USD"
) -> str:
    """What a person changed, in words: "amount_cents from 48.00 USD to 20.00 USD; body
    edited" (money in the order's ``currency``)."""
    try:
        tool = get_tool(tool_name)
    except ToolError:
        return ""
    out = []
    for field in sorted(set(proposed) | set(approved)):
        old, new = proposed.get(field), approved.get(field)
        if old == new:
            continue
        if tool.narrowing().get(field) is Narrowing.REWORD:
            out.append(f"{field} edited")
        else:
            was, now = _value(tool, field, old, currency), _value(tool, field, new, currency)
            out.append(f"{field} from {was} to {now}")
    return "; ".join(out)


def approval_approve_with_changes(
    *,
    approval: Approval,
    user: Any,
    changes: Mapping[str, Any],
    reason: str = "",
    channel: str,
    tool: str | None = None,
) -> Approval:
    """Approve ``approval`` with ``changes`` narrowing it (``NarrowingRefused`` if they do not).

    ``tool``, when given (a form posts it), must be the approval's own tool: a
    decision never turns one tool into another. No changes at all is a plain approval.
    """
    if tool is not None and tool != approval.tool:
        raise NarrowingRefused(
            f"approval {approval.id} is for {approval.tool}; a decision cannot turn it into {tool}."
        )
    proposed = approval.arguments if isinstance(approval.arguments, dict) else {}
    approved = narrowed_arguments(approval.tool, proposed, changes, approval.currency)
    return approval_decide(
        approval=approval,
        user=user,
        approve=True,
        reason=reason,
        channel=channel,
        approved_arguments=approved,
        approved_hash=args_hash(approval.tool, approved),
    )


def approved_call(approval: Approval, call: Mapping[str, Any]) -> dict[str, Any]:
    """The call the run performs for ``call`` under ``approval``: its approved arguments.

    Re-checks that they narrow the proposal and that their recorded hash is theirs;
    raises ``NarrowingRefused`` otherwise (the effect is then not performed).
    """
    given = call.get("input")
    proposed: dict[str, Any] = given if isinstance(given, dict) else {}
    if approval.approved_arguments is None:
        return dict(call)
    approved = narrowed_arguments(
        call["name"], proposed, approval.approved_arguments, approval.currency
    )
    if args_hash(call["name"], approved) != approval.approved_hash:
        raise NarrowingRefused(
            f"approval {approval.id}'s approved arguments do not match their recorded hash."
        )
    return {**call, "input": approved}


def with_change_note(text: str, changed: str, approval: Approval) -> str:
    """The model's result for a call a person narrowed: what was done, and that a person changed it.

    The ledger keeps the handler's own result; only what the model reads (and the step
    row, which replay rebuilds the conversation from) carries the note.
    """
    if not changed:
        return text
    who = approval.decided_by.email if approval.decided_by else "a person"
    note = (
        f"A person ({who}) approved this call with changes: {changed}. What was done is what "
        "they approved, not what was proposed."
    )
    try:
        recorded = json.loads(text)
    except ValueError:
        recorded = None
    if isinstance(recorded, dict):
        return json.dumps({**recorded, "approved_with_changes": note}, sort_keys=True)
    return f"{note} {text}"
