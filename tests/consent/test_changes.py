"""Approve with changes: a person approves a narrower call, and exactly that call is performed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction

from agent.consent.gate import gate_request
from agent.models import Step
from agent.models.ledger import LedgerEntry
from agent.providers.scripted import call, say
from agent.tools import args_hash
from agent.tools.narrowing import (
    NarrowingRefused,
    approval_approve_with_changes,
    narrowed_arguments,
)
from approvals.models import Approval, AuditEvent
from deskhand.domain.desk.models import OutboundEmail, Refund
from tests.consent.conftest import bare_run, gate_call, refund, settle
from tests.durability.helpers import (
    assert_every_effect_was_approved,
    pending_approval,
    start,
    user,
)
from tests.fixtures.dbos import wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)


def test_nw1s_refund_approved_at_a_smaller_amount_pays_that_amount_once_and_the_model_is_told(
    dbos_executor, scripted
):
    provider = scripted([[refund(3800)], [say("I refunded what the lead approved.")]])
    run = settle(start("NW-1", "owner@northwind.test"))
    approval = pending_approval(run)
    proposed_hash = approval.args_hash

    approval_approve_with_changes(
        approval=approval,
        user=user("agent@northwind.test"),
        changes={"amount_cents": 2000},
        reason="half the beans were fine",
        channel="cli",
    )
    run = wait_terminal(str(run.id))

    assert run.status == "succeeded", run.summary
    [paid] = Refund.objects.filter(run=run)
    assert paid.amount_cents == 2000
    approval.refresh_from_db()
    approved = {**approval.arguments, "amount_cents": 2000}
    # The proposal stays what the model asked; the decision records what was approved.
    assert (approval.arguments["amount_cents"], approval.args_hash) == (3800, proposed_hash)
    assert approval.approved_arguments == approved
    assert approval.approved_hash == args_hash("issue_refund", approved) != proposed_hash
    # The ledger records the approved call: its key, hash and identity are the approved one's.
    [entry] = LedgerEntry.objects.filter(run=run)
    assert entry.arguments == approved and entry.args_hash == approval.approved_hash
    assert entry.key.endswith(approval.approved_hash[:16])
    # The model's next turn carries the changed amount and says a person changed it.
    [result] = [b for b in provider.seen[1][-1]["content"] if b["type"] == "tool_result"]
    text = result["content"] if isinstance(result["content"], str) else json.dumps(result)
    assert '"refunded_cents": 2000' in text
    assert "approved this call with changes: amount_cents from 38.00 USD to 20.00 USD" in text
    assert "agent@northwind.test" in text
    # The summary states the approved amount, from the ledger.
    assert "Refunded 20.00 USD against NW-1042" in run.summary
    assert "approved with changes by agent@northwind.test" in run.summary
    assert "Refunded 38.00" not in run.summary
    # The step log shows the approval settled with the change, and the call performed.
    settled = Step.objects.get(run=run, kind="approval", result__event="approved")
    assert settled.result["changed"] == "amount_cents from 38.00 USD to 20.00 USD"
    assert settled.result["executes_hash"] == approval.approved_hash
    tool_step = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert tool_step.arguments["amount_cents"] == 2000
    [event] = AuditEvent.objects.filter(action="approval.approve_changed")
    assert event.detail["proposed_arguments"]["amount_cents"] == 3800
    assert event.detail["approved_arguments"]["amount_cents"] == 2000
    assert event.detail["approved_hash"] == approval.approved_hash
    assert_every_effect_was_approved()


@pytest.fixture
def opened(tseeded) -> Approval:
    run = bare_run()
    return Approval.objects.get(pk=gate_request(str(run.id), 1, gate_call(3800)).approval_id)


@pytest.mark.parametrize(
    ("changes", "sentence"),
    [
        ({"amount_cents": 4800}, "approving 48.00 USD is more than the 38.00 USD proposed"),
        ({"amount_cents": 0}, "amount_cents must be at least 0.01 USD"),
        ({"amount_cents": True}, "amount_cents must be a whole number"),
        ({"order_reference": "NW-1043"}, "order_reference of issue_refund cannot be changed"),
        ({"reason": "because"}, "reason of issue_refund cannot be changed"),
        ({"customer": "x"}, "issue_refund has no argument 'customer'"),
    ],
)
def test_a_change_that_does_not_narrow_the_call_is_refused_and_records_nothing(
    opened, changes, sentence
):
    with pytest.raises(NarrowingRefused, match=sentence):
        approval_approve_with_changes(
            approval=opened, user=user("owner@northwind.test"), changes=changes, channel="cli"
        )
    opened.refresh_from_db()
    assert opened.status == "pending" and opened.approved_arguments is None
    assert not AuditEvent.objects.filter(action__startswith="approval.").exists()


def test_a_decision_never_turns_one_tool_into_another(opened):
    with pytest.raises(NarrowingRefused, match="cannot turn it into cancel_order"):
        approval_approve_with_changes(
            approval=opened,
            user=user("owner@northwind.test"),
            changes={},
            tool="cancel_order",
            channel="web",
        )
    opened.refresh_from_db()
    assert opened.status == "pending"


def test_the_database_refuses_any_change_to_what_was_approved(opened):
    # Not while pending: approved arguments are written only by the decision itself.
    with pytest.raises(IntegrityError, match="recorded once"), transaction.atomic():
        Approval.objects.filter(pk=opened.pk).update(
            approved_arguments={**opened.arguments, "amount_cents": 100}, approved_hash="b" * 64
        )
    approval_approve_with_changes(
        approval=opened,
        user=user("owner@northwind.test"),
        changes={"amount_cents": 2000},
        channel="cli",
    )
    opened.refresh_from_db()
    assert opened.approved_arguments["amount_cents"] == 2000
    # Nor after it: neither the arguments nor the hash, not even by raw SQL.
    with (
        pytest.raises(IntegrityError, match="recorded once"),
        transaction.atomic(),
        connection.cursor() as cur,
    ):
        cur.execute(
            "UPDATE approvals_approval SET approved_arguments = jsonb_set(approved_arguments, "
            "'{amount_cents}', '3800') WHERE id = %s",
            [opened.pk],
        )
    with pytest.raises(IntegrityError, match="recorded once"), transaction.atomic():
        Approval.objects.filter(pk=opened.pk).update(approved_hash=opened.args_hash)
    with pytest.raises(IntegrityError, match="only a policy decision"), transaction.atomic():
        Approval.objects.filter(pk=opened.pk).update(policy_rule=1)
    opened.refresh_from_db()
    assert opened.approved_arguments["amount_cents"] == 2000


def test_a_run_refuses_an_approved_call_that_is_wider_than_the_proposal(tseeded):
    """Defence in depth: the run re-checks the narrowing before it acts (a hand-made row)."""
    from agent.ledger.effect import execute_irreversible

    run = bare_run()
    call_ = gate_call(3800)
    approval = Approval.objects.get(pk=gate_request(str(run.id), 1, call_).approval_id)
    wider = {**approval.arguments, "amount_cents": 9000}
    # A row approved with a wider call: the trigger allows the transition, the run refuses.
    Approval.objects.filter(pk=approval.pk).update(
        status="approved",
        approved_arguments=wider,
        approved_hash=args_hash("issue_refund", wider),
        channel="cli",
    )
    run.status = "running"
    run.save(update_fields=["status"])
    out = execute_irreversible(str(run.id), 2, call_, str(approval.id))
    assert out.stop == "approval_mismatch"
    assert "more than the 38.00 USD proposed" in out.detail
    assert Refund.objects.count() == 0 and LedgerEntry.objects.count() == 0


def test_the_decide_command_narrows_a_refund_and_refuses_a_larger_one_in_one_sentence(opened):
    with pytest.raises(CommandError, match=r"approving 50\.00 USD is more than the 38\.00 USD"):
        call_command(
            "decide",
            str(opened.pk),
            "approve",
            "--as",
            "agent@northwind.test",
            "--amount-cents",
            "5000",
        )
    with pytest.raises(CommandError, match="a denial approves nothing"):
        call_command(
            "decide",
            str(opened.pk),
            "deny",
            "--as",
            "agent@northwind.test",
            "--amount-cents",
            "100",
            "--reason",
            "no",
        )
    opened.refresh_from_db()
    assert opened.status == "pending"
    from io import StringIO

    out = StringIO()
    call_command(
        "decide",
        str(opened.pk),
        "approve",
        "--as",
        "agent@northwind.test",
        "--amount-cents",
        "2000",
        "--json",
        stdout=out,
    )
    printed = json.loads(out.getvalue())
    assert printed["changed"] is True and printed["approved_arguments"]["amount_cents"] == 2000
    assert printed["approved_hash"] != printed["args_hash"]


def test_an_email_approved_with_an_edited_body_goes_to_the_same_customer_with_that_body(
    dbos_executor, scripted, tmp_path: Path
):
    email = call(
        "send_customer_email",
        reference="NW-1",
        subject="About your order",
        body="We are sorry, here is a refund of everything you ever bought.",
    )
    scripted([[email], [say("Sent the edited email.")]])
    run = settle(start("NW-1", "owner@northwind.test"))
    approval = pending_approval(run)
    edited = tmp_path / "body.txt"
    edited.write_text("We are sorry the beans were stale; a refund for that bag is on its way.\n")
    call_command(
        "decide",
        str(approval.pk),
        "approve",
        "--as",
        "owner@northwind.test",
        "--body-file",
        str(edited),
    )
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary
    [sent] = OutboundEmail.objects.filter(run=run)
    assert sent.body == (  # as the person edited it, signed by the merchant
        "We are sorry the beans were stale; a refund for that bag is on its way.\n\nNorthwind Coffee"
    )
    assert sent.customer_id == run.ticket.customer_id
    approval.refresh_from_db()
    assert approval.changed and approval.approved_arguments["reference"] == "NW-1"
    assert "body edited" in run.summary
    assert_every_effect_was_approved()


def test_narrowing_keeps_the_recipient_and_the_tool_checks():
    proposed = {"reference": "NW-1", "subject": "Hello there", "body": "A body of some length."}
    with pytest.raises(
        NarrowingRefused, match="reference of send_customer_email cannot be changed"
    ):
        narrowed_arguments("send_customer_email", proposed, {"reference": "NW-2"})
    with pytest.raises(NarrowingRefused, match="body"):
        narrowed_arguments("send_customer_email", proposed, {"body": "short"})
    with pytest.raises(NarrowingRefused, match="approved as proposed or not at all"):
        narrowed_arguments(
            "cancel_order", {"order_reference": "NW-1", "reason": "abc"}, {"reason": "xyz"}
        )
