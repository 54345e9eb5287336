"""A step row is only ever re-written by the same call; a step finishing on a closed run is appended.

Real Postgres; the last test runs a real DBOS workflow whose model call is held
while a person cancels the run.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from agent.models import Run, Step, payloads
from agent.providers import clear_overrides, install_override
from agent.providers.base import ModelReply
from agent.providers.scripted import ScriptedProvider, say
from agent.record.steplog import StepConflict, call_hash, log_step
from agent.run.lifecycle import run_finish
from agent.run.services import run_cancel, run_create, run_mark_cancelled
from agent.steps import LEGACY, ModelPayload, Row, ToolPayload, UndoPayload
from deskhand.domain.desk.models import Ticket
from tests.durability.helpers import assert_accounting_matches, start, user
from tests.fixtures.dbos import wait_for_run

ARGS = {"reference": "NW-1042"}


def _run() -> Run:
    return run_create(
        ticket=Ticket.objects.get(reference="NW-2"), user=user("owner@northwind.test")
    )


def _tool(run: Run, seq: int, **kw: Any) -> Step:
    fields: dict[str, Any] = {
        "tool": "get_order",
        "tool_call_id": "toolu_1",
        "arguments": ARGS,
        "result": ToolPayload(text="an order"),
        "cost_micros": 5,
    }
    fields.update(kw)
    return log_step(run_id=str(run.pk), seq=seq, kind="tool", **fields)


@pytest.mark.django_db
@pytest.mark.parametrize(
    "other",
    [
        {"tool_call_id": "toolu_2"},
        {"arguments": {"reference": "NW-1043"}},
        {"tool": "get_customer"},
    ],
    ids=["other call id", "other arguments", "other tool"],
)
def test_another_call_at_a_taken_seq_raises_and_leaves_the_row(seeded, other):
    run = _run()
    _tool(run, 1)
    with pytest.raises(StepConflict, match=f"run {run.pk} step 1 is already tool get_order"):
        _tool(run, 1, result=ToolPayload(text="something else"), **other)
    step = Step.objects.get(run=run, seq=1)
    assert (step.tool, step.tool_call_id, step.arguments, step.payload.text) == (
        "get_order",
        "toolu_1",
        ARGS,
        "an order",
    )
    assert step.attempts == 1 and step.args_hash == call_hash("tool", "get_order", ARGS)
    run.refresh_from_db()
    assert (run.steps, run.cost_micros) == (1, 5)  # the refused write counted nothing


@pytest.mark.django_db
def test_another_kind_at_a_taken_seq_raises(seeded):
    run = _run()
    log_step(run_id=str(run.pk), seq=1, kind="model", arguments={"message_count": 1})
    with pytest.raises(StepConflict, match="already model; refusing to overwrite it with tool"):
        _tool(run, 1)
    assert Step.objects.get(run=run, seq=1).kind == "model"


@pytest.mark.django_db
def test_the_same_call_again_adds_its_cost_and_keeps_its_last_result(seeded):
    run = _run()
    _tool(run, 1)
    _tool(run, 1, result=ToolPayload(text="the order, again"))
    step = Step.objects.get(run=run, seq=1)
    assert (step.attempts, step.cost_micros, step.payload.text) == (2, 10, "the order, again")
    assert_accounting_matches(run)


@pytest.mark.django_db
def test_a_model_step_is_the_same_call_under_a_new_prompt_but_not_with_other_messages(seeded):
    run = _run()
    sent = {"message_count": 3, "messages_sha256": "a" * 64}
    log_step(run_id=str(run.pk), seq=1, kind="model", arguments={**sent, "prompt_sha256": "1"})
    log_step(run_id=str(run.pk), seq=1, kind="model", arguments={**sent, "prompt_sha256": "2"})
    assert Step.objects.get(run=run, seq=1).attempts == 2
    with pytest.raises(StepConflict, match="other arguments"):
        log_step(
            run_id=str(run.pk),
            seq=1,
            kind="model",
            arguments={**sent, "messages_sha256": "b" * 64, "prompt_sha256": "2"},
        )


@pytest.mark.django_db
def test_a_row_from_before_identities_is_matched_on_kind_tool_and_call_id(seeded):
    run = _run()
    # As written before this change: no args_hash, and a result with no version.
    Step.objects.create(
        run=run,
        seq=1,
        kind="tool",
        tool="get_order",
        tool_call_id="toolu_1",
        arguments=ARGS,
        result={"text": "an order"},
        cost_micros=5,
    )
    Run.objects.filter(pk=run.pk).update(steps=1, cost_micros=5)
    legacy = payloads.read(Step.objects.get(run=run, seq=1))
    assert isinstance(legacy, payloads.ToolPayload)
    assert (legacy.version, legacy.text, legacy.ledger_key) == (LEGACY, "an order", "")
    _tool(run, 1)
    step = Step.objects.get(run=run, seq=1)
    assert step.attempts == 2 and step.args_hash == call_hash("tool", "get_order", ARGS)
    assert step.result["version"] == Row.VERSION
    with pytest.raises(StepConflict):
        _tool(run, 1, tool_call_id="toolu_9")
    assert_accounting_matches(run)


@pytest.mark.django_db
def test_a_step_finishing_after_a_cancel_is_appended_late_and_found_again(seeded):
    run = _run()
    _tool(run, 1)
    # A person cancels while the model call that will be step 2 is in flight: the cancel
    # takes seq 2 for its own row.
    assert run_mark_cancelled(run_id=str(run.pk), by="agent@northwind.test")
    closing = Step.objects.get(run=run, seq=2)
    assert closing.kind == "bound" and closing.payload.status == "cancelled"
    assert not closing.payload.late
    sent = {"message_count": 3, "messages_sha256": "c" * 64}
    for attempt in (1, 2):  # the late step, then a re-execution of the same step
        late = log_step(
            run_id=str(run.pk),
            seq=2,
            kind="model",
            arguments=sent,
            result=ModelPayload(content=[say("too late")], stop_reason="end_turn"),
            cost_micros=700,
            input_tokens=10,
        )
        assert late.seq == 3 and late.attempts == attempt
    assert [(s.seq, s.kind, s.payload.late) for s in Step.objects.filter(run=run)] == [
        (1, "tool", False),
        (2, "bound", False),
        (3, "model", True),
    ]
    closing.refresh_from_db()
    assert closing.payload.status == "cancelled" and closing.attempts == 1  # not overwritten
    run.refresh_from_db()
    assert run.status == "cancelled" and run.cost_micros == 5 + 1400
    assert_accounting_matches(run)
    # Another late step is appended after it, not folded into it.
    assert _tool(run, 3, tool_call_id="toolu_2").seq == 4


@pytest.mark.django_db
def test_the_closing_row_is_written_where_it_says(seeded):
    run = _run()
    _tool(run, 1)
    out = run_finish(str(run.pk), 2, "succeeded", "end_turn", "", "Done.")
    assert out.status == "succeeded"
    final = Step.objects.get(run=run, seq=2)
    assert final.kind == "final" and not final.payload.late
    assert isinstance(final.payload, payloads.EndPayload) and "Done." in final.payload.summary


@pytest.mark.django_db
def test_an_undo_on_a_finished_run_is_not_late(seeded):
    run = _run()
    Run.objects.filter(pk=run.pk).update(status="succeeded")
    undo = log_step(
        run_id=str(run.pk), seq=1, kind="undo", result=UndoPayload(undid_seq=1, text="ok", by="x")
    )
    assert undo.seq == 1 and not undo.payload.late and undo.payload.undid_seq == 1


class HeldModel(ScriptedProvider):
    """Answers like a script, but holds its first call until told to let go."""

    def __init__(self) -> None:
        super().__init__([[say("Done.")]], cost_micros=900)
        self.called, self.release = threading.Event(), threading.Event()

    def complete(self, **kw: Any) -> ModelReply:
        self.called.set()
        assert self.release.wait(30)
        return super().complete(**kw)


@pytest.mark.django_db(transaction=True)
def test_a_model_call_in_flight_during_a_cancel_is_counted_after_the_cancel_row(dbos_executor):
    held = HeldModel()
    install_override("*", held)
    try:
        run = start("NW-2", "owner@northwind.test")
        assert held.called.wait(30)
        run = run_cancel(run=run, user=user("agent@northwind.test"))
        assert run.status == "cancelled"
        held.release.set()
        model = wait_for_run(
            str(run.id), lambda r: r.step_log.filter(kind="model").exists(), timeout=30
        ).step_log.get(kind="model")
    finally:
        held.release.set()
        clear_overrides()
    rows = list(Step.objects.filter(run=run).order_by("seq"))
    closing = next(s for s in rows if s.kind == "bound")
    assert (closing.payload.event, closing.payload.stop_reason) == ("cancel", "cancelled")
    assert model.seq == closing.seq + 1 and model.payload.late
    run.refresh_from_db()
    assert run.status == "cancelled" and run.cost_micros == model.cost_micros == 900
    assert_accounting_matches(run)
