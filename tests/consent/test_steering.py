"""Steering: a staff note reaches the model at its next turn, as staff guidance, and is logged."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agent.models import Step
from agent.providers.scripted import say
from approvals.models import AuditEvent, StaffNote
from tests.consent.conftest import refund, settle
from tests.durability.helpers import decide, start
from tests.fixtures.dbos import wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = "Tell Dana the replacement bag ships on Monday."


def test_a_staff_note_reaches_the_model_at_its_next_turn_as_fenced_staff_guidance(
    dbos_executor, scripted
):
    provider = scripted([[refund(3800)], [say("Refunded the two bags; replacement ships Monday.")]])
    run = settle(start("NW-1", "agent@northwind.test"))
    assert run.status == "awaiting_approval"

    out = StringIO()
    call_command("steer", str(run.id), NOTE, "--as", "agent@northwind.test", stdout=out)
    assert "the agent reads it at its next turn" in out.getvalue()
    decide(run, "owner@northwind.test")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary

    first, second = provider.seen
    assert NOTE not in json.dumps(first)  # sent while the run waited: it arrives with the next turn
    turn = second[-1]
    assert turn["role"] == "user"
    guidance = [b for b in turn["content"] if b["type"] == "text"]
    results = [b for b in turn["content"] if b["type"] == "tool_result"]
    assert len(guidance) == 1 and len(results) == 1
    assert guidance[0]["text"].startswith(
        "Staff guidance from agent@northwind.test (merchant staff"
    )
    assert NOTE in guidance[0]["text"]
    assert NOTE not in json.dumps(results)  # never mixed into what a tool (or customer) said
    assert NOTE not in json.dumps(second[0])  # nor into the customer's ticket

    logged = Step.objects.get(run=run, kind="note")
    assert logged.result["notes"] == [{"author": "agent@northwind.test", "body": NOTE}]
    note = StaffNote.objects.get(run=run)
    event = AuditEvent.objects.get(action="run.steer", run=run)
    assert (event.actor.email, event.channel, event.detail["note"], note.channel) == (
        "agent@northwind.test",
        "cli",
        note.pk,
        "cli",
    )


def test_the_steer_command_refuses_a_viewer_an_ended_run_and_an_unknown_run(tseeded):
    from tests.consent.conftest import bare_run

    run = bare_run()
    with pytest.raises(
        CommandError,
        match=r"^viewer@northwind\.test is a viewer at Northwind Coffee .* not steer runs\.$",
    ):
        call_command("steer", str(run.id), "hello", "--as", "viewer@northwind.test")
    with pytest.raises(CommandError, match=r"^no run 00000000-0000-0000-0000-000000000000\.$"):
        call_command(
            "steer", "00000000-0000-0000-0000-000000000000", "hi", "--as", "owner@northwind.test"
        )
    run.status = "succeeded"
    run.save(update_fields=["status"])
    with pytest.raises(CommandError, match="is already succeeded; notes reach only live runs"):
        call_command("steer", str(run.id), "hello", "--as", "owner@northwind.test")
    assert StaffNote.objects.count() == 0
