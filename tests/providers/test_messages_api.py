"""The strict Messages-API double refuses what the real API refuses, and caches by its rules.

Driven by the real ``anthropic`` SDK where the SDK sends the request as given,
and by raw ``httpx2`` (the SDK's own HTTP client) where a test needs bytes the
SDK would not send, such as a missing key header or an unknown field.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest

from tests.support.messages_api import (
    DEFAULT_KEY,
    MessagesApi,
    canonical,
    text,
    tokens_of,
    tool_use,
)

MODEL = "claude-sonnet-4-6"  # minimum cacheable prefix in the double: 2048 tokens
TOOL = {
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
USER = {"role": "user", "content": [{"type": "text", "text": "Ticket reference: NW-1"}]}


@pytest.fixture
def api() -> Iterator[MessagesApi]:
    with MessagesApi() as double:
        yield double


def client(api: MessagesApi, key: str = DEFAULT_KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key=key, base_url=api.url, max_retries=0)


def create(api: MessagesApi, **overrides: Any) -> Any:
    request: dict[str, Any] = {"model": MODEL, "max_tokens": 256, "messages": [USER]}
    request.update(overrides)
    return client(api).messages.create(**request)


def raw(api: MessagesApi, body: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
    sent = {"content-type": "application/json", "anthropic-version": "2026-10-21"}
    sent.update({"x-api-key": DEFAULT_KEY} if headers is None else headers)
    return httpx2.post(f"{api.url}/v1/messages", json=body, headers=sent, timeout=10)


def refused(api: MessagesApi, **overrides: Any) -> anthropic.APIStatusError:
    with pytest.raises(anthropic.APIStatusError) as info:
        create(api, **overrides)
    return info.value


def tool_turn(ids: list[str]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": i, "name": "get_ticket", "input": {"reference": "NW-1"}}
            for i in ids
        ],
    }


def results(ids: list[str]) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": i, "content": "ok"} for i in ids],
    }


# --- what it accepts -------------------------------------------------------------------


def test_a_valid_request_gets_a_message_with_usage_and_fresh_tool_ids(api: MessagesApi) -> None:
    api.reply(
        [{"type": "tool_use", "id": "toolu_fixed", "name": "get_ticket", "input": {}}], "tool_use"
    )
    api.reply(
        [{"type": "tool_use", "id": "toolu_fixed", "name": "get_ticket", "input": {}}], "tool_use"
    )

    first = create(api, tools=[TOOL])
    second = create(api, tools=[TOOL])

    ids = [first.content[0].id, second.content[0].id]
    assert all(i.startswith("toolu_") and i != "toolu_fixed" for i in ids)
    assert ids[0] != ids[1]
    assert first.stop_reason == "tool_use"
    expected_input = tokens_of(TOOL) + tokens_of({"role": "user", "block": USER["content"][0]})
    assert first.usage.input_tokens == expected_input
    assert first.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens == 0
    assert [s.status for s in api.requests] == [200, 200]
    assert api.requests[0].body["tools"] == [TOOL]


def test_many_tool_calls_in_one_reply_each_get_their_own_id(api: MessagesApi) -> None:
    api.reply(
        [text("Reading all of them.")]
        + [tool_use("get_ticket", reference=f"NW-{i}") for i in range(30)],
        "tool_use",
    )
    reply = create(api, tools=[TOOL])
    ids = [b.id for b in reply.content if b.type == "tool_use"]
    assert len(ids) == len(set(ids)) == 30
    assert [b.input for b in reply.content if b.type == "tool_use"][29] == {"reference": "NW-29"}


def test_keep_ids_returns_the_scripted_id(api: MessagesApi) -> None:
    odd = "toolu_" + "x" * 94
    api.reply(
        [{"type": "tool_use", "id": odd, "name": "get_ticket", "input": {}}],
        "tool_use",
        keep_ids=True,
    )
    assert create(api).content[0].id == odd


def test_the_token_rule_is_a_token_per_four_bytes_of_canonical_json() -> None:
    block = {"type": "text", "text": "héllo"}
    assert canonical(block) == '{"text":"héllo","type":"text"}'
    assert tokens_of(block) == 8  # 31 bytes (é is two) -> ceil(31 / 4)


def test_count_tokens_uses_the_same_rule(api: MessagesApi) -> None:
    counted = client(api).messages.count_tokens(model=MODEL, messages=[USER], tools=[TOOL])
    assert counted.input_tokens == create(api, tools=[TOOL]).usage.input_tokens


@pytest.mark.parametrize(
    "stop_reason", ["max_tokens", "pause_turn", "refusal", "model_context_window_exceeded"]
)
def test_it_can_script_every_stop_reason(api: MessagesApi, stop_reason: str) -> None:
    api.reply([{"type": "text", "text": "partial"}], stop_reason, output_tokens=256)
    reply = create(api)
    assert reply.stop_reason == stop_reason
    assert reply.usage.output_tokens == 256


# --- what it refuses -------------------------------------------------------------------


def test_a_missing_key_header_is_401(api: MessagesApi) -> None:
    response = raw(api, {"model": MODEL, "max_tokens": 10, "messages": [USER]}, headers={})
    assert response.status_code == 401
    assert response.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": "x-api-key header is required"},
    }
    assert response.headers["request-id"].startswith("req_")


def test_a_wrong_key_is_401_through_the_sdk(api: MessagesApi) -> None:
    with pytest.raises(anthropic.AuthenticationError) as info:
        client(api, key="sk-ant-wrong").messages.create(model=MODEL, max_tokens=10, messages=[USER])
    assert info.value.type == "authentication_error"


def test_an_unknown_model_is_404(api: MessagesApi) -> None:
    error = refused(api, model="claude-imaginary-9")
    assert (error.status_code, error.type) == (404, "not_found_error")
    assert "claude-imaginary-9" in (error.api_message or "")


def test_an_unknown_top_level_field_is_400(api: MessagesApi) -> None:
    response = raw(api, {"model": MODEL, "max_tokens": 10, "messages": [USER], "temprature": 1})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error == {
        "type": "invalid_request_error",
        "message": "temprature: Extra inputs are not permitted",
    }


def test_an_unknown_block_field_and_a_missing_max_tokens_are_400(api: MessagesApi) -> None:
    bad_block = {"role": "user", "content": [{"type": "text", "text": "hi", "colour": "red"}]}
    assert refused(api, messages=[bad_block]).status_code == 400
    response = raw(api, {"model": MODEL, "messages": [USER]})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "max_tokens: Field required"


def test_max_tokens_above_the_model_limit_is_400(api: MessagesApi) -> None:
    # Raw: the SDK itself refuses a non-streaming request this large before sending it.
    response = raw(api, {"model": MODEL, "max_tokens": 64_001, "messages": [USER]})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("max_tokens: 64001 > 64000, which is the maximum")
    ok = raw(api, {"model": MODEL, "max_tokens": 64_000, "messages": [USER]})
    assert ok.status_code == 200 and ok.json()["stop_reason"] == "end_turn"


def test_the_first_message_must_be_the_users(api: MessagesApi) -> None:
    error = refused(api, messages=[{"role": "assistant", "content": "Hello"}, USER])
    assert error.status_code == 400
    assert "first message" in (error.api_message or "")


def test_roles_must_alternate(api: MessagesApi) -> None:
    second_user = {"role": "user", "content": [{"type": "text", "text": "again"}]}
    error = refused(api, messages=[USER, second_user])
    assert error.status_code == 400
    assert "alternate" in (error.api_message or "")


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_text_blocks_are_400(api: MessagesApi, text: str) -> None:
    empty = {"role": "user", "content": [{"type": "text", "text": text}]}
    error = refused(api, messages=[empty])
    assert error.status_code == 400
    assert "non-whitespace text" in (error.api_message or "")
    assert refused(api, system=[{"type": "text", "text": text}]).status_code == 400


def test_a_tool_result_must_answer_a_tool_use_of_the_previous_turn(api: MessagesApi) -> None:
    error = refused(api, messages=[USER, tool_turn(["toolu_a"]), results(["toolu_b"])])
    assert error.status_code == 400
    assert "unexpected `tool_use_id`" in (error.api_message or "")
    assert "toolu_b" in (error.api_message or "")
    # A tool_result in the very first message answers nothing either.
    assert refused(api, messages=[results(["toolu_a"])]).status_code == 400


def test_every_tool_use_must_be_answered_by_the_next_turn(api: MessagesApi) -> None:
    error = refused(api, messages=[USER, tool_turn(["toolu_a", "toolu_b"]), results(["toolu_a"])])
    assert error.status_code == 400
    assert "without `tool_result`" in (error.api_message or "")
    assert "toolu_b" in (error.api_message or "")
    ok = [USER, tool_turn(["toolu_a", "toolu_b"]), results(["toolu_b", "toolu_a"])]
    assert create(api, messages=ok).stop_reason == "end_turn"


@pytest.mark.parametrize("name", ["x" * 65, "get ticket", "", "get.ticket", "tícket"])
def test_tool_names_must_match_the_api_pattern(api: MessagesApi, name: str) -> None:
    error = refused(api, tools=[{**TOOL, "name": name}])
    assert error.status_code == 400
    assert "String should match pattern" in (error.api_message or "")


def test_a_64_character_tool_name_is_accepted_and_duplicates_are_not(api: MessagesApi) -> None:
    assert create(api, tools=[{**TOOL, "name": "x" * 64}]).stop_reason == "end_turn"
    assert "unique" in (refused(api, tools=[TOOL, TOOL]).api_message or "")


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string"},
        {"type": "array", "items": {"type": "string"}},
        {"properties": {"reference": {"type": "string"}}},
    ],
)
def test_an_input_schema_must_be_an_object_schema(api: MessagesApi, schema: Any) -> None:
    error = refused(api, tools=[{**TOOL, "input_schema": schema}])
    assert error.status_code == 400
    assert "input_schema" in (error.api_message or "")


def test_a_strict_tool_schema_must_be_closed_and_use_supported_keywords(api: MessagesApi) -> None:
    schema = dict(TOOL["input_schema"])  # type: ignore[call-overload]
    open_schema = {k: v for k, v in schema.items() if k != "additionalProperties"}
    assert "additionalProperties" in (
        refused(api, tools=[{**TOOL, "input_schema": open_schema}]).api_message or ""
    )
    bounded = {**schema, "properties": {"reference": {"type": "string", "maxLength": 9}}}
    assert "maxLength" in (
        refused(api, tools=[{**TOOL, "input_schema": bounded}]).api_message or ""
    )
    # The same schema without strict is fine.
    loose = {**TOOL, "input_schema": bounded, "strict": False}
    assert create(api, tools=[loose]).stop_reason == "end_turn"


def test_more_than_four_cache_breakpoints_is_400(api: MessagesApi) -> None:
    cc = {"type": "ephemeral"}
    system = [{"type": "text", "text": f"part {i}", "cache_control": cc} for i in range(4)]
    assert create(api, system=system).stop_reason == "end_turn"
    user = {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": cc}]}
    error = refused(api, system=system, messages=[user])
    assert error.status_code == 400
    assert error.api_message == (
        "A maximum of 4 blocks with cache_control may be provided. Found 5."
    )


def test_stream_is_refused_not_half_answered(api: MessagesApi) -> None:
    response = raw(api, {"model": MODEL, "max_tokens": 10, "messages": [USER], "stream": True})
    assert response.status_code == 400


def test_a_refused_request_never_consumes_the_script(api: MessagesApi) -> None:
    api.reply([{"type": "text", "text": "scripted"}])
    assert raw(api, {"model": MODEL, "max_tokens": 10**6, "messages": [USER]}).status_code == 400
    assert create(api).content[0].text == "scripted"


# --- scripted failures -----------------------------------------------------------------


def test_a_429_carries_retry_after_and_rate_limit_headers(api: MessagesApi) -> None:
    api.rate_limited(retry_after=7)
    with pytest.raises(anthropic.RateLimitError) as info:
        create(api)
    headers = info.value.response.headers
    assert headers["retry-after"] == "7"
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert "anthropic-ratelimit-input-tokens-reset" in headers
    assert info.value.type == "rate_limit_error"


def test_500_and_529_have_the_real_error_types(api: MessagesApi) -> None:
    api.server_error()
    api.overloaded()
    with pytest.raises(anthropic.InternalServerError) as first:
        create(api)
    with pytest.raises(anthropic.APIStatusError) as second:
        create(api)
    assert (first.value.status_code, first.value.type) == (500, "api_error")
    assert (second.value.status_code, second.value.type) == (529, "overloaded_error")


def test_a_slow_reply_times_the_client_out(api: MessagesApi) -> None:
    api.reply([{"type": "text", "text": "late"}], delay=1.0)
    slow = anthropic.Anthropic(api_key=DEFAULT_KEY, base_url=api.url, max_retries=0, timeout=0.2)
    with pytest.raises(anthropic.APITimeoutError):
        slow.messages.create(model=MODEL, max_tokens=10, messages=[USER])


def test_a_dropped_connection_is_a_connection_error(api: MessagesApi) -> None:
    api.drop()
    with pytest.raises(anthropic.APIConnectionError):
        create(api)
    assert create(api).stop_reason == "end_turn"  # the next one is answered


# --- prompt caching --------------------------------------------------------------------

LONG = "Policy: refunds within 30 days of delivery, never above the amount left. " * 120


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def cached_system(text: str = LONG) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]


def test_a_prefix_above_the_minimum_is_written_then_read() -> None:
    with MessagesApi(clock=Clock()) as api:
        prefix = tokens_of(TOOL) + tokens_of({"type": "text", "text": LONG})
        assert prefix >= 2048
        user_tokens = tokens_of({"role": "user", "block": USER["content"][0]})

        first = create(api, tools=[TOOL], system=cached_system())
        second = create(api, tools=[TOOL], system=cached_system())

        assert first.usage.cache_creation_input_tokens == prefix
        assert first.usage.cache_read_input_tokens == 0
        assert first.usage.input_tokens == user_tokens
        assert second.usage.cache_read_input_tokens == prefix
        assert second.usage.cache_creation_input_tokens == 0
        assert second.usage.input_tokens == user_tokens


def test_a_prefix_below_the_model_minimum_is_not_cached(api: MessagesApi) -> None:
    short = cached_system("You are Deskhand.")
    create(api, system=short)
    again = create(api, system=short)
    assert again.usage.cache_creation_input_tokens == again.usage.cache_read_input_tokens == 0
    # The same prefix clears Fable 5's lower minimum (512) but not Sonnet 4.6's (2048).
    medium = cached_system(LONG[:3000])
    assert create(api, system=medium).usage.cache_creation_input_tokens == 0
    fable = create(api, model="claude-fable-5", system=medium)
    assert fable.usage.cache_creation_input_tokens > 0


def test_a_changed_byte_before_the_breakpoint_misses(api: MessagesApi) -> None:
    create(api, system=cached_system())
    other = create(api, system=cached_system(LONG + " (run 2)"))
    assert other.usage.cache_read_input_tokens == 0
    assert other.usage.cache_creation_input_tokens > 0
    # Tools come before the system in the prefix: adding one misses too.
    with_tool = create(api, tools=[TOOL], system=cached_system())
    assert with_tool.usage.cache_read_input_tokens == 0


def test_a_breakpoint_on_the_newest_message_reads_the_previous_turns_prefix(
    api: MessagesApi,
) -> None:
    cc = {"type": "ephemeral"}
    turn1 = [{"role": "user", "content": [{"type": "text", "text": LONG, "cache_control": cc}]}]
    first = create(api, messages=turn1)
    assert first.usage.cache_creation_input_tokens > 0
    # Turn 2 resends turn 1 unchanged (its breakpoint moved to the newest block).
    turn2 = [
        {"role": "user", "content": [{"type": "text", "text": LONG}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Reading the order."}]},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Order NW-1001", "cache_control": cc}],
        },
    ]
    second = create(api, messages=turn2)
    assert second.usage.cache_read_input_tokens == first.usage.cache_creation_input_tokens
    new = tokens_of({"role": "assistant", "block": turn2[1]["content"][0]}) + tokens_of(
        {"role": "user", "block": {"type": "text", "text": "Order NW-1001"}}
    )
    assert second.usage.cache_creation_input_tokens == new
    assert second.usage.input_tokens == 0


def test_cache_entries_expire_after_their_ttl_unless_used() -> None:
    clock = Clock()
    with MessagesApi(clock=clock) as api:
        create(api, system=cached_system())
        clock.now += 299
        assert create(api, system=cached_system()).usage.cache_read_input_tokens > 0
        clock.now += 299  # a read refreshed the entry
        assert create(api, system=cached_system()).usage.cache_read_input_tokens > 0
        clock.now += 301
        late = create(api, system=cached_system())
        assert late.usage.cache_read_input_tokens == 0
        assert late.usage.cache_creation_input_tokens > 0


def test_the_cache_is_per_model(api: MessagesApi) -> None:
    create(api, system=cached_system())
    other = create(api, model="claude-opus-4-8", system=cached_system())
    assert other.usage.cache_read_input_tokens == 0
