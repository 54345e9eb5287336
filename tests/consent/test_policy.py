"""Merchant approval policy: a rule a person wrote approves the routine; everything else waits."""

from __future__ import annotations

import threading

import pytest
from django.db import IntegrityError, connection, transaction

from agent.consent.gate import gate_request
from agent.consent.policy import PolicyRefused, policy_save
from agent.models import Step
from agent.providers.scripted import call, say
from approvals.models import Approval, ApprovalPolicy, AuditEvent
from deskhand.domain.desk.models import Merchant, Refund
from deskhand.domain.desk.permissions import NotAllowed
from tests.consent.conftest import bare_run, gate_call, refund, settle
from tests.durability.helpers import assert_every_effect_was_approved, start, user
from tests.fixtures.dbos import wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _no_rules_yet(request):
    """These tests start from merchants whose owners wrote no rules yet (the seed's owners
    wrote one, approving replies to customers: agent.management.commands.seed)."""
    for name in ("tseeded", "seeded"):
        if name in request.fixturenames:
            request.getfixturevalue(name)
            ApprovalPolicy.objects.all().delete()


SMALL_REFUNDS = [{"tool": "issue_refund", "max_amount_cents": 1500, "max_per_day": 3}]


def northwind() -> Merchant:
    return Merchant.objects.get(slug="northwind")


@pytest.fixture
def rule(tseeded) -> ApprovalPolicy:
    """Northwind's owner writes "refunds up to 15.00, at most 3 a day"."""
    return policy_save(
        merchant=northwind(), user=user("owner@northwind.test"), rules=SMALL_REFUNDS, channel="web"
    )


def test_a_small_refund_proceeds_with_no_person_and_names_the_policy_version_and_rule(
    dbos_executor, scripted, rule
):
    scripted([[refund(1000)], [say("Refunded 10.00 under the store's policy.")]])
    run = wait_terminal(str(start("NW-1", "owner@northwind.test").id))

    assert run.status == "succeeded", run.summary
    [paid] = Refund.objects.filter(run=run)
    assert paid.amount_cents == 1000
    [approval] = Approval.objects.filter(run=run)
    assert (approval.status, approval.channel, approval.decided_by) == ("approved", "policy", None)
    assert (approval.policy_id, approval.policy.version, approval.policy_rule) == (rule.pk, 1, 1)
    assert approval.approved_hash == approval.args_hash
    assert "approved by the merchant's policy v1 rule 1" in run.summary
    settled = Step.objects.get(run=run, kind="approval", result__event="approved")
    assert settled.result["policy"] == "policy v1 rule 1" and settled.result["channel"] == "policy"
    [event] = AuditEvent.objects.filter(action="approval.approve", run=run)
    assert (event.actor, event.channel) == (None, "policy")
    assert event.detail["policy_version"] == 1 and event.detail["rule"] == SMALL_REFUNDS[0]
    assert_every_effect_was_approved()


def test_a_refund_above_the_rule_waits_for_a_person(dbos_executor, scripted, rule):
    scripted([[refund(2000)], [say("done")]])
    run = settle(start("NW-1", "owner@northwind.test"))
    assert run.status == "awaiting_approval"
    [approval] = Approval.objects.filter(run=run)
    assert (approval.status, approval.channel, approval.policy_id) == ("pending", "", None)


def test_the_fourth_small_refund_of_the_day_waits_for_a_person(rule):
    run = bare_run()
    statuses = [
        gate_request(str(run.id), n, gate_call(500, call_id=f"toolu_{n}")).status
        for n in range(1, 5)
    ]
    assert statuses == ["approved", "approved", "approved", "pending"]
    assert Approval.objects.filter(channel="policy").count() == 3


def test_two_runs_racing_for_the_last_slot_get_one_policy_approval_and_one_person(rule):
    first = bare_run("NW-1")
    for n in (1, 2):  # two of the day's three slots taken
        gate_request(str(first.id), n, gate_call(500, call_id=f"toolu_{n}"))
    second = bare_run("NW-4")
    calls = [
        (str(first.id), 3, gate_call(700, call_id="toolu_race_a")),
        (str(second.id), 1, gate_call(700, call_id="toolu_race_b", order="NW-1101")),
    ]
    barrier = threading.Barrier(2)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def race(run_id: str, seq: int, call_: dict) -> None:
        try:
            barrier.wait(10)
            outcomes.append(gate_request(run_id, seq, call_).status)
        except BaseException as exc:  # surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=race, args=c) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert sorted(outcomes) == ["approved", "pending"]
    assert Approval.objects.filter(channel="policy").count() == 3


def test_no_rule_ever_approves_an_email_even_one_written_into_the_table(rule):
    with pytest.raises(PolicyRefused, match="send_customer_email always needs a person"):
        policy_save(
            merchant=northwind(),
            user=user("owner@northwind.test"),
            rules=[{"tool": "send_customer_email", "max_per_day": 5}],
            channel="web",
        )
    # A version that bypassed the form (a bug, a hand-written row) still approves no email.
    ApprovalPolicy.objects.create(
        merchant=northwind(),
        version=2,
        rules=[{"tool": "send_customer_email", "max_per_day": 5}],
        created_by=user("owner@northwind.test"),
    )
    email = call(
        "send_customer_email",
        reference="NW-1",
        subject="Hello there",
        body="A body of some length.",
    )
    out = gate_request(str(bare_run().id), 1, {**email, "id": "toolu_mail"})
    assert out.status == "pending"


def test_a_policy_never_approves_what_a_ceiling_refuses(rule):
    merchant = northwind()
    merchant.daily_refund_ceiling_cents = 800
    merchant.save(update_fields=["daily_refund_ceiling_cents"])
    out = gate_request(str(bare_run().id), 1, gate_call(1000))
    assert "daily refund ceiling" in out.refused
    assert not Approval.objects.exists()  # nobody asked, no rule consulted, nothing approved


def test_only_an_owner_writes_the_policy_and_each_change_is_one_audit_event(rule):
    with pytest.raises(NotAllowed, match="only an owner may change the approval policy"):
        policy_save(
            merchant=northwind(), user=user("agent@northwind.test"), rules=[], channel="cli"
        )
    policy_save(merchant=northwind(), user=user("owner@northwind.test"), rules=[], channel="web")
    events = list(AuditEvent.objects.filter(action="policy.change").order_by("created_at"))
    assert [e.detail["version"] for e in events] == [1, 2]
    assert events[1].detail["previous_rules"] == SMALL_REFUNDS and events[1].detail["rules"] == []
    assert all(e.actor.email == "owner@northwind.test" for e in events)
    # Versions are never edited, not even by code that bypasses save().
    with pytest.raises(IntegrityError, match="never edited"), transaction.atomic():
        ApprovalPolicy.objects.filter(pk=rule.pk).update(rules=[])
    # With the rules emptied, a small refund waits for a person again.
    assert gate_request(str(bare_run().id), 1, gate_call(500)).status == "pending"
