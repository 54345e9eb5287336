"""Readers of stored rows written before a field or a rule existed: the one place they live.

DBOS history drains (a run started before the 0.2.0 baseline finishes on a worker of its
own version, docs/deploys.md), but step rows, ledger entries and recorded tool results stay
in the database for as long as retention keeps them, and replay, forks and the console read
them. What those older rows lack cannot be made up by a data migration (the system prompt a
call was sent before prompt versions were kept is not stored anywhere), so each reader of
an older shape is here, named for what the row lacks, and nowhere else.
"""

from __future__ import annotations

from typing import Any

from agent.conversation.live import prompt_sha256
from agent.conversation.prompts import system_prompt
from agent.models.ledger import LedgerEntry
from agent.tools import api_schemas

UNVERSIONED_SYSTEM = (
    "system: this run was recorded before prompt versions were kept, so its system "
    "prompt is not stored; today's (agent/conversation/prompts.py) is shown"
)


def fence_in_turn_unversioned(recorded_sha256: str, token: str) -> bool:
    """Where the fence token lives, for a model step recorded before prompt versions: such a
    step kept only the hash of the system prompt it was sent, which named the token when the
    token was in the system prompt."""
    return recorded_sha256 != prompt_sha256(system_prompt(token), api_schemas())


def answer_without_identity(entries: list[LedgerEntry], call: dict[str, Any]) -> LedgerEntry | None:
    """A ledger entry recorded before call identities: the same call id under other
    arguments ended the run (``agent.replay.timeline.Timeline.ledger_answer``)."""
    return next((e for e in entries if e.tool_call_id == call.get("id")), None)


def refunds_without_flight(found: int, total: str | None, days: Any) -> str:
    """A ``list_refunds`` result recorded before money in flight was told apart."""
    return f"Checked the customer's refunds of the last {days} days — {found}, {total} in all"
