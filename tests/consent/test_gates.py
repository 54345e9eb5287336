"""Several gates in one run, and denials that the model sees and the summary tells truthfully."""

from __future__ import annotations

import json
import re

import pytest

from agent.models import Step
from agent.models.ledger import LedgerEntry
from agent.providers.scripted import say
from approvals.models import Approval
from approvals.services import approval_decide
from deskhand.domain.desk.models import OutboundEmail, Refund
from tests.consent.conftest import refund, settle
from tests.durability.helpers import (
    assert_every_effect_was_approved,
    decide,
    pending_approval,
    start,
    user,
)
from tests.fixtures.dbos import wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)


def test_each_irreversible_call_in_lu2_has_its_own_approval_and_one_never_unlocks_the_other(
    dbos_executor,
):
    run = settle(start("LU-2", "agent@lumen.test"))
    refund_approval = pending_approval(run)
    assert refund_approval.tool == "issue_refund"
    assert (
        refund_approval.arguments["order_reference"],
        refund_approval.arguments["amount_cents"],
    ) == ("LU-2311", 17900)

    decide(run, "owner@lumen.test")
    run = settle(run)
    email_approval = pending_approval(run)
    assert email_approval.tool == "send_customer_email"
    assert email_approval.pk != refund_approval.pk
    assert email_approval.tool_call_id != refund_approval.tool_call_id
    assert email_approval.topic != refund_approval.topic
    assert email_approval.args_hash != refund_approval.args_hash
    # The approver reads the whole email the hash covers: subject and body.
    assert email_approval.arguments["subject"] in email_approval.preview
    assert email_approval.arguments["body"] in email_approval.preview
    assert (run.status, OutboundEmail.objects.count(), Refund.objects.count()) == (
        "awaiting_approval",
        0,
        1,
    )

    approval_decide(
        approval=email_approval,
        user=user("agent@lumen.test"),
        approve=False,
        reason="Marco asked for a phone call instead.",
        channel="web",
    )
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary
    assert OutboundEmail.objects.count() == 0
    assert Refund.objects.get().amount_cents == 17900
    [entry] = LedgerEntry.objects.all()
    assert entry.approval_id == refund_approval.pk  # each effect executed under its own approval
    assert "Refunded 179.00 USD against LU-2311." in run.summary
    assert "Declined by a person: Email the customer on LU-2" in run.summary
    assert "(reason: Marco asked for a phone call instead.)" in run.summary
    email_approval.refresh_from_db()
    assert (email_approval.status, email_approval.channel) == ("denied", "web")
    assert_every_effect_was_approved()


def test_a_denied_refund_goes_back_to_the_model_as_an_error_carrying_the_reason(
    dbos_executor, scripted
):
    provider = scripted([[refund(3800)], [say("The refund was declined; I escalated the ticket.")]])
    run = settle(start("NW-1", "owner@northwind.test"))
    decide(run, "owner@northwind.test", approve=False, reason="She already got store credit.")
    run = wait_terminal(str(run.id))

    assert run.status == "succeeded", run.summary
    [result] = [b for b in provider.seen[1][-1]["content"] if b["type"] == "tool_result"]
    assert result["is_error"] is True
    assert "A person declined this action. Reason: She already got store credit." in json.dumps(
        result["content"]
    )
    assert Refund.objects.count() == 0
    assert LedgerEntry.objects.count() == 0
    denial = Step.objects.get(run=run, kind="approval", result__event="denied")
    assert denial.result["reason"] == "She already got store credit."


def test_the_summary_of_a_denied_refund_never_says_refunded(dbos_executor):
    run = settle(start("NW-1", "owner@northwind.test"))  # the default policy reader
    decide(run, "agent@northwind.test", approve=False, reason="Beans were fine when tasted.")
    run = wait_terminal(str(run.id))

    assert run.status == "succeeded", run.summary
    assert "Refunded" not in run.summary
    assert not re.search(
        r"refunded\s+\$?\d", run.summary, re.IGNORECASE
    )  # no claim of an amount paid
    assert "Declined by a person: Refund 38.00 USD against order NW-1042" in run.summary
    assert Refund.objects.count() == 0
    # The model adapted instead of asking again for the same thing (then told the customer).
    assert Approval.objects.filter(run=run, tool="issue_refund").count() == 1
