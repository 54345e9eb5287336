"""Whole runs on the ``anthropic`` provider against the strict Messages-API double.

The run records ``anthropic`` / ``claude-sonnet-4-6`` and every model call goes
through the real SDK and ``AnthropicProvider`` to the double, which decides
like the policy reader, counts tokens by its documented rule and refuses any
request the real API would: so these runs also prove the loop's history (tool
results, minted tool ids, the order of turns) is one the API accepts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from django.db.models import Sum

from agent.models import Run, Step
from agent.providers.pricing import cost_micros
from deskhand.domain.desk.models import Refund, Ticket
from tests.durability.helpers import (
    assert_accounting_matches,
    assert_every_effect_was_approved,
    decide,
    pending_approval,
    start,
)
from tests.fixtures.dbos import wait_terminal
from tests.support.fake_anthropic import policy_double, settle
from tests.support.messages_api import MessagesApi, tokens_of

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "claude-sonnet-4-6"


@pytest.fixture
def api(settings) -> Iterator[MessagesApi]:
    with policy_double(settings, MODEL) as double:
        yield double


def assert_model_steps_are_the_doubles_replies(run: Run, api: MessagesApi) -> None:
    model_steps = Step.objects.filter(run=run, kind="model").order_by("seq")
    assert [s.status for s in api.requests] == [200] * len(api.requests)  # none refused
    assert api.count == model_steps.count()
    assert model_steps.aggregate(c=Sum("cost_micros"))["c"] == sum(
        cost_micros(
            s.run.model, s.input_tokens, s.output_tokens, s.cache_read_tokens, s.cache_write_tokens
        )
        for s in model_steps
    )
    assert all(
        s.input_tokens + s.cache_read_tokens + s.cache_write_tokens > 0 and s.output_tokens > 0
        for s in model_steps
    )


def test_nw1_through_the_double_holds_the_gate_and_refunds_once(
    dbos_executor, api: MessagesApi
) -> None:
    run = settle(start("NW-1", "owner@northwind.test"))
    assert (run.provider, run.model) == ("anthropic", MODEL)
    approval = pending_approval(run)
    assert (approval.tool, approval.arguments["amount_cents"]) == ("issue_refund", 3800)
    assert Refund.objects.count() == 0

    decide(run, "agent@northwind.test")
    run = wait_terminal(str(run.id))

    assert run.status == "succeeded"
    assert [r.amount_cents for r in Refund.objects.all()] == [3800]
    # The double minted a fresh id for every call; each came back as a tool_result.
    ids = [
        b["id"]
        for body in api.bodies()
        for m in body["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "tool_use"
    ]
    assert ids and all(i.startswith("toolu_") and "scripted" not in i for i in ids)
    assert_model_steps_are_the_doubles_replies(run, api)
    assert_accounting_matches(run)
    assert_every_effect_was_approved()
    # Less to the model: no request carried the customer's full address, only its masked form.
    sent = [json.dumps(body) for body in api.bodies()]
    assert not any("dana.whitfield@example.com" in body for body in sent)
    assert any("d***@e***.com" in body for body in sent)


def test_lu2_through_the_double_asks_twice_and_moves_money_once(
    dbos_executor, api: MessagesApi
) -> None:
    run = settle(start("LU-2", "owner@lumen.test"))
    assert pending_approval(run).arguments["order_reference"] == "LU-2311"
    decide(run, "agent@lumen.test")
    run = settle(run)
    assert pending_approval(run).tool == "send_customer_email"
    decide(run, "agent@lumen.test")
    run = wait_terminal(str(run.id))

    assert run.status == "succeeded"
    assert [(r.order.reference, r.amount_cents) for r in Refund.objects.all()] == [
        ("LU-2311", 17900)
    ]
    assert_model_steps_are_the_doubles_replies(run, api)
    assert_accounting_matches(run)


def test_every_seeded_ticket_sends_only_requests_the_api_accepts(
    dbos_executor, api: MessagesApi
) -> None:
    owners = {"Northwind": "owner@northwind.test", "Lumen": "owner@lumen.test"}
    for ticket in Ticket.objects.select_related("merchant").order_by("reference"):
        run = settle(start(ticket.reference, owners[ticket.merchant.name.split()[0]]))
        while run.status == "awaiting_approval":
            decide(run, owners[ticket.merchant.name.split()[0]], approve=False, reason="Not now.")
            run = settle(run)
        assert run.status == "succeeded", (ticket.reference, run.stop_reason, run.stop_detail)
    assert api.count > 6
    refused = [(s.status, s.body) for s in api.requests if s.status != 200]
    assert refused == []


# A model whose minimum cacheable prefix (1024 by the double's table) our tools + system exceed.
CACHING_MODEL = "claude-sonnet-5"


def test_caching_pays_within_a_run_and_across_runs_of_a_merchant(
    dbos_executor, api: MessagesApi, settings
) -> None:
    settings.ANTHROPIC_MODEL = CACHING_MODEL
    run = settle(start("NW-1", "owner@northwind.test"))
    assert pending_approval(run).arguments["amount_cents"] == 3800
    decide(run, "agent@northwind.test")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded"
    assert [r.amount_cents for r in Refund.objects.all()] == [3800]

    calls = list(Step.objects.filter(run=run, kind="model").order_by("seq"))
    assert len(calls) >= 3
    assert calls[0].cache_write_tokens > 0  # tools + system (and the first turn) written
    for later in calls[1:]:
        # Each call reads at least the previous call's prefix back.
        assert later.cache_read_tokens > 0, later.seq
    # Counted everywhere: the run's totals, its token count (and so its cap), its cost.
    run.refresh_from_db()
    assert run.cache_read_tokens == sum(s.cache_read_tokens for s in calls) > 0
    assert run.cache_write_tokens == sum(s.cache_write_tokens for s in calls) > 0
    assert run.total_tokens == sum(
        s.input_tokens + s.output_tokens + s.cache_read_tokens + s.cache_write_tokens for s in calls
    )
    assert_model_steps_are_the_doubles_replies(run, api)
    assert_accounting_matches(run)
    # The request carried two breakpoints: the system block and the newest message.
    body = api.bodies()[1]
    assert "cache_control" in body["system"][-1]
    assert "cache_control" in body["messages"][-1]["content"][-1]
    # No run's own fence token is in the system prompt any more.
    assert all("<<untrusted:TOKEN>>" in b["system"][0]["text"] for b in api.bodies())

    # A second run of the same merchant reads the first run's tools + system prefix.
    second = settle(start("NW-1", "owner@northwind.test"))
    first_call = Step.objects.filter(run=second, kind="model").order_by("seq").first()
    assert first_call is not None and first_call.cache_read_tokens > 0
    tools_and_system = sum(tokens_of(t) for t in api.bodies()[0]["tools"]) + tokens_of(
        {"type": "text", "text": api.bodies()[0]["system"][0]["text"]}
    )
    assert first_call.cache_read_tokens >= tools_and_system
    assert first_call.cost_micros == cost_micros(
        CACHING_MODEL,
        first_call.input_tokens,
        first_call.output_tokens,
        first_call.cache_read_tokens,
        first_call.cache_write_tokens,
    )
