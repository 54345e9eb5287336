"""The explicit script: stateless turns, deterministic ids, an honest end."""

from __future__ import annotations

from typing import Any

import pytest

from agent.providers.base import ModelReply
from agent.providers.scripted import MARK, ScriptedProvider, call, say


def history(assistant_turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "go"}]}]
    for i in range(assistant_turns):
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"turn {i}"}]})
        messages.append({"role": "user", "content": [{"type": "text", "text": "next"}]})
    return messages


def complete(provider: ScriptedProvider, turns: int) -> ModelReply:
    return provider.complete(system="", messages=history(turns), tools=[])


def test_the_turn_is_the_number_of_assistant_messages() -> None:
    provider = ScriptedProvider([[say("zero")], [say("one")], [say("two")]])

    assert complete(provider, 2).text == "two"
    assert complete(provider, 0).text == "zero"
    assert complete(provider, 2).text == "two"
    assert provider.calls == [2, 0, 2]


def test_tool_use_ids_are_deterministic() -> None:
    script = [
        [call("get_ticket", reference="NW-1")],
        [say("looking"), call("get_order", reference="NW-1042"), call("search_kb", query="refund")],
    ]
    provider = ScriptedProvider(script)

    first = complete(provider, 0)
    second = complete(provider, 1)

    assert first.content == [
        {
            "type": "tool_use",
            "id": "toolu_scripted_0_0",
            "name": "get_ticket",
            "input": {"reference": "NW-1"},
        }
    ]
    assert [b["id"] for b in second.tool_uses] == ["toolu_scripted_1_1", "toolu_scripted_1_2"]
    assert complete(ScriptedProvider(script), 1) == second


def test_the_stop_reason_follows_the_blocks() -> None:
    provider = ScriptedProvider([[call("get_ticket", reference="NW-1")], [say("done")]])

    assert complete(provider, 0).stop_reason == "tool_use"
    assert complete(provider, 1).stop_reason == "end_turn"


def test_past_the_end_it_finishes_with_text() -> None:
    reply = complete(ScriptedProvider([[say("only")]]), 5)

    assert reply.tool_uses == []
    assert reply.stop_reason == "end_turn"
    assert reply.text.startswith(MARK)


def test_playing_a_turn_never_changes_the_script() -> None:
    script = [[call("get_ticket", reference="NW-1")]]
    reply = complete(ScriptedProvider(script), 0)
    reply.content[0]["input"]["reference"] = "XX-0"

    assert script == [[{"type": "tool_use", "name": "get_ticket", "input": {"reference": "NW-1"}}]]


def test_a_turn_can_be_a_whole_reply_or_a_failure() -> None:
    refusal = ModelReply(
        content=[say("I can't help with that.")], stop_reason="refusal", input_tokens=5,
        output_tokens=1, cost_micros=0, provider="scripted", model="scripted-test",
    )  # fmt: skip
    provider = ScriptedProvider([refusal, TimeoutError("model down")])

    assert complete(provider, 0) is refusal
    with pytest.raises(TimeoutError, match="model down"):
        complete(provider, 1)


def test_it_reports_the_usage_it_is_given(settings) -> None:
    settings.DESKHAND_SCRIPTED_TOKENS = (11, 22)
    settings.DESKHAND_SCRIPTED_COST_MICROS = 33

    default = complete(ScriptedProvider([[say("x")]]), 0)
    custom = complete(
        ScriptedProvider([[say("x")]], input_tokens=1, output_tokens=2, cost_micros=3), 0
    )

    assert (default.input_tokens, default.output_tokens, default.cost_micros) == (11, 22, 33)
    assert (custom.input_tokens, custom.output_tokens, custom.cost_micros) == (1, 2, 3)
    assert (custom.provider, custom.model) == ("scripted", "scripted-test")
