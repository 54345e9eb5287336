"""Staff notes reaching a live run: left by a person, delivered once, recorded when the loop takes them."""

from __future__ import annotations

import logging
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from agent.models import ACTIVE_STATUSES, Run, Step, payloads
from agent.models.payloads import StepKind
from agent.record.steplog import log_step
from agent.steps import Note, NotePayload
from approvals.audit import audit_record
from approvals.models import Channel, StaffNote
from deskhand.domain.desk.permissions import require_actor
from deskhand.infra.dbos import client as dbos_client

log = logging.getLogger(__name__)


class SteerRefused(Exception):
    """The note cannot be left (empty, too long, run ended); the message says why."""


def note_send(note: StaffNote) -> None:
    """Deliver a recorded note to its run (keyed by the note id) and mark it delivered."""
    dbos_client.send_note(run_id=str(note.run_id), note_id=note.pk)
    StaffNote.objects.filter(pk=note.pk, delivered_at__isnull=True).update(
        delivered_at=timezone.now()
    )


def run_steer(*, run: Run, user: Any, body: str, channel: str = Channel.CLI) -> StaffNote:
    """Leave a note for a live run; the loop hands it to the model at its next turn.

    The note is recorded (with its audit event) before it is sent; the message
    on the run's "steer" topic carries only the note's id, and the loop reads
    the note itself from the database, as staff guidance fenced apart from
    anything the customer wrote. A send that fails leaves ``delivered_at``
    empty, and the reconciler sends it again (same key: delivered once).
    """
    require_actor(user, run.merchant_id, "steer runs")
    body = body.strip()
    if not body:
        raise SteerRefused("a note needs some text.")
    if len(body) > 4000:
        raise SteerRefused("a note may be at most 4000 characters.")
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if not locked.is_active:
            raise SteerRefused(
                f"run {run.id} is already {locked.status}; notes reach only live runs."
            )
        note = StaffNote.objects.create(run=locked, author=user, body=body, channel=channel)
        audit_record(
            merchant_id=locked.merchant_id,
            actor=user,
            action="run.steer",
            run_id=locked.pk,
            channel=channel,
            detail={"note": note.pk, "body": body},
        )
    try:
        note_send(note)
    except Exception:  # the note is recorded; the reconciler re-sends it with the same key
        log.exception("sending staff note %s failed; the reconciler will retry", note.pk)
    note.refresh_from_db(fields=["delivered_at"])
    return note


def _recorded_notes(run_id: str, seq: int, run: Run | None = None) -> tuple[Note, ...] | None:
    """The notes a NOTE row at ``seq`` already handed over — this run's, or for a fork replaying
    a turn before its fork point, the parent's (``None`` when there is no such row)."""
    if run is None:
        run = Run.objects.only("forked_from_id", "fork_step").get(pk=run_id)
    while run.forked_from_id is not None and run.fork_step and seq < run.fork_step:
        run = Run.objects.only("forked_from_id", "fork_step").get(pk=run.forked_from_id)
    step = Step.objects.filter(run=run, seq=seq, kind=StepKind.NOTE).first()
    if step is None:
        return None
    return payloads.read_as(step, NotePayload).notes


NOTHING_TO_TAKE = """
SELECT NOT EXISTS (SELECT 1 FROM agent_step WHERE run_id = %s AND seq = %s AND kind = %s)
   AND NOT EXISTS (SELECT 1 FROM approvals_staffnote WHERE run_id = %s AND taken_seq IS NULL)
"""


def _nothing_to_take(run: Run, seq: int) -> bool:
    """No NOTE row at ``seq`` and no note waiting: one statement for what is nearly every turn.
    A fork replaying a turn before its fork point reads its parent's rows (not this one)."""
    if run.forked_from_id is not None and run.fork_step and seq < run.fork_step:
        return False
    ahead = run.__dict__.pop("_nothing_to_take", None)
    if ahead is not None and ahead[0] == seq:  # read ahead with the turn's other questions
        return bool(ahead[1])
    with connection.cursor() as cur:
        cur.execute(NOTHING_TO_TAKE, nothing_to_take_params(run, seq))
        row = cur.fetchone()
    return bool(row and row[0])


def nothing_to_take_params(run: Run, seq: int) -> list[Any]:
    return [run.pk, seq, StepKind.NOTE, run.pk]


def remember_nothing_to_take(run: Run, seq: int, nothing: bool) -> None:
    """What ``_nothing_to_take`` would read at ``seq``, read ahead by the caller in one
    statement with its own questions (``agent.run.turns``); used once, on this instance."""
    run.__dict__["_nothing_to_take"] = (seq, nothing)


def notes_take(run_id: str, seq: int, run: Run | None = None) -> tuple[tuple[Note, ...], int]:
    """Inside the model step: take the notes left since the last turn, recorded at ``seq``.

    Notes are read from the ``StaffNote`` table here, not drained as DBOS messages in the
    workflow (two operations a turn saved). A note
    is taken once: it is stamped with the seq of the NOTE row that records it, in that row's
    transaction. A re-executed step (a retry, a recovery, a fork re-asking the model from
    this turn) finds the row at ``seq`` and hands over the same notes again, so the
    conversation it sends is the one recorded. Returns the notes and where the model's row goes.
    ``run``: the run as the caller just read it (not read again); with it, a turn with no
    note waiting takes no lock and writes nothing.
    """
    if run is not None and _nothing_to_take(run, seq):
        return (), seq
    recorded = _recorded_notes(run_id, seq, run)
    if recorded is not None:
        return recorded, seq + 1
    waiting = StaffNote.objects.filter(run_id=run_id, taken_seq__isnull=True)
    with transaction.atomic():
        status = Run.objects.select_for_update().values_list("status", flat=True).get(pk=run_id)
        if status not in ACTIVE_STATUSES:
            return (), seq  # nobody will read them; bounds end the run
        notes = list(waiting.select_for_update().order_by("created_at", "pk"))
        if not notes:
            return (), seq
        out = tuple(Note(n.author_name, n.body) for n in notes)
        log_step(run_id=run_id, seq=seq, kind=StepKind.NOTE, result=NotePayload(notes=out))
        StaffNote.objects.filter(pk__in=[n.pk for n in notes]).update(taken_seq=seq)
    return out, seq + 1
