"""Forks and re-runs against a model that mints a fresh ``tool_use`` id on every reply.

The strict Messages-API double stands in for Claude: every tool call it returns has
a new id, so nothing here can lean on call ids. An irreversible call is matched
against its lineage's effects by business identity (``agent.ledger.lineage``): the same
effect is answered from the ledger, a different one is put to a person with what
the lineage and the ticket's earlier runs already did on the card, and the refund
ceilings count across the ticket's runs.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from agent.models import Run, Step
from agent.models.ledger import LedgerEntry
from agent.providers.policy import PolicyProvider
from agent.replay.fork import fork_run
from approvals.models import Approval
from deskhand.domain.desk.models import Merchant, OutboundEmail, Refund
from tests.durability.helpers import (
    assert_every_effect_was_approved,
    decide,
    pending_approval,
    start,
    user,
)
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.replay.conftest import replay_cmd
from tests.support.fake_anthropic import policy_double, settle
from tests.support.messages_api import MessagesApi, text, tool_use

pytestmark = pytest.mark.django_db(transaction=True)

NW_OWNER, LU_OWNER = "owner@northwind.test", "owner@lumen.test"
MODEL = "claude-sonnet-4-6"


@pytest.fixture
def api(settings) -> Iterator[MessagesApi]:
    with policy_double(settings, MODEL) as double:
        yield double


def asked_for(run: Run, tool: str) -> int:
    """The model step whose reply proposed ``tool``."""
    step = Step.objects.get(run=run, kind="model", result__content__contains=[{"name": tool}])
    return step.seq


def refunded_nw1() -> Run:
    run = wait_parked(str(start("NW-1", NW_OWNER).id))
    decide(run, NW_OWNER)
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded" and run.provider == "anthropic"
    assert [r.amount_cents for r in Refund.objects.all()] == [3800]
    return run


def fork(run: Run, seq: int, email: str = NW_OWNER) -> Run:
    return fork_run(run=run, seq=seq, user=user(email))


def approvals_json() -> str:
    out = io.StringIO()
    call_command("approvals", "--json", stdout=out)
    return out.getvalue()


def call_ids(api: MessagesApi, tool: str) -> list[str]:
    """The ids the double minted for ``tool`` across every reply it sent back."""
    return sorted(
        {
            b["id"]
            for body in api.bodies()
            for m in body["messages"]
            if m["role"] == "assistant"
            for b in m["content"]
            if b["type"] == "tool_use" and b["name"] == tool
        }
    )


def test_a_fork_proposing_the_same_refund_under_a_fresh_id_is_answered_from_the_ledger(
    dbos_executor, api: MessagesApi
) -> None:
    original = refunded_nw1()
    again = wait_terminal(str(fork(original, asked_for(original, "issue_refund")).id))

    assert again.status == "succeeded", again.summary
    assert again.approvals.count() == 0  # nobody was asked again
    assert [r.amount_cents for r in Refund.objects.all()] == [3800]
    assert not LedgerEntry.objects.filter(run=again).exists()
    assert len(call_ids(api, "issue_refund")) == 2  # the same refund, two different ids
    answered = [
        b["content"]
        for body in api.bodies()
        for m in body["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result" and f"Already done in run {original.id}" in str(b)
    ]
    assert answered and "Refunded 38.00 USD against NW-1042" in str(answered[0])
    assert f"- Refunded 38.00 USD against NW-1042. (run {original.id})" in again.summary
    assert "New in this run:\nNo money moved" in again.summary
    # Replay rebuilds exactly what the fork's model read, ledger answer included.
    _, listing = replay_cmd(str(again.id))
    assert any("answered from the ledger" in ln for ln in listing.splitlines())
    assert_every_effect_was_approved()


def test_a_fork_proposing_the_same_email_under_a_fresh_id_sends_nothing(
    dbos_executor, api: MessagesApi
) -> None:
    run = settle(start("LU-2", LU_OWNER))
    decide(run, LU_OWNER)
    run = settle(run)
    assert pending_approval(run).tool == "send_customer_email"
    decide(run, LU_OWNER)
    original = wait_terminal(str(run.id))
    assert original.status == "succeeded" and OutboundEmail.objects.count() == 1

    again = wait_terminal(
        str(fork(original, asked_for(original, "send_customer_email"), LU_OWNER).id)
    )
    assert again.status == "succeeded", again.summary
    assert again.approvals.count() == 0
    assert OutboundEmail.objects.count() == 1
    assert len(call_ids(api, "send_customer_email")) == 2
    assert "Emailed the customer on LU-2" in again.summary.split("New in this run:")[0]
    assert_every_effect_was_approved()


def test_a_fork_proposing_another_refund_is_asked_again_and_stays_within_the_order_total(
    dbos_executor, api: MessagesApi
) -> None:
    original = refunded_nw1()
    api.reply(
        [
            tool_use(
                "issue_refund",
                order_reference="NW-1042",
                amount_cents=1000,
                reason="The shipping too.",
            )
        ],
        "tool_use",
    )
    api.reply([text("Done.")])
    greedy = settle(fork(original, asked_for(original, "issue_refund")))

    assert greedy.status == "awaiting_approval", greedy.summary
    card = pending_approval(greedy)
    assert card.arguments["amount_cents"] == 1000
    assert [(p["what"], p["run_id"], p["lineage"]) for p in card.prior_effects] == [
        ("Refunded 38.00 USD against NW-1042.", str(original.id), True)
    ]
    # The card shows it in the console and in `approvals --json`.
    console = Client()
    console.force_login(user(NW_OWNER))
    page = console.get(reverse("console:approvals")).content.decode()
    assert "Already done to this order or customer" in page
    assert "Refunded 38.00 USD against NW-1042." in page
    out = approvals_json()
    [row] = [json.loads(ln) for ln in out.splitlines() if json.loads(ln)["id"] == str(card.id)]
    assert row["prior_effects"][0]["what"] == "Refunded 38.00 USD against NW-1042."

    # Approved: the order is refunded up to its total across the lineage, and no further (a
    # refund above what is left is refused before anyone is asked: the refund pre-check).
    decide(greedy, NW_OWNER)
    greedy = wait_terminal(str(greedy.id))
    assert greedy.status == "succeeded", greedy.summary
    assert sorted(r.amount_cents for r in Refund.objects.all()) == [1000, 3800]
    assert sum(r.amount_cents for r in Refund.objects.all()) == 4800  # the order's total


def test_a_second_run_on_a_refunded_ticket_sees_the_refund_and_the_ceiling_counts_it(
    dbos_executor, api: MessagesApi
) -> None:
    first = refunded_nw1()
    Merchant.objects.filter(slug="northwind").update(run_refund_ceiling_cents=4000)

    def refund(cents: int) -> None:
        api.reply(
            [
                tool_use(
                    "issue_refund",
                    order_reference="NW-1042",
                    amount_cents=cents,
                    reason="The shipping as well.",
                )
            ],
            "tool_use",
        )

    refund(200)  # within the 40.00 ceiling with the first run's 38.00
    refund(800)  # the 8.00 still left on the order, but not under the ceiling
    api.reply([text("Done.")])
    second = settle(start("NW-1", NW_OWNER))

    assert second.status == "awaiting_approval" and second.forked_from_id is None
    card = pending_approval(second)
    assert [(p["what"], p["run_id"], p["lineage"]) for p in card.prior_effects] == [
        ("Refunded 38.00 USD against NW-1042.", str(first.id), False)
    ]
    decide(second, NW_OWNER)
    second = wait_terminal(str(second.id))
    assert second.status == "succeeded", second.summary
    assert sorted(r.amount_cents for r in Refund.objects.all()) == [200, 3800]
    # The ceiling counts both runs' refunds, before anyone is asked: one approval, and the
    # model reads why the second refund was not put to a person.
    assert Approval.objects.filter(run=second).count() == 1
    answer = api.bodies()[-1]["messages"][-1]["content"][0]
    assert answer["type"] == "tool_result" and answer["is_error"] is True
    assert "this run's refund ceiling is 40.00 USD, 0.00 USD is left" in answer["content"]


def test_a_fork_from_step_one_of_a_refunded_run_finishes_with_a_summary(
    dbos_executor, provide
) -> None:
    """The keyless provider reads the refund in the order record and proposes nothing more
    (the 10.00 shipping left is not the policy's to refund, issue 29)."""
    provide(PolicyProvider())
    original = wait_parked(str(start("NW-1", NW_OWNER).id))
    decide(original, NW_OWNER)
    original = wait_terminal(str(original.id))
    assert original.status == "succeeded"

    again = wait_terminal(str(settle(fork(original, 1)).id))
    assert (again.status, again.stop_reason) == ("succeeded", "end_turn"), again.summary
    assert not again.approvals.filter(tool="issue_refund").exists()
    assert "Inherited from the lineage (already done, not repeated):" in again.summary
    assert f"- Refunded 38.00 USD against NW-1042. (run {original.id})" in again.summary
    assert "38.00 USD went back on NW-1042 already" in again.summary
    assert [r.amount_cents for r in Refund.objects.all()] == [3800]
