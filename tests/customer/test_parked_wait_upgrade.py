"""A run parked in the wait for the customer before the reminder landed finishes on today's code.

``tests/fixtures/parked/customer_wait_before_reminder.json`` holds NW-5 — a new ticket from
Omar naming no order — with its run parked in ``DBOS.recv`` on the ticket's customer topic,
recorded on commit 1ef7b1a, the last before the reminder (``customer-reminder``) changed the
wait's step sequence. Its park recorded no ``remind_at``, so today's code must replay the older
wait: no reminder, however the merchant is set now. Resurrected in a freshly seeded world
(``tests/support/parked_fixture.py``: the ticket's rows come with it, its keys remapped), the
customer's answer — real mail to the receiver, threaded to the question — wakes it and it
answers; without one the window ends it ``customer did not reply``. See docs/deploys.md.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from agent.customer.sweep import customer_waits_sweep
from agent.customer.wait import ANSWER_PREFIX, REMINDER_OPENING
from agent.ledger.models import LedgerEntry
from agent.models import Run, Step
from agent.run.services import run_start
from deskhand.dbos.engine.deploys import runs_move_version
from deskhand.dbos.names import customer_topic
from deskhand.desk.models import Merchant, MessageDirection, Ticket, TicketMessage
from tests.customer.test_waiting import THREE_DAYS, omar_writes
from tests.durability.helpers import user
from tests.durability.test_upgrade import (  # noqa: F401  (fixtures)
    IN_PROCESS_EXECUTOR,
    _checkpoints,
    _wait_finished,
    executor_stopped,
    model_calls,
)
from tests.fixtures.dbos import ensure_in_process_executor, wait_for_run
from tests.support import parked_fixture
from tests.support.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)

FIXTURE = parked_fixture.FIXTURE.with_name("customer_wait_before_reminder.json")
BEFORE_THE_REMINDER = "1ef7b1a"  # parent of 8f69526, "Merge branch 'remind'"


@pytest.fixture(scope="module")
def fixture() -> dict[str, Any]:
    recorded = parked_fixture.read(FIXTURE)
    assert recorded["commit"].startswith(BEFORE_THE_REMINDER)
    # Parked in the older wait: its park, one read, then DBOS.recv's durable sleep.
    assert recorded["step_names"][-3:] == ["customer.park", "customer.read", "DBOS.sleep"]
    assert "DBOS.patch-customer-reminder" not in recorded["step_names"]
    return recorded


def _keys_move_on() -> None:
    """This world's next keys lie far past the recording's (a fresh test database would
    otherwise hand out the very same ones), so the loader's remapping is what the test sees."""
    with connection.cursor() as cur:
        for table in KEYED_TABLES:
            cur.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                f" (SELECT coalesce(max(id), 0) FROM {table}) + 1000)"
            )


# The recorded rows whose integer keys the load re-assigns, and what names them is remapped.
KEYED_TABLES = (
    "desk_ticket",
    "desk_ticketmessage",
    "desk_outboundemail",
    "agent_ledgerentry",
    "agent_step",
)


def _loaded(fixture: dict[str, Any]) -> tuple[str, dict[int, Any]]:
    """The recorded run in this world (as if recorded a month ago: its times move on with it),
    moved to this release's version, its executor running."""
    _keys_move_on()
    run_id = parked_fixture.load(parked_fixture.aged(fixture, 30), executor_id=IN_PROCESS_EXECUTOR)
    recorded = _checkpoints(run_id)
    if fixture["application_version"] != settings.DESKHAND_APP_VERSION:
        assert runs_move_version(from_version=fixture["application_version"]) == [run_id]
    ensure_in_process_executor()
    return run_id, recorded


def _outbound(ticket_id: int) -> list[TicketMessage]:
    return list(
        TicketMessage.objects.filter(ticket_id=ticket_id, direction=MessageDirection.OUTBOUND)
        .order_by("pk")
        .select_related("email")
    )


def _later(run_id: str, recorded: dict[int, Any]) -> list[str]:
    return [name for fid, (name, _) in sorted(_checkpoints(run_id).items()) if fid not in recorded]


@pytest.mark.usefixtures("executor_stopped")
def test_a_run_parked_before_the_reminder_wakes_on_the_answer_and_replies_once(
    fixture,
    receiver,
    model_calls,  # noqa: F811
    monkeypatch,
):
    # Northwind turned reminders on after the deploy; it also opens a run on every customer
    # message, so an answer that failed to find the waiting run would open a second one.
    Merchant.objects.filter(slug="northwind").update(reply_reminder=True)
    run_id, recorded = _loaded(fixture)
    run = Run.objects.select_related("ticket").get(pk=run_id)
    assert (run.status, run.ticket.reference) == ("awaiting_customer", fixture["ticket"])
    ticket = run.ticket
    [question] = _outbound(ticket.pk)
    # The park's checkpoint names this world's ticket topic and question line.
    park = json.loads(next(out for name, out in recorded.values() if name == "customer.park"))
    recorded_park = json.loads(
        next(
            r["output"]
            for r in fixture["dbos"]["operation_outputs"]
            if r["function_name"] == "customer.park"
        )
    )
    assert park["topic"] != recorded_park["topic"] and park["after"] != recorded_park["after"]
    assert (park["topic"], park["after"]) == (customer_topic(ticket.pk), question.pk)
    assert "remind_at" not in park

    # Half the window passes (the test clock): a reminder is due by the merchant's setting, the
    # sweep wakes the run once, and the run, whose park named no reminder, reads and waits on.
    monkeypatch.setenv("DESKHAND_CLOCK_OFFSET_SECONDS", str(THREE_DAYS // 2 + 60))
    assert customer_waits_sweep() == 1
    until(
        "the woken run to read the customer's side",
        lambda: "customer.read" in _later(run_id, recorded),
        seen=lambda: _later(run_id, recorded),
    )
    assert _later(run_id, recorded)[:2] == ["DBOS.recv", "customer.read"]
    time.sleep(0.5)
    assert Run.objects.get(pk=run_id).status == "awaiting_customer"
    assert len(_outbound(ticket.pk)) == 1

    # Omar answers the question by mail; his client threads by the question's Message-ID.
    omar_writes(
        receiver,
        subject=f"Re: {question.subject}",
        message_id="<omar-2@mail.example.com>",
        headers={"In-Reply-To": question.message_id},
        body="It is order NW-1077.",
    )
    assert TicketMessage.objects.get(message_id="<omar-2@mail.example.com>").ticket_id == ticket.pk
    run = _wait_finished(run_id)

    assert (run.status, run.stop_reason) == ("succeeded", "end_turn"), run.summary
    assert Run.objects.filter(ticket=ticket).count() == 1  # woken, not a second run opened
    # The ledger: the recorded question's claim, then exactly one reply, claimed after the answer.
    ledger = list(LedgerEntry.objects.filter(run_id=run_id).order_by("pk"))
    recorded_claim = next(b for b in fixture["django"] if b["table"] == "agent_ledgerentry")
    assert [e.key for e in ledger[:1]] == [r["key"] for r in recorded_claim["rows"]]
    assert [(e.tool, e.ok) for e in ledger] == [("ask_customer", True), ("reply_to_customer", True)]
    _question, reply = _outbound(ticket.pk)
    assert reply.email is not None and reply.email.ledger_entry_id == ledger[1].pk
    assert "NW-1077" in reply.body and "not late" in reply.body
    assert REMINDER_OPENING not in reply.body
    # The model read the answer fenced as the customer's words.
    answered = Step.objects.filter(run_id=run_id, tool="ask_customer", kind="tool").order_by("seq")
    assert answered.last().payload.text.startswith(ANSWER_PREFIX)
    assert "It is order NW-1077." in answered.last().payload.text

    # The recorded checkpoints replayed unchanged; the wait went on the older way (no patch
    # asked, no re-park); the model was asked only for turns after the answer.
    final = _checkpoints(run_id)
    assert all(final[fid] == checkpoint for fid, checkpoint in recorded.items())
    later = _later(run_id, recorded)
    assert "customer.resume" in later
    assert "DBOS.patch-customer-reminder" not in later and "customer.repark" not in later
    assert len(model_calls) == later.count("model") >= 1


@pytest.mark.usefixtures("executor_stopped")
def test_a_run_parked_before_the_reminder_ends_customer_did_not_reply_when_the_window_passes(
    fixture, monkeypatch
):
    run_id, _recorded = _loaded(fixture)
    ticket_id = Run.objects.get(pk=run_id).ticket_id
    monkeypatch.setenv("DESKHAND_CLOCK_OFFSET_SECONDS", str(THREE_DAYS + 60))
    assert customer_waits_sweep() == 1
    run = _wait_finished(run_id)

    assert (run.status, run.stop_reason) == ("exhausted", "customer_no_reply"), run.summary
    assert "72 hours" in run.stop_detail
    note = TicketMessage.objects.filter(ticket_id=ticket_id, kind="note").last()
    assert note is not None and "did not reply within 72 hours" in note.body
    assert len(_outbound(ticket_id)) == 1  # the question only
    assert [e.tool for e in LedgerEntry.objects.filter(run_id=run_id)] == ["ask_customer"]


def _fresh_wait(reminders: bool) -> list[str]:
    """A fresh run on a new ticket like the recorded one, parked in the wait: its step names."""
    Merchant.objects.filter(slug="northwind").update(reply_reminder=reminders)
    ticket: Ticket = parked_fixture.customer_wait_ticket()
    run = run_start(ticket=ticket, user=user(parked_fixture.STARTED_BY), channel="cli")
    wait_for_run(str(run.id), lambda r: parked_fixture.is_waiting_for_customer(str(r.pk)))
    return parked_fixture.workflow_step_names(str(run.id))


@pytest.mark.usefixtures("dbos_executor", "tseeded")
def test_the_wait_parts_from_the_recorded_sequence_only_at_the_reminders_patch(fixture):
    recorded = fixture["step_names"]
    assert parked_fixture.sequence_change(recorded, _fresh_wait(reminders=False)) is None
    reminding = _fresh_wait(reminders=True)
    assert reminding != recorded
    # The gate before the question is shorter on today's runs (two-step-gate): its own index.
    assert reminding[reminding.index("customer.park") + 1] == "DBOS.patch-customer-reminder"
    assert parked_fixture.sequence_change(recorded, reminding) is None
