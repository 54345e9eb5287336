"""Refunds through the payments adapter: claimed first, made under the ledger key, recorded.

Whole runs through real DBOS (in process) against the payments double; the SIGKILL
cases are in ``test_effect_crashes.py``.
"""

from __future__ import annotations

import copy
import datetime as dt

import pytest
from django.utils import timezone

from agent.effects import payments
from agent.effects.payments import API_VERSION
from agent.ledger.provider_reconciliation import reconcile_merchant
from agent.models import Step
from agent.models.ledger import LedgerEntry
from agent.providers.policy import PolicyProvider
from approvals.models import Approval
from deskhand.domain.desk.models import Refund
from tests.durability.helpers import assert_accounting_matches, decide, start
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.support.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "owner@northwind.test"
CHARGE = "pi_northwind_nw_1042"


def refund_run():
    run = start("NW-1", OWNER)
    wait_parked(str(run.id))
    decide(run, OWNER)
    return wait_terminal(str(run.id))


def test_a_refund_is_made_at_the_provider_under_the_ledger_key(
    dbos_executor, northwind_pays_at_the_provider
):
    api = northwind_pays_at_the_provider
    run = refund_run()

    assert run.status == "succeeded", run.summary
    entry = LedgerEntry.objects.get(tool="issue_refund")
    assert (entry.state, entry.ok, entry.adapter, entry.provider_calls) == (
        "done",
        True,
        "payments",
        1,
    )
    [made] = api.refunds
    assert (made["payment_intent"], made["amount"], made["currency"]) == (CHARGE, 3800, "usd")
    assert made["metadata"]["deskhand_ledger_key"] == entry.key
    [post] = [r for r in api.requests if r.method == "POST"]
    # What the SDK sends: the ledger key as Idempotency-Key, the pinned version, the key as
    # a bearer token, the refund by payment intent, form-encoded.
    assert post.headers["Idempotency-Key"] == entry.key
    assert post.headers["Stripe-Version"] == API_VERSION
    assert post.headers["Authorization"] == f"Bearer {api.api_key}"
    assert ("payment_intent", CHARGE) in post.form and ("amount", "3800") in post.form
    refund = Refund.objects.get()
    assert (refund.status, refund.provider_refund_id, refund.amount_cents) == (
        "succeeded",
        made["id"],
        3800,
    )
    assert entry.provider_ref == made["id"]
    step = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert step.ok and not step.replayed
    assert step.result["adapter"] == "payments" and step.result["effect_state"] == "done"
    assert "Refunded 38.00 USD against NW-1042" in run.summary
    assert_accounting_matches(run)


def test_a_stripe_refund_retried_by_the_sdk_after_a_dropped_connection_pays_once(
    dbos_executor, northwind_pays_at_the_provider, monkeypatch
):
    api = northwind_pays_at_the_provider
    # Our own loop gets one attempt: the second request can only be the SDK's retry.
    monkeypatch.setenv("DESKHAND_EFFECT_ATTEMPTS", "2")
    calls_of_ours = []
    real = payments.create_refund
    monkeypatch.setattr(
        payments, "create_refund", lambda *a, **kw: calls_of_ours.append(1) or real(*a, **kw)
    )
    api.lose_response()  # the double refunds, stores the answer, drops the connection
    run = refund_run()

    assert run.status == "succeeded", run.summary
    assert len(api.refunds) == 1  # exactly one refund at the double
    posts = [r for r in api.requests if r.method == "POST"]
    assert len(posts) == 2 and posts[1].replayed and len(calls_of_ours) == 1
    entry = LedgerEntry.objects.get(tool="issue_refund")
    assert {p.headers["Idempotency-Key"] for p in posts} == {entry.key}
    assert (entry.state, entry.provider_calls) == ("done", 2)
    assert Refund.objects.get().provider_refund_id == api.refunds[0]["id"]
    assert "Refunded 38.00 USD against NW-1042" in run.summary


def test_rate_limits_and_server_errors_are_retried_inside_the_step(
    dbos_executor, northwind_pays_at_the_provider
):
    api = northwind_pays_at_the_provider
    api.rate_limited(retry_after=0.5)
    api.server_error()
    run = refund_run()

    assert run.status == "succeeded", run.summary
    assert [r.status for r in api.requests if r.method == "POST"] == [429, 500, 200]
    assert len(api.refunds) == 1
    assert LedgerEntry.objects.get(tool="issue_refund").provider_calls == 3
    assert Step.objects.get(run=run, kind="tool", tool="issue_refund").attempts == 1


@pytest.fixture
def model_inputs(monkeypatch) -> list[list[dict]]:
    """What the (keyless) model is handed, call by call."""
    calls: list[list[dict]] = []
    complete = PolicyProvider.complete

    def recording(self, *, system, messages, tools):
        calls.append(copy.deepcopy(messages))
        return complete(self, system=system, messages=messages, tools=tools)

    monkeypatch.setattr(PolicyProvider, "complete", recording)
    return calls


def tool_results(messages: list[dict]) -> list[dict]:
    return [
        b
        for m in messages
        if m["role"] == "user" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]


def test_a_decline_is_told_to_the_model_consumes_the_approval_and_moves_no_money(
    dbos_executor, northwind_pays_at_the_provider, model_inputs
):
    api = northwind_pays_at_the_provider
    api.charge(CHARGE, 4800, disputed=True)
    run = refund_run()

    assert run.status == "succeeded", run.summary
    assert api.refunds == [] and Refund.objects.count() == 0
    entry = LedgerEntry.objects.get(tool="issue_refund")
    assert (entry.state, entry.ok) == ("failed", False)
    step = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert not step.ok
    assert "declined" in step.result["text"] and "charge_disputed" in step.result["text"]
    assert "charged back" in step.result["text"]  # the provider's own reason
    # The model was handed the provider's reason as an error result, and answered it.
    told = [b for b in tool_results(model_inputs[-1]) if "charge_disputed" in str(b["content"])]
    assert told and told[0]["is_error"] is True
    # The approval is used up: it is approved, and its one ledger entry says failed.
    approval = Approval.objects.get(run=run, tool="issue_refund")
    assert approval.status == "approved" and list(approval.ledger_entries.all()) == [entry]
    assert "No money moved" in run.summary
    assert "Approved but not done: Refund 38.00 USD against order NW-1042" in run.summary
    assert_accounting_matches(run)


def test_a_provider_down_for_the_whole_budget_leaves_the_claim_in_flight_until_reconciled(
    dbos_executor, northwind_pays_at_the_provider, monkeypatch
):
    api = northwind_pays_at_the_provider
    monkeypatch.setenv("DESKHAND_EFFECT_ATTEMPTS", "2")
    api.server_error(times=2)
    run = refund_run()

    # The step could not settle it: the model was told it is being checked, nothing more.
    step = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert not step.ok and "has not confirmed" in step.result["text"]
    assert step.result["effect_state"] == "pending"
    entry = LedgerEntry.objects.get(tool="issue_refund")
    assert entry.state == "pending" and Refund.objects.get().status == "pending"
    assert "In flight, not yet confirmed by payments" in run.summary
    assert "No money moved" not in run.summary  # it might have

    # Later, reconciliation looks it up (never re-sends): the provider never made it.
    LedgerEntry.objects.update(created_at=entry.created_at - dt.timedelta(hours=1))
    reconcile_merchant(entry.merchant_id, now=timezone.now())
    entry.refresh_from_db()
    assert (entry.state, entry.ok) == ("failed", False)
    assert Refund.objects.count() == 0 and api.refunds == []
    assert [r.method for r in api.requests].count("POST") == 2
    run.refresh_from_db()
    assert "Settled later: Not done: Refund 38.00 USD against order NW-1042" in run.summary
    assert "No money moved for it" in run.summary


def test_a_cancel_while_the_provider_is_answering_reports_the_refund_truthfully(
    dbos_executor, northwind_pays_at_the_provider
):
    from agent.run.services import run_cancel
    from tests.durability.helpers import user

    api = northwind_pays_at_the_provider
    api.slow(3.0)
    run = start("NW-1", OWNER)
    wait_parked(str(run.id))
    decide(run, OWNER)
    until("the refund to reach the provider", lambda: any(r.method == "POST" for r in api.requests))

    run = run_cancel(run=run, user=user(OWNER))  # the claim committed; the call is in flight
    entry = LedgerEntry.objects.get(tool="issue_refund")
    until(
        "the in-flight call's outcome recorded on the ledger",
        lambda: LedgerEntry.objects.get(tool="issue_refund").state != "pending",
    )
    run.refresh_from_db()

    assert run.status == "cancelled"
    assert len(api.refunds) == 1 and Refund.objects.get().status == "succeeded"
    entry.refresh_from_db()
    assert entry.state == "done"
    # The cancel found the claim in flight and said so; the record then added what happened.
    assert "In flight, not yet confirmed by payments: Refund 38.00 USD" in run.summary
    assert "Settled later: Refunded 38.00 USD against NW-1042 (confirmed by payments" in run.summary
    assert "No money moved" not in run.summary
    late = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert late.ok and late.result.get("late") is True


def test_a_refund_a_person_narrowed_is_made_at_the_provider_for_the_approved_amount(
    dbos_executor, northwind_pays_at_the_provider
):
    """Approve with changes meets an external effect: the provider is asked for the approved
    amount under the approved call's key, and the model reads that a person changed it."""
    from agent.tools.narrowing import approval_approve_with_changes
    from tests.durability.helpers import pending_approval, user

    api = northwind_pays_at_the_provider
    run = start("NW-1", OWNER)
    wait_parked(str(run.id))
    approval = pending_approval(run)
    approval_approve_with_changes(
        approval=approval,
        user=user(OWNER),
        changes={"amount_cents": 2000},
        reason="the grinder part was fine",
        channel="cli",
    )
    run = wait_terminal(str(run.id))

    assert run.status == "succeeded", run.summary
    [made] = api.refunds
    assert made["amount"] == 2000
    entry = LedgerEntry.objects.get(tool="issue_refund")
    approval.refresh_from_db()
    assert entry.arguments["amount_cents"] == 2000 and entry.args_hash == approval.approved_hash
    [post] = [r for r in api.requests if r.method == "POST"]
    assert post.headers["Idempotency-Key"] == entry.key
    assert Refund.objects.get().amount_cents == 2000
    step = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert step.arguments["amount_cents"] == 2000
    assert "approved this call with changes" in step.result["text"]
    assert "Refunded 20.00 USD against NW-1042" in run.summary
