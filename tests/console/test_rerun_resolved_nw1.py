"""Acceptance, end to end with real DBOS and the keyless provider, through the console:
re-running resolved NW-1 warns first, then proposes no second refund (the goods went back, and
the shipping left is not the policy's to refund); a re-run after a narrower approval does not
ask for the remainder; a fork from step 1 of the refunded ticket recognises the refund; and an
escalated NW-3 run appears in the attention queue, the navigation counter and the runs list's
money column."""

from __future__ import annotations

import pytest

from agent.models import Run
from agent.replay.fork import fork_run
from approvals.models import Approval
from deskhand.domain.desk.models import OutboundEmail, Refund, Ticket
from tests.console.conftest import NW_OWNER, client_for, user
from tests.durability.helpers import decide, pending_approval, start
from tests.fixtures.dbos import wait_for_run, wait_parked, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)


def settle(run_id: str) -> Run:
    return wait_for_run(
        run_id,
        lambda r: (
            r.status in ("succeeded", "failed", "exhausted", "cancelled")
            or (r.status == "awaiting_approval" and r.approvals.filter(status="pending").exists())
        ),
    )


def _rerun_from_the_console(owner, done: str = "$38.00") -> Run:
    before = set(Run.objects.values_list("pk", flat=True))
    warning = owner.post("/tickets/NW-1/run")
    body = warning.content.decode()
    assert warning.status_code == 200 and 'id="rerun-warning"' in body
    assert f"Refunded {done} against NW-1042" in body  # what was already done, shown first
    assert Run.objects.count() == len(before)  # the warning starts nothing
    started = owner.post("/tickets/NW-1/run", {"confirm": "rerun"})
    assert started.status_code == 302
    return Run.objects.exclude(pk__in=before).get()


def test_re_running_resolved_nw1_warns_then_proposes_no_second_refund(dbos_executor):
    first = wait_parked(str(start("NW-1", NW_OWNER).id))
    assert "goods only, not shipping" in pending_approval(first).arguments["reason"]
    decide(first, NW_OWNER)
    assert wait_terminal(str(first.id)).status == "succeeded"
    assert Ticket.objects.get(reference="NW-1").status == "resolved"

    owner = client_for(NW_OWNER)
    second = wait_terminal(str(_rerun_from_the_console(owner).pk))
    assert second.status == "succeeded", second.summary
    # The shipping left on NW-1042 is not proposed: the policy does not cover it, and a
    # person already approved what was due on the order.
    assert not Approval.objects.filter(run=second, tool="issue_refund").exists()
    assert "38.00 USD went back on NW-1042 already" in second.summary
    assert Ticket.objects.get(reference="NW-1").status == "resolved"
    assert [r.amount_cents for r in Refund.objects.all()] == [3800]


def test_re_running_a_resolved_ticket_with_nothing_new_sends_the_customer_nothing(dbos_executor):
    first = wait_parked(str(start("NW-1", NW_OWNER).id))
    decide(first, NW_OWNER)
    assert wait_terminal(str(first.id)).status == "succeeded"
    told = list(OutboundEmail.objects.values_list("pk", flat=True))
    assert told, "the first run told Dana about her refund"

    owner = client_for(NW_OWNER)
    second = wait_terminal(str(_rerun_from_the_console(owner).pk))
    assert second.status == "succeeded", second.summary
    assert list(OutboundEmail.objects.values_list("pk", flat=True)) == told  # nothing new went
    assert not Approval.objects.filter(run=second, tool="reply_to_customer").exists()
    # The console says why: the refused reply is a step of the run's story.
    page = owner.get(f"/runs/{second.pk}/").content.decode()
    assert (
        "Nothing was sent to the customer: Dana Whitfield has written nothing since our last "
        "message on NW-1, and this run changed nothing they should hear about." in page
    )


def test_a_re_run_after_a_narrower_approval_does_not_ask_for_the_remainder(dbos_executor):
    first = wait_parked(str(start("NW-1", NW_OWNER).id))
    gate = pending_approval(first)
    response = client_for(NW_OWNER).post(
        f"/approvals/{gate.pk}/decide",
        {"decision": "approve", "tool": "issue_refund", "amount-amount_cents": "20"},
    )
    assert response.status_code == 302
    assert wait_terminal(str(first.id)).status == "succeeded"
    assert [r.amount_cents for r in Refund.objects.all()] == [2000]

    again = wait_terminal(str(_rerun_from_the_console(client_for(NW_OWNER), "$20.00").pk))
    assert again.status == "succeeded", again.summary
    assert not Approval.objects.filter(run=again, tool="issue_refund").exists()  # no remainder
    assert "20.00 USD went back on NW-1042 already" in again.summary
    assert [r.amount_cents for r in Refund.objects.all()] == [2000]


def test_a_fork_from_step_1_of_a_refunded_ticket_recognises_the_refund(dbos_executor):
    first = wait_parked(str(start("NW-1", NW_OWNER).id))
    decide(first, NW_OWNER)
    first = wait_terminal(str(first.id))
    fork = wait_terminal(str(fork_run(run=first, seq=1, user=user(NW_OWNER)).pk))
    assert fork.status == "succeeded", fork.summary
    # Nothing proposed whose own reason says the policy does not cover it.
    assert not Approval.objects.filter(run=fork, tool="issue_refund").exists()
    assert "went back on NW-1042 already" in fork.summary
    assert [r.amount_cents for r in Refund.objects.all()] == [3800]


def test_an_escalated_nw3_run_shows_in_the_queue_the_counter_and_the_money_column(
    dbos_executor,
):
    run = wait_terminal(str(start("NW-3", NW_OWNER).id))
    assert run.status == "succeeded"
    assert Ticket.objects.get(reference="NW-3").status == "escalated"

    owner = client_for(NW_OWNER)
    attention = owner.get("/attention/")
    body = attention.content.decode()
    escalated = [i for i in attention.context["queue"] if i.kind == "escalated"]
    assert [i.ticket for i in escalated] == ["NW-3"] and escalated[0].money == "$156.00"
    assert 'aria-label="1 waiting">1</span>' in body  # the navigation counter

    runs = owner.get("/runs/").content.decode()
    row = runs[runs.index(f'id="run-{run.pk}"') :].split("</tr>", 1)[0]
    assert "Escalated" in row or "escalated" in row  # the ticket status, beside the run's
    assert "succeeded" in row.lower()
    assert "$156.00 at stake" in row
