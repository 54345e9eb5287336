"""SIGKILL at the boundaries of "question sent → parked → answer stored → run woken →
answered": the question is claimed once, the run is woken once, the answer reaches the model
once, and the waiting time is handed back once."""

from __future__ import annotations

import pytest

from agent.ledger.models import LedgerEntry
from agent.models import Run, Step
from deskhand.desk.models import Merchant, OutboundEmail, TicketMessage
from tests.customer.test_waiting import asked, new_ticket, omar_writes
from tests.fixtures.dbos import wait_terminal

pytestmark = [pytest.mark.crash, pytest.mark.django_db(transaction=True)]

# Before the answer: the worker dies as it asks or parks; after: as it takes the answer in.
BEFORE_ANSWER = ("after_step:tool.ask_customer", "after_step:customer.park", "before_wait:customer")
AFTER_ANSWER = ("after_step:customer.read", "after_step:customer.resume")


@pytest.mark.parametrize("boundary", BEFORE_ANSWER + AFTER_ANSWER)
def test_a_kill_at_each_boundary_asks_once_wakes_once_and_answers_once(
    worker_process, receiver, boundary
):
    Merchant.objects.filter(slug="northwind").update(auto_runs="new_tickets")
    before = boundary in BEFORE_ANSWER
    worker = worker_process(f"customer-{boundary.split(':')[1]}").start(
        faults=boundary if before else ""
    )
    ticket = new_ticket(receiver)
    if before:
        assert worker.wait_exit(60) == -9
        worker.start(faults="")  # the same executor id recovers its own workflow
        run = asked(ticket)
    else:
        run = asked(ticket)
        worker.kill()
        worker.start(faults=boundary)
    question = OutboundEmail.objects.get(ticket=ticket)
    omar_writes(
        receiver,
        subject=f"Re: {question.subject}",
        message_id="<omar-answer@mail.example.com>",
        headers={"In-Reply-To": question.thread_message.message_id},
        body="It is order NW-1077.",
        # A worker about to die on the answer may die before its intake is done (a waiting
        # run is also woken by the reconciler's sweep): the restarted worker finishes it.
        processed=before,
    )
    if not before:
        assert worker.wait_exit(60) == -9
        worker.start(faults="")
    run = wait_terminal(str(run.id))

    assert run.status == "succeeded", run.summary
    assert Run.objects.filter(ticket=ticket).count() == 1
    assert LedgerEntry.objects.filter(run=run, tool="ask_customer").count() == 1
    asks = TicketMessage.objects.filter(ticket=ticket, direction="out", run=run)
    assert asks.count() == 2  # the question, then the reply: each once
    rows = Step.objects.filter(run=run, tool="ask_customer", kind="tool")
    answers = [s for s in rows if "The customer answered" in s.payload.text]
    assert len(answers) == 1 and "NW-1077" in answers[0].payload.text
    assert 0 < run.waited_seconds < 600  # handed back once, not once per attempt
