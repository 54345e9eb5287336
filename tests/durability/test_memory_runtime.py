"""The loop runs on any runtime: a few lines of in-memory runtime drive it without DBOS."""

from __future__ import annotations

import asyncio

import pytest
from django.db import close_old_connections

from agent.loop import run_agent
from agent.providers import clear_overrides, install_override
from agent.providers.scripted import ScriptedProvider, call, say
from agent.run.services import run_create
from agent.runtime import MemoryRuntime
from deskhand.domain.desk.models import Ticket
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
    assert outcome.status == "succeeded"
    assert run.status == "succeeded"
    # One step a turn (notes, bounds and the call: agent.run.turns.turn), then the tool.
    assert rt.step_names[:4] == ["run.begin", "model", "tool.get_ticket", "model"]
    assert list(run.step_log.values_list("kind", flat=True)) == ["model", "tool", "model", "final"]


class _RateLimitedOnce(ScriptedProvider):
    """Answers its first call with a 429 naming a wait, then as scripted."""

    def __init__(self, turns, retry_after: float) -> None:
        from agent.providers.anthropic import RetryPolicy

        super().__init__(turns)
        self.retry = RetryPolicy()
        self.retry_after, self.refused = retry_after, 0

    def complete(self, *, system, messages, tools):
        from agent.providers.base import ProviderError

        if not self.refused:
            self.refused += 1
            raise ProviderError(
                kind="rate_limit_error",
                message="slow down",
                transient=True,
                status=429,
                retry_after=self.retry_after,
            )
        return super().complete(system=system, messages=messages, tools=tools)


@pytest.mark.parametrize(("retry_after", "finished"), [(30.0, True), (600.0, False)])
def test_a_named_wait_is_slept_by_the_runtime_then_the_call_is_made_again(
    tseeded, retry_after, finished
):
    ticket = Ticket.objects.get(reference="NW-2")
    run = run_create(ticket=ticket, user=user("owner@northwind.test"))
    install_override(str(run.id), _RateLimitedOnce([[say("done")]], retry_after))
    try:
        rt = MemoryRuntime(str(run.id), after_step=close_old_connections)
        asyncio.run(run_agent(rt))
    finally:
        clear_overrides()
    run.refresh_from_db()
    if finished:  # within the 90 s budget: slept once, by the runtime, then answered
        assert rt.slept == [30.0]
        assert rt.step_names.count("model") == 2
        assert (run.status, run.waiting_until, run.wait_reason) == ("succeeded", None, "")
    else:  # past the budget: no sleep, the run fails with the API's error
        assert rt.slept == []
        assert (run.status, run.stop_reason) == ("failed", "provider_error")
        assert "rate_limit_error" in run.stop_detail and run.waiting_until is None
