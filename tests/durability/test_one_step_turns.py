"""One DBOS operation per model turn: notes, bounds and the call in one step.

Until 0.2.0 older runs recorded four operations a turn (a ``DBOS.recv`` and its
``DBOS.sleep`` to drain staff notes, ``bounds.check``, ``model``). These pin what the step must
still do: take each note exactly once, hand a re-executed turn (retry, recovery, a fork
asking again from that turn) the notes it recorded, and stop at a bound before any call.
"""

from __future__ import annotations

import pytest

from agent.models import Run, Step
from agent.run.services import run_create
from agent.run.steering import notes_take
from agent.steps import Note
from approvals.models import StaffNote
from deskhand.domain.desk.models import Ticket
from deskhand.infra.dbos.client import workflow_steps
from tests.durability.helpers import start, user
from tests.fixtures.dbos import wait_terminal

OWNER = "owner@northwind.test"


def _running(reference: str) -> Run:
    run = run_create(ticket=Ticket.objects.get(reference=reference), user=user(OWNER))
    Run.objects.filter(pk=run.pk).update(status="running")
    return run


@pytest.mark.django_db
def test_a_note_is_taken_once_and_a_re_executed_turn_gets_the_same_notes_back(seeded):
    run = _running("NW-2")
    first = StaffNote.objects.create(
        run=run, author=user(OWNER), body="Offer a reship.", channel="web"
    )

    took = notes_take(str(run.pk), 4)
    assert took == ((Note(OWNER, "Offer a reship."),), 5)
    later = StaffNote.objects.create(run=run, author=user(OWNER), body="No refund.", channel="web")
    # The same turn again (a retry, a recovery): the recorded notes, not the newer one.
    assert notes_take(str(run.pk), 4) == took
    assert list(Step.objects.filter(run=run).values_list("seq", "kind")) == [(4, "note")]
    first.refresh_from_db()
    later.refresh_from_db()
    assert (first.taken_seq, later.taken_seq) == (4, None)
    # The next turn takes the newer note, once.
    assert notes_take(str(run.pk), 6)[0] == (Note(OWNER, "No refund."),)
    assert notes_take(str(run.pk), 8) == ((), 8)
    assert Step.objects.filter(run=run, kind="note").count() == 2


@pytest.mark.django_db
def test_a_run_being_cancelled_takes_no_note_and_writes_no_row(seeded):
    run = _running("NW-2")
    StaffNote.objects.create(run=run, author=user(OWNER), body="Too late.", channel="web")
    Run.objects.filter(pk=run.pk).update(status="cancelling")
    assert notes_take(str(run.pk), 3) == ((), 3)
    assert not Step.objects.filter(run=run).exists()
    assert StaffNote.objects.get(run=run).taken_seq is None


@pytest.mark.django_db(transaction=True)
def test_a_run_records_one_dbos_operation_per_model_turn(dbos_executor):
    run = wait_terminal(str(start("NW-2", OWNER).id))
    assert run.status == "succeeded", run.summary
    names = [s["function_name"] for s in workflow_steps(str(run.pk))]
    rows = Step.objects.filter(run=run).count()
    turns = Step.objects.filter(run=run, kind="model").count()

    assert names[0] == "run.begin" and not [n for n in names if n.startswith("DBOS.patch-")]
    assert names.count("model") == turns >= 2
    assert not {"DBOS.recv", "DBOS.sleep", "bounds.check", "notes.record"} & set(names)
    # Every other operation writes a row of its own: the run's begin is the only operation
    # without one. The gate around the reply to the customer (approved by the owner's rule)
    # is its request and its resume, each with its row: no ledger lookup, read or clock
    # reading of its own.
    assert not {"ledger.lookup", "gate.read", "clock"} & set(names), names
    assert names.count("gate.request") == names.count("gate.resume") >= 1
    assert len(names) == rows + 1
    assert len(names) / rows <= 1.3, (len(names), rows, names)
