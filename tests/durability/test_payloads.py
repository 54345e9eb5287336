"""Step payloads: one typed structure per kind, written by log_step, read back by one accessor.

Rows written before payloads were versioned (no ``version`` key) must still read.
"""

from __future__ import annotations

import pytest

from agent.models import Step, payloads
from agent.record.steplog import log_step
from agent.run.services import run_create
from agent.steps import LEGACY, Note, NotePayload, Row
from deskhand.domain.desk.models import Ticket
from tests.durability.helpers import user


def _legacy(kind: str, result: dict, arguments: dict | None = None) -> Step:
    return Step(seq=1, kind=kind, result=result, arguments=arguments or {})


def test_version_1_rows_of_every_kind_read_as_their_type():
    model = payloads.read(
        _legacy(
            "model",
            {"content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"},
            {"message_count": 3, "prompt_sha256": "abc"},
        )
    )
    assert isinstance(model, payloads.ModelPayload)
    assert (model.version, model.message_count, model.prompt_sha256, model.text) == (
        LEGACY,
        3,
        "abc",
        "hi",
    )
    denied = payloads.read(
        _legacy("approval", {"event": "denied", "approval_id": "a1", "reason": None})
    )
    assert isinstance(denied, payloads.ApprovalPayload)
    assert (denied.event, denied.approval_id, denied.reason, denied.decided_by) == (
        "denied",
        "a1",
        "",
        None,
    )
    note = payloads.read(_legacy("note", {"notes": [{"author": "a@x", "body": "b"}]}))
    assert note == NotePayload(version=1, notes=(Note("a@x", "b"),))
    cancelled = payloads.read(_legacy("bound", {"status": "cancelled", "by": "a@x"}))
    assert isinstance(cancelled, payloads.EndPayload) and cancelled.by == "a@x"
    undo = payloads.read(_legacy("undo", {"undid_seq": 2, "text": "ok"}))
    assert isinstance(undo, payloads.UndoPayload) and undo.undid_seq == 2
    tool = payloads.read(_legacy("tool", {"text": "t", "something_old": 1}))
    assert tool == payloads.ToolPayload(version=1, text="t")


def test_the_wrong_payload_for_a_kind_or_an_unknown_kind_is_refused():
    with pytest.raises(payloads.PayloadError, match="cannot be written as a model step"):
        payloads.of_kind("model", payloads.ToolPayload(text="x"))
    with pytest.raises(payloads.PayloadError, match="no payload type"):
        payloads.read(_legacy("gossip", {}))
    with pytest.raises(payloads.PayloadError, match="not ModelPayload"):
        payloads.read_as(_legacy("tool", {}), payloads.ModelPayload)


@pytest.mark.django_db
def test_log_step_writes_the_current_version_and_reads_back_what_it_wrote(seeded):
    run = run_create(ticket=Ticket.objects.get(reference="NW-2"), user=user("owner@northwind.test"))
    typed = payloads.ApprovalPayload(event="requested", approval_id="a1", preview="Refund")
    log_step(run_id=str(run.pk), seq=1, kind="approval", tool="issue_refund", result=typed)
    log_step(run_id=str(run.pk), seq=2, kind="note", result=NotePayload(notes=(Note("a", "b"),)))
    first, second = Step.objects.filter(run=run).order_by("seq")
    assert first.payload == typed and first.result["version"] == Row.VERSION
    assert second.payload == NotePayload(notes=(Note("a", "b"),))
    assert Step.objects.filter(payloads.approval_settled("a1")).count() == 0
    log_step(
        run_id=str(run.pk),
        seq=3,
        kind="approval",
        tool="issue_refund",
        result=payloads.ApprovalPayload(event="approved", approval_id="a1"),
    )
    assert Step.objects.get(payloads.approval_settled("a1")).seq == 3
