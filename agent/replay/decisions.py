"""What a model turn decided, and whether two turns decided the same thing.

A turn's decision is its tool calls: each tool's name and its *decisive* arguments —
amounts, order and ticket references, recipients, statuses — as the frozen registry
declares them (``ToolDef.wording`` names the rest: reasons, note and email bodies,
search words). Two turns that make the same calls with the same decisive arguments
decided the same; if only wording differs, that is a *soft* difference, reported
but not a divergence. A real model rewords every time, so comparing exact JSON
would call every replay a divergence.

A tool the registry does not know is compared on all its arguments; a refusal is a
decision of its own.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agent.conversation.live import tool_uses
from agent.tools import REGISTRY
from agent.tools.registry import canonical_json

SAME, SOFT, DIVERGED = "same", "soft", "diverged"


def _split(name: Any, args: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(decisive, wording) arguments of one call."""
    fields = args if isinstance(args, dict) else {}
    tool = REGISTRY.get(name) if isinstance(name, str) else None
    wording = set(tool.wording) if tool else set()
    return (
        {k: v for k, v in fields.items() if k not in wording},
        {k: v for k, v in fields.items() if k in wording},
    )


def decisions(content: list[dict[str, Any]], stop_reason: str) -> list[str]:
    """What a turn decided: one ``name({decisive args})`` per tool call, in order."""
    if stop_reason == "refusal":
        return ["(refused)"]
    return [
        f"{b.get('name')}({canonical_json(_split(b.get('name'), b.get('input'))[0])})"
        for b in tool_uses(content)
    ]


def full(content: list[dict[str, Any]], stop_reason: str) -> list[str]:
    """Every argument of every call, wording included."""
    if stop_reason == "refusal":
        return ["(refused)"]
    return [f"{b.get('name')}({canonical_json(b.get('input') or {})})" for b in tool_uses(content)]


@dataclasses.dataclass(frozen=True)
class Reworded:
    """A call whose wording changed: which tool, and which fields."""

    tool: str
    fields: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Comparison:
    outcome: str  # same | soft | diverged
    before: list[str]
    now: list[str]
    reworded: list[Reworded]


def compare(
    before: list[dict[str, Any]], before_stop: str, now: list[dict[str, Any]], now_stop: str
) -> Comparison:
    """Whether the reply ``now`` decided what the recorded reply ``before`` did."""
    decided_before, decided_now = decisions(before, before_stop), decisions(now, now_stop)
    if decided_before != decided_now:
        return Comparison(DIVERGED, decided_before, decided_now, [])
    reworded = []
    for old, new in zip(tool_uses(before), tool_uses(now), strict=False):
        old_words = _split(old.get("name"), old.get("input"))[1]
        new_words = _split(new.get("name"), new.get("input"))[1]
        changed = tuple(
            sorted(k for k in {*old_words, *new_words} if old_words.get(k) != new_words.get(k))
        )
        if changed:
            reworded.append(Reworded(str(old.get("name")), changed))
    return Comparison(SOFT if reworded else SAME, decided_before, decided_now, reworded)


def money_cents(content: list[dict[str, Any]]) -> int:
    """The money a turn's calls would move: each call's ``money_field`` (a refund's amount)."""
    total = 0
    for call in tool_uses(content):
        name, args = call.get("name"), call.get("input")
        tool = REGISTRY.get(name) if isinstance(name, str) else None
        if tool is None or not tool.money_field or not isinstance(args, dict):
            continue
        amount = args.get(tool.money_field)
        if isinstance(amount, int) and not isinstance(amount, bool) and amount > 0:
            total += amount
    return total
