"""The loop runs on any runtime: a few lines of in-memory runtime drive it without DBOS."""

from __future__ import annotations

import asyncio

import pytest
from django.db import close_old_connections

from agent.loop import run_agent
from agent.providers import clear_overrides, install_override
from agent.providers.scripted import ScriptedProvider, call, say
from agent.runs import run_create
from agent.runtime import MemoryRuntime
from deskhand.desk.models import Ticket
from tests.durability.helpers import user

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_loop_needs_no_execution_engine(tseeded):
    ticket = Ticket.objects.get(reference="NW-2")
    run = run_create(ticket=ticket, user=user("owner@northwind.test"))
    install_override(
        str(run.id), ScriptedProvider([[call("get_ticket", reference="NW-2")], [say("done")]])
    )
    try:
        rt = MemoryRuntime(str(run.id), after_step=close_old_connections)
        outcome = asyncio.run(run_agent(rt))
    finally:
        clear_overrides()
    run.refresh_from_db()
    assert outcome["status"] == "succeeded"
    assert run.status == "succeeded"
    assert rt.step_names[:4] == ["run.begin", "bounds.check", "model", "tool.get_ticket"]
    assert list(run.step_log.values_list("kind", flat=True)) == ["model", "tool", "model", "final"]
