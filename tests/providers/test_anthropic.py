"""The Claude provider against a local server speaking the Messages API.

No network and no key: a ``http.server`` on 127.0.0.1 records each request
and answers from a queue, so these tests see exactly what goes over the wire.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agent.providers.anthropic import AnthropicProvider
from agent.providers.pricing import UnknownModel, cost_micros
from agent.tools import api_schemas
from agent.tools.registry import FORBIDDEN_SCHEMA_KEYWORDS

MODEL = "claude-sonnet-4-6"
MESSAGES = [
    {"role": "user", "content": [{"type": "text", "text": "Ticket reference: NW-1\n\nWork it."}]},
]
OWN_SCHEMA = {
    "name": "get_ticket",
    "description": "Read a ticket.",
    "input_schema": {
        "type": "object",
        "additionalProperties": False,
        "properties": {"reference": {"type": "string"}},
        "required": ["reference"],
    },
    "strict": True,
}


@dataclasses.dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class FakeMessagesApi:
    """Answers POSTs from a queue of (status, body) and keeps what it was sent."""

    def __init__(self) -> None:
        self.replies: list[tuple[int, dict[str, Any]]] = []
        self.seen: list[Seen] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length))
                api.seen.append(
                    Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                status, payload = api.replies.pop(0)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("retry-after-ms", "10")  # keep the SDK's backoff short
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def api() -> Iterator[FakeMessagesApi]:
    fake = FakeMessagesApi()
    thread = threading.Thread(target=fake.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


def message(content: list[dict[str, Any]], stop_reason: str, **usage: Any) -> dict[str, Any]:
    return {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 20, **usage},
    }


def provider(api: FakeMessagesApi, **kwargs: Any) -> AnthropicProvider:
    return AnthropicProvider(api_key="sk-test-key", model=MODEL, base_url=api.url, **kwargs)


def schemas() -> list[dict[str, Any]]:
    return api_schemas() or [OWN_SCHEMA]


def keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys(v)}
    return set()


def test_it_sends_a_cached_system_prompt_strict_tools_and_the_history(api: FakeMessagesApi) -> None:
    tool_use = {
        "type": "tool_use",
        "id": "toolu_01",
        "name": "get_ticket",
        "input": {"reference": "NW-1"},
    }
    api.replies.append(
        (200, message([{"type": "text", "text": "Reading it."}, tool_use], "tool_use"))
    )
    tools = schemas()

    reply = provider(api, max_tokens=1234).complete(
        system="You are Deskhand.", messages=MESSAGES, tools=tools
    )

    (seen,) = api.seen
    assert seen.path == "/v1/messages"
    # Older SDKs send the key as x-api-key; anthropic 2.x sends it as a bearer token.
    assert seen.headers.get("x-api-key") == "sk-test-key" or (
        seen.headers.get("authorization") == "Bearer sk-test-key"
    )
    assert "anthropic-version" in seen.headers
    assert seen.body["model"] == MODEL
    assert seen.body["max_tokens"] == 1234
    assert seen.body["system"] == [
        {"type": "text", "text": "You are Deskhand.", "cache_control": {"type": "ephemeral"}}
    ]
    assert seen.body["messages"] == MESSAGES
    assert seen.body["tools"] == tools
    assert all(t["strict"] is True for t in seen.body["tools"])
    assert not keys([t["input_schema"] for t in seen.body["tools"]]) & FORBIDDEN_SCHEMA_KEYWORDS
    assert not {"temperature", "top_p", "top_k"} & set(seen.body)

    assert reply.content == [{"type": "text", "text": "Reading it."}, tool_use]
    assert reply.tool_uses == [tool_use]
    assert reply.stop_reason == "tool_use"
    assert (reply.provider, reply.model) == ("anthropic", MODEL)


def test_it_reports_tokens_and_an_integer_cost(api: FakeMessagesApi) -> None:
    usage = {"cache_read_input_tokens": 3000, "cache_creation_input_tokens": 500}
    api.replies.append(
        (200, message([{"type": "text", "text": "Refunded 38.00 USD."}], "end_turn", **usage))
    )

    reply = provider(api).complete(system="s", messages=MESSAGES, tools=[OWN_SCHEMA])

    assert reply.text == "Refunded 38.00 USD."
    assert reply.stop_reason == "end_turn"
    assert (reply.input_tokens, reply.output_tokens) == (100, 20)
    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (3000, 500)
    # 100*3000 + 20*15000 + 3000*300 + 500*3750 = 3_375_000 nanodollars.
    assert reply.cost_micros == 3375 == cost_micros(MODEL, 100, 20, 3000, 500)
    assert type(reply.cost_micros) is int
    assert isinstance(reply.latency_ms, int) and reply.latency_ms >= 0


def test_missing_cache_counts_are_zero(api: FakeMessagesApi) -> None:
    usage = {"cache_read_input_tokens": None, "cache_creation_input_tokens": None}
    api.replies.append((200, message([{"type": "text", "text": "ok"}], "end_turn", **usage)))

    reply = provider(api).complete(system="s", messages=MESSAGES, tools=[])

    assert (reply.cache_read_tokens, reply.cache_write_tokens) == (0, 0)
    assert reply.cost_micros == cost_micros(MODEL, 100, 20)
    assert "tools" not in api.seen[0].body


def test_a_server_error_is_retried_by_the_sdk(api: FakeMessagesApi) -> None:
    api.replies.append((500, {"type": "error", "error": {"type": "api_error", "message": "boom"}}))
    api.replies.append((200, message([{"type": "text", "text": "second time lucky"}], "end_turn")))

    reply = provider(api).complete(system="s", messages=MESSAGES, tools=[OWN_SCHEMA])

    assert reply.text == "second time lucky"
    assert len(api.seen) == 2
    assert api.seen[0].body == api.seen[1].body


def test_a_refusal_passes_through(api: FakeMessagesApi) -> None:
    api.replies.append(
        (200, message([{"type": "text", "text": "I can't help with that."}], "refusal"))
    )

    reply = provider(api).complete(system="s", messages=MESSAGES, tools=[OWN_SCHEMA])

    assert reply.stop_reason == "refusal"
    assert reply.tool_uses == []


def test_thinking_blocks_are_kept_verbatim(api: FakeMessagesApi) -> None:
    thinking = {"type": "thinking", "thinking": "The order is in window.", "signature": "sig-abc"}
    api.replies.append((200, message([thinking, {"type": "text", "text": "done"}], "end_turn")))

    reply = provider(api).complete(system="s", messages=MESSAGES, tools=[])

    assert reply.content[0] == thinking


def test_an_unpriced_model_is_refused_before_any_request(api: FakeMessagesApi) -> None:
    with pytest.raises(UnknownModel):
        AnthropicProvider(api_key="sk-test-key", model="claude-imaginary-9", base_url=api.url)
    assert api.seen == []
