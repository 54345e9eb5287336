"""A model's reply is untrusted input: made safe to store and to send back, at the model step.

Whatever a provider returns passes through ``reply_content`` inside the model step,
before the step row, the checkpoint, the loop or any later table sees it, so every
later reader (the loop, replay, forks, the console) reads the same, safe content:

* NUL characters and lone surrogates (which Postgres refuses in text and jsonb) are
  replaced, never dropped;
* a block that is not an object, and a text block whose text is not a string with
  something in it, are dropped: the API refuses an empty text block sent back to it, and
  such a block says nothing;
* a tool call's id that the API would refuse to be sent back — missing, not a string,
  not ``^[a-zA-Z0-9_-]+$``, or already used by another call in this run's conversation
  or this reply — is replaced by a fresh one starting ``REPLACED_ID_PREFIX`` (the call
  is then answered "not run" by ``agent.conversation.unrunnable``, and the original id is
  kept in ``replaced``, for the step row). Without this, one such id in a reply made the
  next request a 400, and a call with no id crashed the loop.

Everything else about a call (a name no tool has, an input that is not an object, an
over-long id) is left as the model sent it: ``unrunnable`` answers those with an error the
model reads, and ``Conversation.reply`` sends back a form the API accepts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

# Replaced tool-call ids start with this; see agent.conversation.unrunnable.
REPLACED_ID_PREFIX = "toolu_deskhand_replaced_"
_API_ID = re.compile(r"^[a-zA-Z0-9_-]+$")
_SHOWN = 200  # how much of a replaced id the step row keeps


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(value: Any) -> Any:
    """``value`` with every NUL and lone surrogate replaced by U+FFFD, never dropped.

    Postgres text and jsonb refuse both, and outside text can carry both: a NUL as it is, a
    lone surrogate as a JSON escape (``"\\ud800"``) that Python decodes into a ``str`` no
    UTF-8 encoder accepts.
    """
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable(v) for v in value]
    return value


def ids_used(messages: Iterable[dict[str, Any]]) -> set[str]:
    """The tool-call ids already in a conversation (its assistant turns)."""
    return {
        block["id"]
        for message in messages
        if isinstance(message, dict) and message.get("role") == "assistant"
        for block in message.get("content") or []
        if isinstance(block, dict)
        and block.get("type") == "tool_use"
        and isinstance(block.get("id"), str)
    }


def reply_content(
    content: Any, *, used: set[str], seq: int
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """``content`` made safe (see the module docstring), and ``{new id: original id}``.

    ``used``: the ids already in the conversation; ``seq``: the model step's number, so a
    replacement is unique in the run and the same when the step is rebuilt from its row.
    """
    out: list[dict[str, Any]] = []
    replaced: dict[str, str] = {}
    taken = set(used)
    for i, block in enumerate(storable(content) if isinstance(content, list) else []):
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            text = block.get("text")
            if not isinstance(text, str) or not text.strip():
                continue
        if block.get("type") == "tool_use":
            call_id = block.get("id")
            if not isinstance(call_id, str) or not _API_ID.match(call_id) or call_id in taken:
                fresh = f"{REPLACED_ID_PREFIX}{seq}_{i}"
                n = 1
                while fresh in taken:
                    n += 1
                    fresh = f"{REPLACED_ID_PREFIX}{seq}_{i}_{n}"
                replaced[fresh] = "(none)" if call_id is None else str(call_id)[:_SHOWN]
                block = {**block, "id": fresh}
            taken.add(block["id"])
        out.append(block)
    return out, replaced
