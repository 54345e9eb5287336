"""The run page's model view: what the model was sent at a step, built by agent.conversation."""

from __future__ import annotations

import json

import pytest

from agent.providers import clear_overrides, install_override
from agent.providers.scripted import ScriptedProvider, call, say
from agent.tools.registry import canonical_json
from tests.console.conftest import LU_OWNER, NW_OWNER, client_for
from tests.durability.helpers import decide, start
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.replay.conftest import Recording, replay_cmd

SCRIPT = [
    [say("Looking the order up."), call("get_order", reference="NW-1042")],
    [call("issue_refund", order_reference="NW-1042", amount_cents=3800, reason="stale beans")],
    [say("Declined; leaving it.")],
]


@pytest.mark.django_db(transaction=True)
def test_the_model_view_shows_what_each_model_call_was_sent(dbos_executor):
    recording = Recording(ScriptedProvider(SCRIPT))
    install_override("*", recording)
    try:
        _check(recording)
    finally:
        clear_overrides()


def _check(recording: Recording) -> None:
    run = wait_parked(str(start("NW-1", NW_OWNER).id))
    decide(run, NW_OWNER, approve=False, reason="Photos first, please.")
    run = wait_terminal(str(run.id))
    owner = client_for(NW_OWNER)
    page = owner.get(f"/runs/{run.id}/").content.decode()
    models = list(run.step_log.filter(kind="model").order_by("seq"))
    assert len(models) == len(recording.seen) == 3
    for step, sent in zip(models, recording.seen, strict=True):
        assert f"/runs/{run.id}/steps/{step.seq}/sent" in page
        response = owner.get(f"/runs/{run.id}/steps/{step.seq}/sent")
        assert response.status_code == 200
        view = response.context["view"]
        assert canonical_json(view.messages) == canonical_json(sent)
        code, out = replay_cmd(str(run.id), "--at", str(step.seq), "--json")
        assert code == 0 and json.loads(out)["messages"] == view.messages  # one rule, two readers
        html = response.content.decode()
        assert f"These are the {len(sent)} messages that call was sent." in html
        assert "The system prompt and tools are today's" in html
    last = owner.get(f"/runs/{run.id}/steps/{models[-1].seq}/sent").content.decode()
    assert "result for toolu_scripted_1_0 (error)" in last
    assert "A person declined this action. Reason: Photos first, please." in last

    assert owner.get(f"/runs/{run.id}/steps/999/sent").status_code == 404
    assert client_for(LU_OWNER).get(f"/runs/{run.id}/steps/1/sent").status_code == 404
