"""The Claude provider against the strict Messages-API double (no network, no real key).

The real ``anthropic`` SDK talks HTTP to ``tests.support.messages_api``, which
records each request, refuses what the API refuses and answers from a script,
so these tests see exactly what goes over the wire and how often.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from agent.providers import anthropic as provider_module
from agent.providers.anthropic import (
    MAX_NONSTREAMING_TOKENS,
    AnthropicProvider,
    ProviderError,
    RetryPolicy,
    client_for,
    request_timeout,
)
from agent.providers.pricing import UnknownModel, cost_micros
from agent.tools import api_schemas
from agent.tools.registry import FORBIDDEN_SCHEMA_KEYWORDS
from tests.support.messages_api import DEFAULT_KEY, MessagesApi

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


class Sleeps(list[float]):
    """An injected sleep: records how long the provider asked to wait, and never waits."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def api() -> Iterator[MessagesApi]:
    with MessagesApi() as double:
        yield double


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def provider(api: MessagesApi, sleeps: Sleeps | None = None, **kwargs: Any) -> AnthropicProvider:
    return AnthropicProvider(
        api_key=DEFAULT_KEY,
        model=kwargs.pop("model", MODEL),
        base_url=api.url,
        sleep=sleeps if sleeps is not None else Sleeps(),
        jitter=kwargs.pop("jitter", lambda d: d),
        **kwargs,
    )


def schemas() -> list[dict[str, Any]]:
    return api_schemas() or [OWN_SCHEMA]


def keys(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys(v)}
    return set()


def complete(p: AnthropicProvider, tools: list[dict[str, Any]] | None = None) -> Any:
    return p.complete(system="You are Deskhand.", messages=MESSAGES, tools=tools or [OWN_SCHEMA])


# --- the request and the reply ---------------------------------------------------------


def test_it_sends_a_cached_system_prompt_strict_tools_and_the_history(api: MessagesApi) -> None:
    tool_use = {"type": "tool_use", "name": "get_ticket", "input": {"reference": "NW-1"}}
    api.reply([{"type": "text", "text": "Reading it."}, tool_use], "tool_use")
    tools = schemas()

    reply = provider(api, max_tokens=1234).complete(
        system="You are Deskhand.", messages=MESSAGES, tools=tools
    )

    (seen,) = api.requests
    assert (seen.path, seen.status) == ("/v1/messages", 200)
    assert seen.headers.get("authorization") == f"Bearer {DEFAULT_KEY}"
    assert "anthropic-version" in seen.headers
    assert seen.headers.get("x-stainless-retry-count", "0") == "0"
    assert seen.body["model"] == MODEL
    assert seen.body["max_tokens"] == 1234
    assert seen.body["system"] == [
        {"type": "text", "text": "You are Deskhand.", "cache_control": {"type": "ephemeral"}}
    ]
    # The history as given, with one more breakpoint: on the newest message's last block.
    *earlier, newest = seen.body["messages"]
    assert earlier == MESSAGES[:-1]
    assert newest["content"][-1]["cache_control"] == {"type": "ephemeral"}
    assert {
        **newest,
        "content": [
            {k: v for k, v in b.items() if k != "cache_control"} for b in newest["content"]
        ],
    } == MESSAGES[-1]
    assert "cache_control" not in str(MESSAGES)  # the caller's messages are not changed
    assert seen.body["tools"] == tools
    assert all(t["strict"] is True for t in seen.body["tools"])
    assert not keys([t["input_schema"] for t in seen.body["tools"]]) & FORBIDDEN_SCHEMA_KEYWORDS
    assert not {"temperature", "top_p", "top_k", "stream"} & set(seen.body)

    (call,) = reply.tool_uses
    assert call["id"].startswith("toolu_") and call["name"] == "get_ticket"
    assert reply.content == [{"type": "text", "text": "Reading it."}, call]
    assert reply.stop_reason == "tool_use"
    assert (reply.provider, reply.model) == ("anthropic", MODEL)


def test_the_real_tool_schemas_pass_the_strict_double(api: MessagesApi) -> None:
    # Every registered tool, as sent, is a valid strict tool to the double.
    reply = complete(provider(api), tools=schemas())
    assert reply.stop_reason == "end_turn"
    assert api.requests[0].status == 200


def test_it_reports_tokens_and_an_integer_cost(api: MessagesApi) -> None:
    api.reply([{"type": "text", "text": "Refunded 38.00 USD."}], output_tokens=20)

    reply = complete(provider(api))

    usage = api.requests[0]
    assert usage.status == 200
    assert reply.text == "Refunded 38.00 USD."
    assert reply.output_tokens == 20
    assert reply.input_tokens > 0 and (reply.cache_read_tokens, reply.cache_write_tokens) == (0, 0)
    assert reply.cost_micros == cost_micros(MODEL, reply.input_tokens, 20)
    assert type(reply.cost_micros) is int
    assert isinstance(reply.latency_ms, int) and reply.latency_ms >= 0


def test_cache_reads_and_writes_are_reported_and_priced(api: MessagesApi) -> None:
    long_system = "Refund policy: within 30 days of delivery, never above what is left. " * 150
    p = provider(api)

    first = p.complete(system=long_system, messages=MESSAGES, tools=[OWN_SCHEMA])
    second = p.complete(system=long_system, messages=MESSAGES, tools=[OWN_SCHEMA])

    assert first.cache_write_tokens > 2048 and first.cache_read_tokens == 0
    assert second.cache_read_tokens == first.cache_write_tokens and second.cache_write_tokens == 0
    assert second.cost_micros == cost_micros(
        MODEL, second.input_tokens, second.output_tokens, cache_read=second.cache_read_tokens
    )
    assert second.cost_micros < first.cost_micros


@pytest.mark.parametrize(
    "stop_reason", ["refusal", "max_tokens", "pause_turn", "model_context_window_exceeded"]
)
def test_stop_reasons_pass_through_as_the_api_said(api: MessagesApi, stop_reason: str) -> None:
    api.reply([{"type": "text", "text": "I can't finish that."}], stop_reason)

    reply = complete(provider(api))

    assert reply.stop_reason == stop_reason
    assert reply.tool_uses == []


def test_thinking_blocks_are_kept_verbatim(api: MessagesApi) -> None:
    thinking = {"type": "thinking", "thinking": "The order is in window.", "signature": "sig-abc"}
    api.reply([thinking, {"type": "text", "text": "done"}])

    reply = complete(provider(api))

    assert reply.content[0] == thinking


def test_an_unpriced_model_is_refused_before_any_request(api: MessagesApi) -> None:
    with pytest.raises(UnknownModel):
        AnthropicProvider(api_key=DEFAULT_KEY, model="claude-imaginary-9", base_url=api.url)
    with pytest.raises(UnknownModel, match="no published price"):
        AnthropicProvider(api_key=DEFAULT_KEY, model="claude-mythos-preview", base_url=api.url)
    assert api.requests == []


# --- one client per process, a timeout sized to max_tokens -----------------------------


def test_one_sdk_client_per_key_and_endpoint_built_without_sdk_retries(api: MessagesApi) -> None:
    a, b = provider(api), provider(api, model="claude-haiku-4-5")
    assert a._client is b._client is client_for(DEFAULT_KEY, api.url)
    assert a._client.max_retries == 0
    assert client_for("sk-ant-other", api.url) is not a._client


def test_the_timeout_grows_with_max_tokens_within_bounds() -> None:
    assert request_timeout(1024).read == 60.0
    assert request_timeout(4096).read == pytest.approx(230.4)
    assert request_timeout(MAX_NONSTREAMING_TOKENS).read == 600.0
    assert request_timeout(4096).connect == 5.0
    with pytest.raises(ValueError, match="does not stream"):
        AnthropicProvider(api_key=DEFAULT_KEY, model=MODEL, max_tokens=MAX_NONSTREAMING_TOKENS + 1)


# --- one retry layer -------------------------------------------------------------------


def test_a_400_is_sent_once_and_fails_permanently_naming_the_type(
    api: MessagesApi, sleeps: Sleeps
) -> None:
    bad_history = [*MESSAGES, {"role": "user", "content": [{"type": "text", "text": "again"}]}]

    with pytest.raises(ProviderError) as info:
        provider(api, sleeps).complete(system="s", messages=bad_history, tools=[OWN_SCHEMA])

    error = info.value
    assert api.count == 1
    assert sleeps == []
    assert (error.status, error.kind, error.permanent, error.attempts) == (
        400,
        "invalid_request_error",
        True,
        1,
    )
    assert str(error).startswith("Anthropic API invalid_request_error (HTTP 400): messages:")
    assert "alternate" in str(error)
    assert DEFAULT_KEY not in str(error) and DEFAULT_KEY not in repr(error)


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (413, "request_too_large"),
    ],
)
def test_other_client_errors_are_not_retried(
    api: MessagesApi, sleeps: Sleeps, status: int, kind: str
) -> None:
    api.error(status, kind, f"scripted {kind}")

    with pytest.raises(ProviderError) as info:
        complete(provider(api, sleeps))

    assert api.count == 1 and sleeps == []
    assert (info.value.status, info.value.kind, info.value.transient) == (status, kind, False)
    assert f"scripted {kind}" in str(info.value)


def test_a_wrong_key_is_a_401_whose_message_never_holds_the_key(api: MessagesApi) -> None:
    secret = "sk-ant-api03-very-secret-key"
    p = AnthropicProvider(api_key=secret, model=MODEL, base_url=api.url, sleep=Sleeps())

    with pytest.raises(ProviderError) as info:
        complete(p)

    assert info.value.kind == "authentication_error" and info.value.permanent
    assert secret not in str(info.value) and secret not in repr(info.value.args)
    assert api.count == 1


def test_529_twice_then_success_is_three_requests_and_one_reply(
    api: MessagesApi, sleeps: Sleeps
) -> None:
    api.overloaded(times=2)
    api.reply([{"type": "text", "text": "third time"}], output_tokens=10)

    reply = complete(provider(api, sleeps))

    assert reply.text == "third time"
    assert api.count == 3
    assert [s.status for s in api.requests] == [529, 529, 200]
    assert api.requests[0].body == api.requests[2].body  # the same request each time
    assert sleeps == [1.0, 2.0]  # exponential backoff (jitter injected as identity)
    assert reply.cost_micros == cost_micros(MODEL, reply.input_tokens, 10)  # the one reply


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_retried(api: MessagesApi, sleeps: Sleeps, status: int) -> None:
    api.server_error(status=status)
    assert complete(provider(api, sleeps)).stop_reason == "end_turn"
    assert api.count == 2 and len(sleeps) == 1


def test_500_forever_gives_up_after_the_budget_keeping_the_cause(
    api: MessagesApi, sleeps: Sleeps
) -> None:
    api.server_error(times=10)

    with pytest.raises(ProviderError) as info:
        complete(provider(api, sleeps, retry=RetryPolicy(max_attempts=3)))

    error = info.value
    assert api.count == 3
    assert sleeps == [1.0, 2.0]
    assert (error.kind, error.status, error.transient, error.attempts) == (
        "api_error",
        500,
        True,
        3,
    )
    assert error.history == ("api_error", "api_error", "api_error")
    assert "gave up after 3 attempts" in str(error)
    assert "Internal server error" in str(error)
    assert type(error.__cause__).__name__ == "InternalServerError"


def test_the_waiting_budget_stops_retries_before_the_attempt_cap(
    api: MessagesApi, sleeps: Sleeps
) -> None:
    api.server_error(times=10)
    policy = RetryPolicy(max_attempts=10, base_delay=1.0, budget_seconds=5.0)

    with pytest.raises(ProviderError) as info:
        complete(provider(api, sleeps, retry=policy))

    assert sleeps == [1.0, 2.0]  # a third wait (4 s) would pass the 5 s budget
    assert api.count == 3 and info.value.attempts == 3


def test_a_429_waits_what_retry_after_says(api: MessagesApi, sleeps: Sleeps) -> None:
    api.rate_limited(retry_after=7)
    api.reply([{"type": "text", "text": "ok"}])

    reply = complete(provider(api, sleeps))

    assert reply.text == "ok"
    assert sleeps == [7.0]
    assert [s.status for s in api.requests] == [429, 200]


def test_retry_after_is_capped(api: MessagesApi, sleeps: Sleeps) -> None:
    api.rate_limited(retry_after=3600)
    complete(provider(api, sleeps, retry=RetryPolicy(max_delay=20.0)))
    assert sleeps == [20.0]


def test_jitter_keeps_backoff_within_half_to_full(api: MessagesApi, sleeps: Sleeps) -> None:
    api.overloaded(times=3)
    p = AnthropicProvider(api_key=DEFAULT_KEY, model=MODEL, base_url=api.url, sleep=sleeps)
    complete(p)
    assert len(sleeps) == 3
    for wait, full in zip(sleeps, [1.0, 2.0, 4.0], strict=True):
        assert full / 2 <= wait <= full


def test_connection_errors_and_timeouts_are_retried(api: MessagesApi, sleeps: Sleeps) -> None:
    api.drop()
    api.reply([{"type": "text", "text": "back"}])
    assert complete(provider(api, sleeps)).text == "back"
    assert len(sleeps) == 1

    slow = MessagesApi().start()
    try:
        p = provider(slow, sleeps, retry=RetryPolicy(max_attempts=2))
        p._timeout = provider_module.anthropic.Timeout(0.2, connect=1.0)
        slow.reply([{"type": "text", "text": "late"}], delay=1.0)
        slow.reply([{"type": "text", "text": "late"}], delay=1.0)
        with pytest.raises(ProviderError) as info:
            complete(p)
    finally:
        slow.stop()
    assert (info.value.kind, info.value.transient, info.value.attempts) == ("timeout", True, 2)
    assert slow.count == 2


def test_a_base_url_without_a_scheme_fails_at_once(sleeps: Sleeps) -> None:
    p = AnthropicProvider(api_key=DEFAULT_KEY, model=MODEL, base_url="127.0.0.1:9", sleep=sleeps)
    with pytest.raises(ProviderError) as info:
        complete(p)
    assert (info.value.kind, info.value.permanent, info.value.attempts) == (
        "invalid_base_url",
        True,
        1,
    )
    assert sleeps == []


def test_a_provider_error_survives_pickling(api: MessagesApi) -> None:
    api.error(400, "invalid_request_error", "bad")
    with pytest.raises(ProviderError) as info:
        complete(provider(api))
    copy = pickle.loads(pickle.dumps(info.value))
    assert isinstance(copy, ProviderError)
    assert (copy.kind, copy.status, copy.transient, str(copy)) == (
        "invalid_request_error",
        400,
        False,
        str(info.value),
    )


# --- a reply that came but cannot be used -----------------------------------------------

M = MessagesApi.message
UNUSABLE = {
    "not JSON": (b"{not json", "the body is not JSON"),
    "an HTML page": (b"<html>oops</html>", "the body is not JSON"),
    "an empty body": (b"", "the body is not JSON"),
    "JSON null": (b"null", "JSON null"),
    "a JSON array": (b"[1, 2]", "JSON an array"),
    "an error object with 200": (
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        "a 200 answer carrying an error ('overloaded_error'",
    ),
    "content a string": (M("hello"), "content is 'hello', not a list"),
    "content missing": ({**M([]), "content": None}, "content is missing"),
    "a block that is not an object": (M(["x"]), "content.0 is 'x'"),
    "a block with no type": (M([{"text": "x"}]), "content.0 is {'text': 'x'}"),
    "usage missing": ({**M([]), "usage": None}, "usage is missing, so the call cannot be costed"),
    "input_tokens missing": (M([], usage={"output_tokens": 1}), "usage.input_tokens is missing"),
    "a count as a string": (
        M([], usage={"input_tokens": "10", "output_tokens": 1}),
        "usage.input_tokens is '10'",
    ),
    "a negative count": (
        M([], usage={"input_tokens": 1, "output_tokens": -5}),
        "usage.output_tokens is -5",
    ),
    "a count Postgres cannot hold": (
        M([], usage={"input_tokens": 10**30, "output_tokens": 1}),
        "outside 0..",
    ),
    "a fractional count": (
        M([], usage={"input_tokens": 1, "output_tokens": 2, "cache_read_input_tokens": 0.5}),
        "usage.cache_read_input_tokens is 0.5",
    ),
    "a boolean count": (M([], usage={"input_tokens": True, "output_tokens": 1}), "is True"),
    "a tool input nested past what Python can read": (
        b'{"type":"message","content":[{"type":"tool_use","id":"toolu_a","name":"get_ticket",'
        b'"input":' + b'{"a":' * 100_000 + b"1" + b"}" * 100_000 + b'}],"stop_reason":"tool_use",'
        b'"usage":{"input_tokens":1,"output_tokens":1}}',
        "the body nests too deeply to read",
    ),
    "a tool input nested past the limit": (
        M(
            [
                {
                    "type": "tool_use",
                    "id": "t",
                    "name": "x",
                    "input": functools.reduce(lambda inner, _: {"a": inner}, range(70), {}),
                }
            ]
        ),
        "the body nests deeper than 64 levels",
    ),
}


@pytest.mark.parametrize("case", list(UNUSABLE))
def test_a_200_that_is_not_a_usable_message_fails_once_naming_what_was_wrong(
    api: MessagesApi, sleeps: Sleeps, case: str
) -> None:
    body, why = UNUSABLE[case]
    api.raw_reply(body)
    api.reply([{"type": "text", "text": "never asked for"}])

    with pytest.raises(ProviderError) as info:
        complete(provider(api, sleeps))

    error = info.value
    assert (error.kind, error.transient, error.attempts) == ("invalid_response", False, 1)
    assert why in error.message, error.message
    assert api.count == 1 and sleeps == []  # not retried: the same request gets the same answer
    assert "could not be used" in str(error) and DEFAULT_KEY not in str(error)


def test_a_reply_keeps_only_blocks_and_fields_the_api_takes_back(api: MessagesApi) -> None:
    """Unknown block types and fields are dropped; values are kept as sent (the loop judges them);
    missing cache counts are 0; an unknown or missing stop reason comes through as said or ""."""
    api.raw_reply(
        M(
            [
                {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}},
                {"type": "text", "text": "hi", "citations": None, "extra": 1},
                {"type": "tool_use", "id": 7, "name": "get_ticket", "input": [1], "caller": {}},
            ],
            "flux_capacitor",
            usage={"input_tokens": 3, "output_tokens": 4, "cache_read_input_tokens": None},
        )
    )
    api.raw_reply(M([], None))

    p = provider(api)
    reply = complete(p)
    assert reply.content == [
        {"type": "text", "text": "hi"},
        {"type": "tool_use", "id": 7, "name": "get_ticket", "input": [1]},
    ]
    assert reply.stop_reason == "flux_capacitor"
    assert (reply.input_tokens, reply.output_tokens, reply.cache_read_tokens) == (3, 4, 0)
    assert complete(p).stop_reason == ""


def test_a_429_is_handed_back_unslept_when_the_workflow_sleeps_waits(
    api: MessagesApi, sleeps: Sleeps
) -> None:
    from agent.providers.base import return_waits

    api.rate_limited(retry_after=7)
    token = return_waits.set(True)
    try:
        with pytest.raises(ProviderError) as info:
            complete(provider(api, sleeps))
    finally:
        return_waits.reset(token)

    assert (info.value.status, info.value.retry_after, info.value.attempts) == (429, 7.0, 1)
    assert sleeps == [] and api.count == 1


def test_a_429_naming_no_retry_after_waits_for_the_exhausted_budget_to_reset(
    api: MessagesApi, sleeps: Sleeps
) -> None:
    import time

    reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 12))
    api.error(
        429,
        "rate_limit_error",
        "Output tokens exhausted.",
        headers={
            "anthropic-ratelimit-requests-remaining": "10",
            "anthropic-ratelimit-output-tokens-remaining": "0",
            "anthropic-ratelimit-output-tokens-reset": reset,
        },
    )
    api.reply([{"type": "text", "text": "ok"}])

    assert complete(provider(api, sleeps)).text == "ok"
    assert len(sleeps) == 1 and 10.0 <= sleeps[0] <= 12.0


def test_a_reply_saying_its_budget_is_spent_holds_the_next_call_until_the_reset(
    api: MessagesApi, sleeps: Sleeps
) -> None:
    from agent.providers.base import return_waits

    # 30 s: the second call reads what is left of it, less whatever the machine took in
    # between (over 2 s on a loaded two-core box: 9 s left too little headroom).
    api.spend_budget(30)
    api.reply([{"type": "text", "text": "first"}])
    api.reply([{"type": "text", "text": "second"}])
    p = provider(api, sleeps)
    assert complete(p).text == "first"

    # In a workflow: handed back to be slept durably, and nothing is sent meanwhile.
    token = return_waits.set(True)
    try:
        with pytest.raises(ProviderError) as info:
            complete(p)
    finally:
        return_waits.reset(token)
    assert (info.value.status, info.value.kind, info.value.transient) == (
        429,
        "rate_limit_error",
        True,
    )
    assert 25.0 <= (info.value.retry_after or 0) <= 30.0
    assert api.count == 1 and sleeps == []

    # Outside one: slept in place, then sent once.
    assert complete(p).text == "second"
    assert len(sleeps) == 1 and 25.0 <= sleeps[0] <= 30.0
    assert api.count == 2
