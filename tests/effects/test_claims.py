"""The claim protocol step by step: claim committed first, the call under the ledger key, the record.

These drive ``execute_irreversible`` as the workflow would (a plain function), with a
crash simulated between the moves by an exception at the named fault point: the claim's
transaction has committed, the settling one rolls back — what a SIGKILL leaves, minus
the process (``test_effect_crashes.py`` does it with real kills).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from django.db.models import F

from agent.consent.gate import gate_request
from agent.ledger.effect import execute_irreversible, ledger_key
from agent.ledger.intents import resolve_stale
from agent.models import Run, Step
from agent.models.ledger import LedgerEntry
from agent.record import faults
from agent.run.services import run_cancel, run_create
from agent.steps import Done
from agent.tools import args_hash
from approvals.models import Approval
from approvals.services import approval_decide
from deskhand.domain.desk.models import Refund, Ticket
from tests.durability.helpers import user

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "owner@northwind.test"
CHARGE = "pi_northwind_nw_1042"


class Crash(Exception):
    pass


@pytest.fixture(autouse=True)
def quiet_sends(monkeypatch) -> Iterator[None]:
    """No workflow runs here: decisions are recorded, not delivered."""
    monkeypatch.setattr("approvals.services._send_quietly", lambda approval: None)
    yield
    faults.clear()


def crash_at(point: str) -> None:
    def boom() -> None:
        raise Crash(point)

    faults.install(point, "issue_refund", boom)


def approved_refund(amount: int = 3800) -> tuple[Run, dict, Approval]:
    ticket = Ticket.objects.get(reference="NW-1")
    run = run_create(ticket=ticket, user=user(OWNER))
    Run.objects.filter(pk=run.pk).update(status="running")
    call = {
        "id": "toolu_claim_1",
        "name": "issue_refund",
        "input": {"order_reference": "NW-1042", "amount_cents": amount, "reason": "stale beans"},
    }
    request = gate_request(str(run.pk), 1, call)
    approval = approval_decide(
        approval=Approval.objects.get(pk=request.approval_id),
        user=user(OWNER),
        approve=True,
        channel="cli",
    )
    return run, call, approval


def execute(run: Run, call: dict, approval: Approval) -> Done:
    return execute_irreversible(str(run.pk), 2, call, str(approval.pk))


def test_a_key_reused_with_a_different_amount_answers_idempotency_error_and_the_step_says_so(
    northwind_pays_at_the_provider,
):
    api = northwind_pays_at_the_provider
    run, call, approval = approved_refund(3800)
    key = ledger_key(run, call["id"], args_hash(call["name"], call["input"]))
    # A forged earlier execution under this very key, for another amount.
    from agent.effects.payments import client_for, create_refund

    forged = create_refund(
        client_for(run.merchant), key=key, payment_reference=CHARGE, amount_cents=1900, metadata={}
    )
    assert forged["amount"] == 1900

    out = execute(run, call, approval)

    assert out.ok is False
    assert "idempotency_error" in out.text and "same parameters" in out.text
    assert len(api.refunds) == 1 and api.refunds[0]["amount"] == 1900  # no second refund
    assert [p.status for p in api.requests if p.method == "POST"][-1] == 400
    entry = LedgerEntry.objects.get()
    assert (entry.state, entry.key) == ("failed", key)
    assert Refund.objects.count() == 0  # the reservation is released
    step = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert step.ok is False
    # The run's step says in words what Stripe answered, and that this claim moved nothing.
    said = step.result["text"]
    assert said.startswith(
        "The payment provider refused the refund of 38.00 USD against NW-1042: this claim's "
        "idempotency key was already used for a request with other parameters. It answered: "
        "Keys for idempotent requests can only be used with the same parameters"
    )
    assert "[idempotency_error]. No money moved under this claim" in said


def test_a_re_executed_step_repeats_the_call_under_the_same_key_and_pays_once(
    northwind_pays_at_the_provider,
):
    api = northwind_pays_at_the_provider
    run, call, approval = approved_refund()
    crash_at("after_provider")
    with pytest.raises(Crash):
        execute(run, call, approval)
    # The provider made it; here only the claim committed.
    assert len(api.refunds) == 1
    entry = LedgerEntry.objects.get()
    assert entry.state == "pending" and Refund.objects.get().status == "pending"

    faults.clear()
    out = execute(run, call, approval)  # the step, re-executed

    assert out.ok is True and "Refunded 38.00 USD" in out.text
    assert len(api.refunds) == 1
    posts = [r for r in api.requests if r.method == "POST"]
    assert len(posts) == 2 and posts[1].replayed
    assert {p.headers["Idempotency-Key"] for p in posts} == {entry.key}
    entry.refresh_from_db()
    assert (entry.state, entry.provider_ref) == ("done", api.refunds[0]["id"])
    assert Refund.objects.get().status == "succeeded"


def test_a_claim_past_the_key_window_is_looked_up_and_never_sent_again(
    northwind_pays_at_the_provider,
):
    api = northwind_pays_at_the_provider
    run, call, approval = approved_refund()
    crash_at("after_provider")
    with pytest.raises(Crash):
        execute(run, call, approval)
    faults.clear()
    LedgerEntry.objects.update(created_at=F("created_at") - dt.timedelta(days=2))
    # Past its window the provider has forgotten the key: a re-send would pay twice.
    api.key_window_seconds = 0

    out = execute(run, call, approval)

    assert out.ok is True
    assert len(api.refunds) == 1
    assert len([r for r in api.requests if r.method == "POST"]) == 1  # looked up, not re-sent
    assert LedgerEntry.objects.get().state == "done"


def test_a_claim_never_sent_and_past_the_window_is_found_not_made_and_released(
    northwind_pays_at_the_provider,
):
    api = northwind_pays_at_the_provider
    run, call, approval = approved_refund()
    crash_at("after_claim")
    with pytest.raises(Crash):
        execute(run, call, approval)
    faults.clear()
    LedgerEntry.objects.update(created_at=F("created_at") - dt.timedelta(days=2))

    out = execute(run, call, approval)

    assert out.ok is False and "not_made" in out.text
    assert api.refunds == [] and [r.method for r in api.requests] == ["GET"]
    assert LedgerEntry.objects.get().state == "failed"
    assert Refund.objects.count() == 0


def test_a_cancel_after_the_claim_reports_it_in_flight_and_then_what_the_provider_did(
    northwind_pays_at_the_provider,
):
    api = northwind_pays_at_the_provider
    run, call, approval = approved_refund()
    crash_at("after_provider")
    with pytest.raises(Crash):
        execute(run, call, approval)
    faults.clear()

    run = run_cancel(run=run, user=user(OWNER))
    assert run.status == "cancelled"
    assert "No money moved" not in run.summary
    assert "In flight, not yet confirmed by payments: Refund 38.00 USD against order NW-1042" in (
        run.summary
    )

    # The cancelled run's step never runs again; reconciliation settles the claim by lookup.
    assert resolve_stale(LedgerEntry.objects.get().pk) == "done"
    run.refresh_from_db()
    assert "Settled later: Refunded 38.00 USD against NW-1042 (confirmed by payments" in run.summary
    late = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert late.ok and late.result.get("late") is True
    assert len(api.refunds) == 1 and [r.method for r in api.requests].count("POST") == 1


def test_a_cancelled_runs_claim_is_only_looked_up_when_its_step_runs_again(
    northwind_pays_at_the_provider,
):
    api = northwind_pays_at_the_provider
    run, call, approval = approved_refund()
    crash_at("after_claim")  # claimed; the provider never called
    with pytest.raises(Crash):
        execute(run, call, approval)
    faults.clear()
    run = run_cancel(run=run, user=user(OWNER))

    out = execute(run, call, approval)  # e.g. a step that was in flight finishing late

    assert out.ok is False
    assert api.refunds == [] and "POST" not in [r.method for r in api.requests]
    # Not listed yet, but young: it stays pending rather than be declared not made.
    entry = LedgerEntry.objects.get()
    assert entry.state == "pending" and Refund.objects.get().status == "pending"


def test_a_pending_claim_answers_the_same_refund_proposed_again_so_it_is_never_asked_twice(
    northwind_pays_at_the_provider,
):
    run, call, approval = approved_refund()
    crash_at("after_claim")
    with pytest.raises(Crash):
        execute(run, call, approval)
    faults.clear()

    # The model proposes the same refund under a fresh call id (a real model always does).
    again = {**call, "id": "toolu_claim_2"}
    answer = gate_request(str(run.pk), 3, again).done

    assert answer is not None and answer.ok is False
    assert "not yet confirmed" in answer.text and "Not performed again" in answer.text
