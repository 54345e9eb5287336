"""Divergence: where a changed system prompt would have decided otherwise.

``diverge`` re-asks a provider turn by turn with another system prompt and compares
decisions — tool names and decisive arguments (``agent.replay.decisions``); a turn that
only words a reason or a body otherwise is a soft difference. After a matching turn it
continues with the *new* reply and the *recorded* results (ids mapped onto the new
reply's ids), so failures and denials are replayed as the original run saw them. It
stops at the first turn that decides otherwise: past that point there is no recorded
observation to feed back.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from agent.conversation import fence
from agent.conversation.live import tool_uses
from agent.conversation.untrusted import ids_used, reply_content
from agent.providers.base import Provider
from agent.replay.decisions import DIVERGED, SAME, SOFT, Reworded, compare, money_cents
from agent.replay.rebuild import rebuild
from agent.replay.timeline import Timeline
from agent.tools import api_schemas


@dataclasses.dataclass
class Divergence:
    seq: int | None  # the model step that decided otherwise; None: no divergence
    matched: int
    total: int
    original: list[str]
    now: list[str]
    now_text: str
    cost_micros: int
    input_tokens: int
    output_tokens: int
    calls: int = 0  # model calls the replay made
    # Turns that decided the same but worded it otherwise: (model step, tool, fields).
    soft: list[tuple[int, Reworded]] = dataclasses.field(default_factory=list)
    # At the divergent turn: the refunds (cents) the original proposed, and the reply.
    original_money: int = 0
    now_money: int = 0
    # The spend limit was reached before the replay could finish.
    out_of_budget: bool = False

    @property
    def diverged(self) -> bool:
        return self.seq is not None

    @property
    def outcome(self) -> str:
        if self.out_of_budget:
            return "incomplete"
        return DIVERGED if self.diverged else (SOFT if self.soft else SAME)

    @property
    def tool(self) -> str:
        """The original's decision where the two first differ: a tool, or ``(finish)``."""
        pairs = zip(self.original, self.now, strict=False)
        i = next(
            (k for k, (a, b) in enumerate(pairs) if a != b), min(len(self.original), len(self.now))
        )
        if i >= len(self.original):
            return "(finish)"
        return self.original[i].split("(", 1)[0] or "(finish)"

    @property
    def money_cents(self) -> int:
        """Refund cents that would have moved differently at the first divergent decision."""
        return abs(self.original_money - self.now_money)


def _rewrite(
    messages: list[dict[str, Any]], replies: dict[int, list[dict[str, Any]]], ids: dict[str, str]
) -> list[dict[str, Any]]:
    """The recorded messages with earlier assistant turns replaced by the new replies."""
    out = []
    for i, message in enumerate(messages):
        if i in replies:
            out.append({"role": "assistant", "content": copy.deepcopy(replies[i])})
            continue
        blocks = message.get("content")
        if message.get("role") == "user" and isinstance(blocks, list):
            blocks = [
                {**b, "tool_use_id": ids.get(str(b.get("tool_use_id")), b.get("tool_use_id"))}
                if isinstance(b, dict) and b.get("type") == "tool_result"
                else b
                for b in blocks
            ]
            out.append({**message, "content": copy.deepcopy(blocks)})
        else:
            out.append(copy.deepcopy(message))
    return out


def diverge(
    timeline: Timeline, provider: Provider, system: str, budget_micros: int | None = None
) -> Divergence:
    """Re-ask ``provider`` every recorded turn under ``system``; stop at the first other decision.

    Decisions are compared by ``agent.replay.decisions``: a turn that makes the same calls with the
    same decisive arguments but other wording is a soft difference, and the replay goes on
    with its reply. ``budget_micros``: stop before a call once that much has been spent.

    Reads nothing from the database and writes nothing: the timeline was loaded beforehand, and
    the provider is called directly, never through a step.
    """
    turns = rebuild(timeline).turns
    replies: dict[int, list[dict[str, Any]]] = {}
    ids: dict[str, str] = {}
    result = Divergence(None, 0, len(turns), [], [], "", 0, 0, 0)
    tools = api_schemas()
    for matched, turn in enumerate(turns):
        if budget_micros is not None and result.cost_micros >= budget_micros:
            result.out_of_budget = True
            return result
        messages = _rewrite(turn.messages, replies, ids)
        reply = provider.complete(system=system, messages=messages, tools=tools)
        # Untrusted as in a live run (agent.conversation.untrusted): its words are printed and sent back.
        content, _ = reply_content(reply.content, used=ids_used(messages), seq=turn.step.seq)
        reply = dataclasses.replace(reply, content=content)
        result.calls += 1
        result.input_tokens += reply.input_tokens
        result.output_tokens += reply.output_tokens
        result.cost_micros += reply.cost_micros
        found = compare(turn.content, turn.stop_reason, reply.content, reply.stop_reason)
        if found.outcome == DIVERGED:
            result.seq, result.matched = turn.step.seq, matched
            result.original, result.now, result.now_text = found.before, found.now, reply.text
            result.original_money = money_cents(turn.content)
            result.now_money = money_cents(reply.content)
            return result
        result.soft.extend((turn.step.seq, r) for r in found.reworded)
        if turn.assistant_index is not None:
            replies[turn.assistant_index] = reply.content
        for old, new in zip(turn.calls, tool_uses(reply.content), strict=False):
            if old.get("id") and new.get("id"):
                ids[old["id"]] = new["id"]
    result.matched = len(turns)
    return result


def custom_system_prompt(text: str, token: str) -> str:
    """A prompt from a file: its ``{opener}``, ``{closer}`` and ``{token}`` are filled like the real one."""
    return (
        text.replace("{opener}", fence.opener(token))
        .replace("{closer}", fence.closer(token))
        .replace("{token}", token)
    )
