"""Reading a Messages-API reply body: untrusted bytes in, the few fields the loop needs out.

Why not the SDK's parsed ``Message``: the SDK builds its models without validating them,
so a body that is not the documented shape — JSON ``null``, ``content`` that is a string,
a block that is not an object, ``usage`` missing or negative, a number of tokens Postgres
cannot hold — came through as an object that crashed later, inside the model step, where
DBOS retried it (re-sending a call that may have been paid) and the run ended with a bare
``AttributeError``. Here the body is read once, checked field by field, and anything the
loop cannot trust becomes a ``ProviderError`` of kind ``invalid_response``: permanent (the
same request would likely get the same answer), with the reason, so the run ends
``failed`` / ``provider_error`` saying what was wrong with the reply.

What is kept of each block is what the API accepts back in the next request: unknown
block types (server tools, future kinds) are dropped, as are fields a block of its type
does not take. Values are kept as they came (a tool call's ``input`` that is not an
object, an odd id): the loop answers such calls with an error (``agent.conversation.untrusted``,
``agent.conversation.unrunnable``).
"""

from __future__ import annotations

import json
from typing import Any

from agent.providers.base import ProviderError

# The fields each kept block type may carry back to the API; anything else is dropped.
BLOCK_FIELDS: dict[str, tuple[str, ...]] = {
    "text": ("type", "text"),
    "tool_use": ("type", "id", "name", "input"),
    "thinking": ("type", "thinking", "signature"),
    "redacted_thinking": ("type", "data"),
}
USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)
# More tokens than any model's context holds, by orders of magnitude: a count past this is
# not a count (and a bigint column refuses what is past 2**63).
MAX_TOKENS_PER_CALL = 100_000_000
MAX_STOP_REASON = 64
# Deeper than any tool input here can be, and shallow enough that every recursive reader after
# this one (NUL replacement, JSON encoding for the checkpoint, Postgres jsonb) stays far from
# Python's recursion limit: a reply nested past it is refused whole.
MAX_DEPTH = 64


def invalid(reason: str) -> ProviderError:
    return ProviderError(
        kind="invalid_response",
        message=f"the API's reply could not be used: {reason}"[:1000],
        transient=False,
        history=("invalid_response",),
    )


def _count(usage: dict[str, Any], field: str, required: bool) -> int:
    value = usage.get(field)
    if value is None and not required:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"usage.{field} is {_show(value)}, not a whole number of tokens")
    if not 0 <= value <= MAX_TOKENS_PER_CALL:
        raise invalid(f"usage.{field} is {value}, outside 0..{MAX_TOKENS_PER_CALL}")
    return value


def _show(value: Any) -> str:
    return "missing" if value is None else repr(value)[:80]


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects or arrays more than ``limit`` deep (without recursing)."""
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth >= limit:
                return True
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    return False


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "a number"


def read_message(raw: bytes) -> dict[str, Any]:
    """The reply body as ``{"content", "stop_reason", "usage"}``, or ``ProviderError``.

    ``content`` holds only the kept block types and their fields; ``stop_reason`` is the
    API's string as it said it (``""`` when absent or not a string: the loop decides what an
    unknown reason means); ``usage`` the four counts (cache counts default to 0).
    """
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid(f"the body is not JSON ({exc})") from None
    except RecursionError:
        raise invalid("the body nests too deeply to read") from None
    if _deeper_than(body, MAX_DEPTH):
        raise invalid(f"the body nests deeper than {MAX_DEPTH} levels")
    if not isinstance(body, dict):
        raise invalid(f"the body is JSON {_json_kind(body)}, not a message object")
    if body.get("type") == "error":
        found = body.get("error")
        error: dict[str, Any] = found if isinstance(found, dict) else {}
        raise invalid(
            f"a 200 answer carrying an error ({_show(error.get('type'))}: "
            f"{_show(error.get('message'))})"
        )
    content = body.get("content")
    if not isinstance(content, list):
        raise invalid(f"content is {_show(content)}, not a list of blocks")
    kept: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise invalid(f"content.{i} is {_show(block)}, not a block with a type")
        fields = BLOCK_FIELDS.get(block["type"])
        if fields is not None:
            kept.append({k: block[k] for k in fields if k in block})
    usage = body.get("usage")
    if not isinstance(usage, dict):
        raise invalid(f"usage is {_show(usage)}, so the call cannot be costed")
    counts = {f: _count(usage, f, required=f in USAGE_FIELDS[:2]) for f in USAGE_FIELDS}
    stop = body.get("stop_reason")
    stop_reason = stop[:MAX_STOP_REASON] if isinstance(stop, str) else ""
    return {"content": kept, "stop_reason": stop_reason, "usage": counts}
