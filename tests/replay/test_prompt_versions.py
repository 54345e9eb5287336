"""Recorded prompts: each model call's prompt version is stored once, without the fence token,
and ``replay --at`` prints the one a run was sent — saying so when today's differs."""

from __future__ import annotations

import json
import threading

import pytest
from django.db import connection

from agent.conversation import prompt_versions, prompts
from agent.conversation.prompts import system_prompt
from agent.models import PromptVersion, Run, Step
from agent.tools import api_schemas
from tests.durability.helpers import start
from tests.fixtures.dbos import wait_terminal
from tests.replay.conftest import replay_cmd
from tests.replay.test_bad_input import finished_run_without_history

pytestmark = pytest.mark.django_db(transaction=True)

OLDER = prompts.SYSTEM_PROMPT.replace(
    "You are Deskhand,", "You are Deskhand (the older prompt, kept for the record),"
)


def test_a_run_recorded_under_an_older_prompt_at_prints_it_and_says_todays_differs(
    dbos_executor, provide, monkeypatch
):
    provide()  # the keyless policy reader
    monkeypatch.setattr(prompts, "SYSTEM_PROMPT", OLDER)
    run = wait_terminal(str(start("NW-3", "owner@northwind.test").id))
    first = Step.objects.filter(run=run, kind="model").order_by("seq").first()
    assert run.prompt_version_id and first.payload.prompt_version == run.prompt_version_id
    stored = PromptVersion.objects.get(pk=run.prompt_version_id)
    assert "the older prompt, kept for the record" in stored.system_template

    # Under that same prompt, --at says it is today's.
    code, out = replay_cmd(str(run.id), "--at", str(first.seq))
    assert code == 0, out
    assert "today's system prompt and tools are the same as these" in out

    monkeypatch.undo()  # today's code: the prompt has changed since the run
    code, out = replay_cmd(str(run.id), "--at", str(first.seq))
    assert code == 0, out
    assert f"system: the recorded prompt version {run.prompt_version_id[:12]}" in out
    assert "today's system prompt or tools differ from these (the ones recorded)" in out
    assert "You are Deskhand (the older prompt, kept for the record)," in out
    assert "issue_refund" in out.split(f"── tools ({len(api_schemas())};")[1]

    code, out = replay_cmd(str(run.id), "--at", str(first.seq), "--json")
    view = json.loads(out)
    assert view["prompt_version"] == run.prompt_version_id
    assert view["prompt_current"] is False
    assert view["system"].startswith("You are Deskhand (the older prompt, kept for the record),")
    assert view["tools"] == stored.tools == api_schemas()
    assert view["prompt_sha256"] == first.payload.prompt_sha256


def test_a_version_is_the_same_for_every_run_and_stored_once(tseeded):
    """The hash is taken without the fence token: two runs' per-run texts are one version,
    and recording it from many threads at once stores one row."""
    tools = api_schemas()
    a = prompt_versions.record(system_prompt("aaaa1111bbbb2222cccc"), tools, "aaaa1111bbbb2222cccc")
    b = prompt_versions.record(system_prompt("dddd3333eeee4444ffff"), tools, "dddd3333eeee4444ffff")
    assert a == b
    assert prompt_versions.render(PromptVersion.objects.get(pk=a).system_template, "t0k") == (
        system_prompt("t0k")
    )
    # The token-free prompt (fence token in the opening turn) is another version.
    c = prompt_versions.record(system_prompt(None), tools, "")
    assert c != a

    changed = [*tools[:-1], {**tools[-1], "description": "another description"}]
    digests: list[str] = []
    barrier = threading.Barrier(6)

    def record() -> None:
        barrier.wait()
        try:
            digests.append(prompt_versions.record(system_prompt(None), changed, ""))
        finally:
            connection.close()

    threads = [threading.Thread(target=record) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(digests) == 6 and len(set(digests)) == 1
    assert PromptVersion.objects.count() == 3


def test_a_run_recorded_before_versions_were_kept_says_so_plainly(tseeded):
    run = finished_run_without_history()
    assert Run.objects.get(pk=run.pk).prompt_version_id is None
    code, out = replay_cmd(str(run.id), "--at", "1")
    assert code == 0, out
    assert "this run was recorded before prompt versions were kept" in out
    assert "today's (agent/conversation/prompts.py) is shown" in out
    code, out = replay_cmd(str(run.id), "--at", "1", "--json")
    view = json.loads(out)
    assert view["prompt_version"] is None and view["prompt_sha256"] is None
