"""One reminder before the reply window passes, when the merchant wants it.

Halfway through the window (the clock a test may move), the waiting run sends the customer
one reminder: threaded like a reply, claimed once in the ledger, counted by the daily cap.
It keeps waiting on the same window; an answer wakes it as usual, and no answer ends it
``customer did not reply`` as without a reminder.
"""

from __future__ import annotations

import time

import pytest

from agent.customer.sweep import customer_waits_sweep
from agent.customer.wait import REMINDER_OPENING, reminder_sent
from agent.models import Run
from agent.models.ledger import LedgerEntry
from deskhand.domain.desk.models import Merchant, MessageDirection, TicketMessage
from tests.customer.test_waiting import THREE_DAYS, asked, new_ticket, omar_writes
from tests.fixtures.dbos import wait_for_run, wait_terminal
from tests.support.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def reminding(tseeded) -> None:
    Merchant.objects.filter(slug="northwind").update(auto_runs="new_tickets", reply_reminder=True)


def outbound(ticket) -> list[TicketMessage]:
    return list(
        TicketMessage.objects.filter(ticket=ticket, direction=MessageDirection.OUTBOUND).order_by(
            "pk"
        )
    )


def reparked(run: Run) -> bool:
    """The run made its reminder and waits for the customer again (its ``customer.repark``)."""
    return run.status == "awaiting_customer" and "customer.repark" in _checkpoint_names(str(run.pk))


def reminded(ticket, run: Run, monkeypatch) -> TicketMessage:
    """Half the window passes: the sweep wakes the run, which reminds and waits again."""
    monkeypatch.setenv("DESKHAND_CLOCK_OFFSET_SECONDS", str(THREE_DAYS // 2 - 600))
    assert customer_waits_sweep() == 0  # not yet due
    monkeypatch.setenv("DESKHAND_CLOCK_OFFSET_SECONDS", str(THREE_DAYS // 2 + 60))
    window_end = run.waiting_until
    assert customer_waits_sweep() == 1
    until("the reminder beside the question", lambda: len(outbound(ticket)) >= 2)
    run = wait_for_run(str(run.id), reparked)
    assert run.waiting_until == window_end  # the same window: a reminder never extends it
    _question, reminder = outbound(ticket)
    assert reminder.run_id == run.pk
    assert f"\n\n{REMINDER_OPENING}" in reminder.body and "order number" in reminder.body
    assert reminder.body.rstrip().endswith("Northwind Coffee")
    assert reminder.in_reply_to == ticket.messages.filter(kind="customer").last().message_id
    [entry] = LedgerEntry.objects.filter(run=run, tool="reply_to_customer")
    assert entry.ok
    names = _checkpoint_names(str(run.pk))
    assert "customer.repark" in names
    # The sweep does not wake it again for the reminder; only the window's end would.
    assert customer_waits_sweep() == 0
    return reminder


@pytest.mark.usefixtures("reminding")
def test_the_reminder_goes_once_and_the_answer_wakes_the_run(dbos_executor, receiver, monkeypatch):
    ticket = new_ticket(receiver)
    run = asked(ticket)
    reminder = reminded(ticket, run, monkeypatch)

    omar_writes(
        receiver,
        subject="Re: Where is my order?",
        message_id="<omar-2@mail.example.com>",
        headers={"In-Reply-To": reminder.message_id},
        body="It is order NW-1077.",
    )
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary
    assert len(LedgerEntry.objects.filter(run=run, tool="reply_to_customer")) == 2  # + the answer
    assert len(outbound(ticket)) == 3


@pytest.mark.usefixtures("reminding")
def test_the_sweep_knows_the_reminder_went_from_its_steps_not_the_wait_reasons_words(
    dbos_executor, receiver, monkeypatch
):
    ticket = new_ticket(receiver)
    run = asked(ticket)
    reminded(ticket, run, monkeypatch)
    assert reminder_sent(str(run.pk))

    # The words shown to people change (here: back to a plain park's); the sweep still knows
    # the reminder went, and wakes the run for nothing but the window's end.
    Run.objects.filter(pk=run.pk).update(wait_reason="waiting for the customer")
    assert customer_waits_sweep() == 0
    time.sleep(0.5)
    assert len(outbound(ticket)) == 2  # the question and the one reminder
    monkeypatch.setenv("DESKHAND_CLOCK_OFFSET_SECONDS", str(THREE_DAYS + 60))
    assert customer_waits_sweep() == 1
    run = wait_terminal(str(run.id))
    assert (run.status, run.stop_reason) == ("exhausted", "customer_no_reply"), run.summary
    assert len(outbound(ticket)) == 2


@pytest.mark.usefixtures("reminding")
def test_no_answer_after_the_reminder_ends_the_run_customer_did_not_reply(
    dbos_executor, receiver, monkeypatch
):
    ticket = new_ticket(receiver)
    run = asked(ticket)
    reminded(ticket, run, monkeypatch)

    monkeypatch.setenv("DESKHAND_CLOCK_OFFSET_SECONDS", str(THREE_DAYS + 60))
    assert customer_waits_sweep() == 1
    run = wait_terminal(str(run.id))
    assert (run.status, run.stop_reason) == ("exhausted", "customer_no_reply"), run.summary
    assert len(outbound(ticket)) == 2  # the question and the one reminder


def test_without_the_setting_no_reminder_goes(dbos_executor, receiver, tseeded, monkeypatch):
    Merchant.objects.filter(slug="northwind").update(auto_runs="new_tickets")
    ticket = new_ticket(receiver)
    run = asked(ticket)
    monkeypatch.setenv("DESKHAND_CLOCK_OFFSET_SECONDS", str(THREE_DAYS // 2 + 60))
    assert customer_waits_sweep() == 0
    time.sleep(0.5)
    assert len(outbound(ticket)) == 1
    assert Run.objects.get(pk=run.pk).status == "awaiting_customer"


@pytest.mark.usefixtures("reminding")
def test_the_daily_limit_counts_the_reminder(dbos_executor, receiver, monkeypatch):
    Merchant.objects.filter(slug="northwind").update(max_customer_messages_per_day=1)
    ticket = new_ticket(receiver)
    run = asked(ticket)  # the question used the day's one message
    monkeypatch.setenv("DESKHAND_CLOCK_OFFSET_SECONDS", str(THREE_DAYS // 2 + 60))
    assert customer_waits_sweep() == 1
    run = wait_for_run(str(run.id), reparked)
    [entry] = LedgerEntry.objects.filter(run=run, tool="reply_to_customer")
    assert not entry.ok and "daily limit" in str(entry.result)  # refused, recorded, not sent
    assert len(outbound(ticket)) == 1

    monkeypatch.setenv("DESKHAND_CLOCK_OFFSET_SECONDS", str(THREE_DAYS + 60))
    assert customer_waits_sweep() == 1
    run = wait_terminal(str(run.id))
    assert (run.status, run.stop_reason) == ("exhausted", "customer_no_reply"), run.summary


def test_a_run_parked_without_a_reminder_keeps_waiting_as_it_did(
    dbos_executor, receiver, tseeded, monkeypatch
):
    # Its park was recorded without a reminder's time (the merchant wanted none then):
    # turning reminders on later sends it none.
    Merchant.objects.filter(slug="northwind").update(auto_runs="new_tickets")
    ticket = new_ticket(receiver)
    run = asked(ticket)
    Merchant.objects.filter(slug="northwind").update(reply_reminder=True)
    monkeypatch.setenv("DESKHAND_CLOCK_OFFSET_SECONDS", str(THREE_DAYS // 2 + 60))
    assert not reminder_sent(str(run.pk))  # no reminder's steps in its log
    assert customer_waits_sweep() == 1  # the sweep cannot tell; the run reads and waits on
    time.sleep(1)
    assert Run.objects.get(pk=run.pk).status == "awaiting_customer"
    assert len(outbound(ticket)) == 1

    monkeypatch.setenv("DESKHAND_CLOCK_OFFSET_SECONDS", str(THREE_DAYS + 60))
    assert customer_waits_sweep() == 1
    run = wait_terminal(str(run.id))
    assert (run.status, run.stop_reason) == ("exhausted", "customer_no_reply"), run.summary
    assert len(outbound(ticket)) == 1
    names = _checkpoint_names(str(run.pk))
    assert "customer.repark" not in names


def _checkpoint_names(run_id: str) -> list[str]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT function_name FROM dbos.operation_outputs WHERE workflow_uuid = %s",
            [run_id],
        )
        return [r[0] for r in cur.fetchall()]
