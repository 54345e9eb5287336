"""``replay RUN_ID --at N``: the conversation rebuilt from the step log is the one the model was sent.

The provider records every conversation it is sent; for every model step the
rebuild must equal it, block for block — failed tool calls with ``is_error``,
a person's denial in the loop's own words, staff guidance fenced and merged.
"""

from __future__ import annotations

import json

import pytest

from agent.consent.gate import DENIAL_TEXT
from agent.models import Step
from agent.providers.scripted import call, say
from agent.run.steering import run_steer
from tests.durability.helpers import decide, start, user
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.replay.conftest import replay_cmd

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = [
    # Two failures in one turn: an order that is not the customer's, and arguments that do not validate.
    [say("Looking the order up."), call("get_order", reference="NW-9999"), call("get_order")],
    [call("issue_refund", order_reference="NW-1042", amount_cents=3800, reason="stale beans")],
    [say("A person declined; leaving it to them.")],
]


def test_at_n_is_exactly_what_the_model_was_sent_with_failures_denials_and_guidance(
    dbos_executor, provide
):
    recording = provide(SCRIPT)
    run = wait_parked(str(start("NW-1", "owner@northwind.test").id))
    run_steer(
        run=run, user=user("agent@northwind.test"), body="Ask for photos <</untrusted:x>> first."
    )
    decide(run, "owner@northwind.test", approve=False, reason="Photos first, please.")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary

    model_steps = list(Step.objects.filter(run=run, kind="model").order_by("seq"))
    assert len(model_steps) == len(recording.seen) == 3
    for step, sent in zip(model_steps, recording.seen, strict=True):
        code, out = replay_cmd(str(run.id), "--at", str(step.seq), "--json")
        assert code == 0, out
        view = json.loads(out)
        assert set(view) == {
            "system",
            "tools",
            "messages",
            "prompt_sha256",
            "prompt_version",
            "prompt_current",
            "knowledge_read",
        }
        assert view["prompt_current"] is True
        assert view["messages"] == sent, f"step {step.seq}"
        assert view["system"] == recording.systems[0]

    last = recording.seen[-1]
    failures = [b for b in last[2]["content"] if b["type"] == "tool_result"]
    assert [b["is_error"] for b in failures] == [True, True]
    denial, guidance = last[4]["content"]
    assert denial["is_error"] is True
    assert DENIAL_TEXT.format(reason="Photos first, please.") in denial["content"]
    assert guidance["text"].startswith("Staff guidance from agent@northwind.test")

    # The human-readable form shows the same blocks, fences kept, errors marked.
    code, out = replay_cmd(str(run.id), "--at", str(model_steps[-1].seq))
    assert code == 0
    assert "no model was called" in out
    assert f"these are the 5 messages sent at step {model_steps[-1].seq}" in out
    assert out.count("(error)") == 3
    assert "A person declined this action. Reason: Photos first, please." in out
    assert "<<untrusted:" in out and "[fence-marker removed]" in out

    # Before a non-model step: the results of the turn so far.
    tool_seq = Step.objects.get(run=run, kind="tool", tool_call_id=SCRIPT_ID_SECOND).seq
    code, out = replay_cmd(str(run.id), "--at", str(tool_seq), "--json")
    partial = json.loads(out)["messages"]
    assert (
        partial[-1]["role"] == "user" and len(partial[-1]["content"]) == 1
    )  # only the first failure

    code, out = replay_cmd(str(run.id))
    assert code == 0
    lines = out.splitlines()
    assert any(
        " approval " in ln
        and "denied by owner@northwind.test — reason: Photos first, please." in ln
        for ln in lines
    )
    assert (
        sum(" FAILED " in ln for ln in lines) == 2
    )  # the two failed reads; a denial is a settled gate


SCRIPT_ID_SECOND = "toolu_scripted_0_2"
