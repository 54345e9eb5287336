"""``replay --at N --json`` for every step of a recorded run equals what the provider was handed.

One multi-turn run with two failed reads, a person's denial, staff guidance and a
turn after it. The provider records every call it receives; for every step N the
command's ``messages``, as canonical JSON, must be byte-equal to what the model
call at N was handed, and for a step that is not a model call, to that
conversation as far as the loop had built it before N (see agent.conversation):
every complete turn equal to the next model call's, the last user turn a prefix
of it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent.conversation import live
from agent.models import Step, payloads
from agent.providers.scripted import call, say
from agent.replay import rebuild
from agent.run.steering import run_steer
from agent.tools import api_schemas
from agent.tools.registry import canonical_json
from tests.durability.helpers import decide, start, user
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.replay.conftest import replay_cmd

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = [
    [say("Looking the order up."), call("get_order", reference="NW-1042"), call("get_order")],
    [call("issue_refund", order_reference="NW-1042", amount_cents=3800, reason="stale beans")],
    [say("Checking once more."), call("get_order", reference="NW-1042")],
    [say("A person declined; leaving it to them.")],
]


def at_json(run_id: str, n: int) -> dict[str, Any]:
    code, out = replay_cmd(run_id, "--at", str(n), "--json")
    assert code == 0, out
    assert len(out.strip().splitlines()) == 1  # exactly one object
    return json.loads(out)


def assert_built_so_far(held: list[dict[str, Any]], sent: list[dict[str, Any]]) -> None:
    """``held`` is ``sent`` as far as it was built: whole turns equal, the last one a prefix."""
    assert 0 < len(held) <= len(sent)
    last = len(held) - 1
    assert canonical_json(held[:last]) == canonical_json(sent[:last])
    assert held[last]["role"] == sent[last]["role"]
    blocks = held[last]["content"]
    assert canonical_json(blocks) == canonical_json(sent[last]["content"][: len(blocks)])


@pytest.fixture
def recorded(dbos_executor, provide):
    recording = provide(SCRIPT)
    run = wait_parked(str(start("NW-1", "owner@northwind.test").id))
    run_steer(run=run, user=user("agent@northwind.test"), body="Ask for photos first.")
    decide(run, "owner@northwind.test", approve=False, reason="Photos first, please.")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary
    return run, recording


def test_every_step_at_json_is_what_the_provider_was_handed(recorded):
    run, recording = recorded
    steps = list(Step.objects.filter(run=run).order_by("seq"))
    kinds = [s.kind for s in steps]
    assert {"model", "tool", "approval", "note", "final"} <= set(kinds)
    models = [s for s in steps if s.kind == "model"]
    assert len(models) == len(recording.seen) == 4
    denied = next(s for s in steps if s.kind == "approval" and s.payload.event == "denied")
    note = next(s for s in steps if s.kind == "note")

    for n in [*(s.seq for s in steps), steps[-1].seq + 1]:
        view = at_json(str(run.id), n)
        assert set(view) == {
            "system",
            "tools",
            "messages",
            "prompt_sha256",
            "prompt_version",
            "prompt_current",
            "knowledge_read",
        }
        later = [i for i, m in enumerate(models) if m.seq >= n]
        k = later[0] if later else len(models) - 1
        # The system prompt and tools are the ones that call was sent, and the hash is its record.
        assert view["system"] == recording.systems[k]
        assert view["tools"] == recording.tools[k] == api_schemas()
        assert view["prompt_sha256"] == models[k].arguments["prompt_sha256"]
        assert view["prompt_sha256"] == live.prompt_sha256(recording.systems[k], recording.tools[k])
        assert view["prompt_current"] is True
        held, sent = view["messages"], recording.seen[k]
        if later and models[k].seq == n:
            assert canonical_json(held) == canonical_json(sent), f"model step {n}"
        elif later:
            assert_built_so_far(held, sent)
        else:  # after the last model call: its messages and its reply
            last_reply = payloads.read_as(models[-1], payloads.ModelPayload).content
            assert canonical_json(held) == canonical_json(
                [*sent, {"role": "assistant", "content": last_reply}]
            ), f"step {n}"

    # The turn after the denial: the denial and the guidance share one user turn, as sent.
    after = recording.seen[2][-1]
    assert [b["type"] for b in after["content"]] == ["tool_result", "text"]
    assert after["content"][0]["is_error"] is True
    assert "Photos first, please." in after["content"][0]["content"]
    assert after["content"][1]["text"].startswith("Staff guidance from agent@northwind.test")
    # Before the note step the guidance is not there yet; before the next model call it is.
    before_note = at_json(str(run.id), note.seq)["messages"]
    assert before_note[-1]["content"] == after["content"][:1]
    assert note.seq == denied.seq + 1


def test_at_json_says_when_the_prompt_is_no_longer_the_one_sent(recorded, monkeypatch):
    run, recording = recorded
    first = Step.objects.filter(run=run, kind="model").order_by("seq").first()
    monkeypatch.setattr(
        rebuild, "system_prompt", lambda token=None: "A changed prompt " + str(token)
    )
    view = at_json(str(run.id), first.seq)
    assert view["prompt_sha256"] == first.arguments["prompt_sha256"]
    assert view["prompt_current"] is False
    # The prompt shown is still the recorded one, the one that call was sent.
    assert view["system"] == recording.systems[0]
    assert view["prompt_version"] == first.payload.prompt_version
    assert canonical_json(view["messages"]) == canonical_json(recording.seen[0])
