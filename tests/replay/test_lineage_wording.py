"""A real model rewords every call: which words make a new effect is the registry's, per tool.

Through the strict Messages-API double (a fresh ``tool_use`` id on every reply), a fork
re-proposes an effect its origin already made, in other words:

* a refund is (order, amount): a reworded reason is the same refund, answered;
* an email is (ticket, recipient) with its body as content: the identical body under
  another subject is answered; another body to the same customer is a new email a person
  approves, with the earlier one on the card;
* a cancellation is its order: another reason is the same cancellation, answered.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from agent.ledger import lineage
from agent.models import Run, Step
from agent.models.ledger import LedgerEntry, LedgerState
from agent.replay.fork import fork_run
from agent.run.services import run_create
from agent.tools import REGISTRY
from deskhand.domain.desk.models import Order, OutboundEmail, Refund, Ticket
from tests.durability.helpers import (
    assert_every_effect_was_approved,
    decide,
    pending_approval,
    start,
    user,
)
from tests.fixtures.dbos import wait_terminal
from tests.support.fake_anthropic import policy_double, settle
from tests.support.messages_api import MessagesApi, text, tool_use

pytestmark = pytest.mark.django_db(transaction=True)

NW_OWNER, LU_OWNER = "owner@northwind.test", "owner@lumen.test"


@pytest.fixture
def api(settings) -> Iterator[MessagesApi]:
    with policy_double(settings, "claude-sonnet-4-6") as double:
        yield double


def asked_for(run: Run, tool: str) -> int:
    return Step.objects.get(run=run, kind="model", result__content__contains=[{"name": tool}]).seq


def fork(run: Run, seq: int, email: str) -> Run:
    return fork_run(run=run, seq=seq, user=user(email))


def propose(api: MessagesApi, name: str, **args: Any) -> None:
    """The next model reply: one call, then the turn after it ends."""
    api.reply([tool_use(name, **args)], "tool_use")
    api.reply([text("Done.")])


def test_the_registry_says_once_which_fields_identify_an_effect_and_which_are_its_content() -> None:
    declared = {
        name: (t.identity, t.content, tuple(f for f, _ in t.narrowable))
        for name, t in REGISTRY.items()
        if t.identity
    }
    assert declared == {
        "issue_refund": (("order_reference", "amount_cents"), (), ("amount_cents",)),
        "send_customer_email": (("reference",), ("body",), ("body",)),
        "reply_to_customer": (("reference",), ("body",), ("body",)),
        "ask_customer": (("reference",), ("question",), ("question",)),
        "cancel_order": (("order_reference",), (), ()),
    }


def test_a_fork_rewording_the_refunds_reason_is_answered_from_the_ledger(
    dbos_executor, api: MessagesApi
) -> None:
    original = wait_terminal(str(decide_first(start("NW-1", NW_OWNER)).id))
    assert original.status == "succeeded" and original.provider == "anthropic"
    [made] = Refund.objects.all()
    propose(
        api,
        "issue_refund",
        order_reference="NW-1042",
        amount_cents=made.amount_cents,
        reason="Goods arrived damaged; refunding the goods (worded afresh).",
    )
    again = wait_terminal(str(fork(original, asked_for(original, "issue_refund"), NW_OWNER).id))

    assert again.status == "succeeded", again.summary
    assert again.approvals.count() == 0
    assert Refund.objects.count() == 1 and not LedgerEntry.objects.filter(run=again).exists()
    assert f"- Refunded 38.00 USD against NW-1042. (run {original.id})" in again.summary
    answer = api.bodies()[-1]["messages"][-1]["content"][0]
    assert answer["type"] == "tool_result" and not answer.get("is_error")
    assert f"Already done in run {original.id}" in answer["content"]


def decide_first(run: Run) -> Run:
    run = settle(run)
    decide(run, NW_OWNER)
    return run


def emailed_lu2() -> tuple[Run, dict[str, Any]]:
    run = settle(start("LU-2", LU_OWNER))
    decide(run, LU_OWNER)
    run = settle(run)
    email = pending_approval(run)
    assert email.tool == "send_customer_email"
    decide(run, LU_OWNER)
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded" and OutboundEmail.objects.count() == 1
    return run, dict(email.arguments)


def test_an_email_with_the_identical_body_under_another_subject_is_not_sent_again(
    dbos_executor, api: MessagesApi
) -> None:
    original, sent = emailed_lu2()
    propose(api, "send_customer_email", **{**sent, "subject": "About your two charges"})
    again = wait_terminal(
        str(fork(original, asked_for(original, "send_customer_email"), LU_OWNER).id)
    )

    assert again.status == "succeeded", again.summary
    assert again.approvals.count() == 0
    assert OutboundEmail.objects.count() == 1
    assert "Emailed the customer on LU-2" in again.summary.split("New in this run:")[0]


def test_a_reworded_email_to_the_same_customer_needs_a_person_who_sees_the_earlier_one(
    dbos_executor, api: MessagesApi
) -> None:
    original, sent = emailed_lu2()
    reworded = "Hello again. We refunded the duplicate charge, LU-2311; LU-2310 stands."
    propose(api, "send_customer_email", **{**sent, "body": reworded})
    again = settle(fork(original, asked_for(original, "send_customer_email"), LU_OWNER))

    assert again.status == "awaiting_approval", again.summary
    card = pending_approval(again)
    assert card.arguments["body"] == reworded
    [earlier] = [p for p in card.prior_effects if p["tool"] == "send_customer_email"]
    assert (earlier["run_id"], earlier["lineage"]) == (str(original.id), True)
    assert earlier["what"].startswith("Emailed the customer on LU-2")
    console = Client()
    console.force_login(user(LU_OWNER))
    page = console.get(reverse("console:run", kwargs={"run_id": again.id})).content.decode()
    assert "Already done to this order or customer" in page
    assert sent["body"].splitlines()[0][:40] in page  # the earlier email's words, on the card

    decide(again, LU_OWNER)  # a person read both and sends the second
    again = wait_terminal(str(again.id))
    assert again.status == "succeeded", again.summary
    assert OutboundEmail.objects.count() == 2
    assert_every_effect_was_approved()


def test_a_fork_cancelling_the_same_order_for_another_reason_is_answered_from_the_ledger(
    dbos_executor, api: MessagesApi
) -> None:
    propose(api, "cancel_order", order_reference="LU-2311", reason="Duplicate of LU-2310.")
    first = settle(start("LU-2", LU_OWNER))
    assert pending_approval(first).tool == "cancel_order"
    decide(first, LU_OWNER)
    first = wait_terminal(str(first.id))
    assert first.status == "succeeded", first.summary
    assert Order.objects.get(reference="LU-2311").status == "cancelled"

    propose(
        api, "cancel_order", order_reference="LU-2311", reason="The customer was charged twice."
    )
    again = wait_terminal(str(fork(first, asked_for(first, "cancel_order"), LU_OWNER).id))

    assert again.status == "succeeded", again.summary
    assert again.approvals.count() == 0
    assert LedgerEntry.objects.filter(tool="cancel_order").count() == 1
    assert f"Cancelled order LU-2311. (run {first.id})" in again.summary


def test_a_claim_not_yet_confirmed_answers_the_same_refund_and_is_on_the_card_of_another(
    tseeded,
) -> None:
    """A refund sent to the payments provider and not yet confirmed may have been made."""
    run = run_create(ticket=Ticket.objects.get(reference="NW-1"), user=user(NW_OWNER))
    args = {"order_reference": "NW-1042", "amount_cents": 3800, "reason": "Stale beans."}
    LedgerEntry.objects.create(
        key=f"{run.pk}:toolu_a:x",
        merchant_id=run.merchant_id,
        root_run=run,
        run=run,
        tool="issue_refund",
        tool_call_id="toolu_a",
        args_hash="x",
        identity=lineage.call_identity("issue_refund", args),
        arguments=args,
        ok=False,
        result="",
        state=LedgerState.PENDING,
        adapter="payments",
    )
    reworded = {**args, "reason": "The beans were stale, refunding them."}
    found = lineage.lookup(run, {"id": "toolu_b", "name": "issue_refund", "input": reworded})
    assert found is not None and found.tool_call_id == "toolu_a"
    assert "its outcome is not yet confirmed" in lineage.answer_text(found)
    other = {**args, "amount_cents": 1000}
    assert lineage.lookup(run, {"id": "toolu_c", "name": "issue_refund", "input": other}) is None
    [prior] = lineage.prior_effects(run, "issue_refund", other)
    assert prior["what"] == (
        "Refund of 38.00 USD against NW-1042 in flight (sent to payments, not yet confirmed)."
    )
