"""Runs outlive deploys: a run parked on the previous commit's step sequence still finishes.

``tests/fixtures/parked/nw1_at_gate.json`` holds NW-1 parked at its refund approval,
recorded on an earlier commit (its ``about`` says which, and how to re-record it).
The first test resurrects it in a freshly seeded world and lets today's code
recover, replay and finish it; the second pins the step sequence a fresh run takes
up to the gate to the recorded one. See docs/deploys.md.
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from agent.ledger.models import LedgerEntry
from agent.models import TERMINAL_STATUSES, Run, Step
from agent.ops.health import health_report
from agent.providers import clear_overrides, install_override
from agent.providers.policy import PolicyProvider
from agent.providers.scripted import ScriptedProvider, call
from approvals.models import Approval, AuditEvent
from approvals.services import approval_decide
from deskhand.dbos.engine.deploys import runs_move_version
from deskhand.desk.models import Refund
from tests.durability.helpers import start, user
from tests.fixtures import dbos as dbos_fixtures
from tests.fixtures.dbos import (
    empty_dbos_schema,
    ensure_in_process_executor,
    stop_in_process_executor,
    wait_for_run,
)
from tests.support import parked_fixture
from tests.support.waiting import PATIENCE_S

pytestmark = pytest.mark.django_db(transaction=True)

# The in-process executor's id (tests/fixtures/dbos.py): the loaded workflow is PENDING under
# it, as a worker that died leaves its workflows, so launching it recovers the run.
IN_PROCESS_EXECUTOR = "pytest-inprocess"


@pytest.fixture(scope="module")
def fixture() -> dict[str, Any]:
    """NW-1 parked at its gate by an earlier release (its own application version)."""
    return parked_fixture.read()


@pytest.fixture
def executor_stopped(tseeded) -> Iterator[None]:
    """A seeded world with no DBOS executor running and an empty ``dbos`` schema."""
    stop_in_process_executor()
    empty_dbos_schema()
    yield
    if dbos_fixtures._state["launched"]:
        dbos_fixtures._cancel_open_runs()
    stop_in_process_executor()
    empty_dbos_schema()


@pytest.fixture
def model_calls(monkeypatch) -> list[list[dict[str, Any]]]:
    """Every call the keyless provider gets in this process, as the messages it was handed."""
    calls: list[list[dict[str, Any]]] = []
    complete = PolicyProvider.complete

    def counting(self, *, system, messages, tools):
        calls.append(copy.deepcopy(messages))
        return complete(self, system=system, messages=messages, tools=tools)

    monkeypatch.setattr(PolicyProvider, "complete", counting)
    return calls


def _checkpoints(workflow_id: str) -> dict[int, tuple[str, str | None]]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT function_id, function_name, output FROM dbos.operation_outputs"
            " WHERE workflow_uuid = %s ORDER BY function_id",
            [workflow_id],
        )
        return {fid: (name, output) for fid, name, output in cur.fetchall()}


def _wait_finished(run_id: str, timeout: float = PATIENCE_S) -> Run:
    """The run once terminal; fails at once, with DBOS's error, if the workflow could not replay."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        run = Run.objects.get(pk=run_id)
        if run.status in TERMINAL_STATUSES:
            return run
        with connection.cursor() as cur:
            cur.execute(
                "SELECT s.status, coalesce(s.error, o.error) FROM dbos.workflow_status s"
                " LEFT JOIN dbos.workflow_output o USING (workflow_uuid) WHERE workflow_uuid = %s",
                [run_id],
            )
            status, error = cur.fetchone()
        if status not in ("PENDING", "ENQUEUED"):
            raise AssertionError(
                f"the recovered workflow ended {status} while the run is {run.status}: {error}"
            )
        time.sleep(0.1)
    raise AssertionError(
        f"run {run_id} is still {run.status} after {timeout}s; DBOS steps now: "
        f"{parked_fixture.workflow_step_names(run_id)}"
    )


def _recorded(fixture: dict[str, Any], table: str) -> list[dict[str, Any]]:
    return next(b["rows"] for b in fixture["django"] if b["table"] == table)


def test_a_run_parked_on_the_previous_step_sequence_finishes_after_the_upgrade(
    executor_stopped, fixture, model_calls
):
    # Recorded a month ago: long past the approval's expiry and the run's deadline, unless
    # the loader moves them on with the rest of its times.
    run_id = parked_fixture.load(parked_fixture.aged(fixture, 30), executor_id=IN_PROCESS_EXECUTOR)
    run = Run.objects.get(pk=run_id)
    assert run.status == "awaiting_approval"
    approval = Approval.objects.get(run=run, status="pending")
    recorded_checkpoints = _checkpoints(run_id)
    recorded_steps = {s["seq"]: s for s in _recorded(fixture, "agent_step")}
    assert set(recorded_steps) == set(range(1, len(recorded_steps) + 1))

    # The deploy: the application version comes from the release, so the parked run is on
    # the last release's version; the documented move puts it on this one (docs/deploys.md),
    # and the new code's executor replays it from its checkpoints.
    if fixture["application_version"] != settings.DESKHAND_APP_VERSION:
        assert runs_move_version(from_version=fixture["application_version"]) == [run_id]
    ensure_in_process_executor()
    approval_decide(
        approval=approval, user=user("owner@northwind.test"), approve=True, channel="cli"
    )
    run = _wait_finished(run_id)

    assert (run.status, run.stop_reason) == ("succeeded", "end_turn"), run.summary
    refunds = list(Refund.objects.filter(order__reference="NW-1042"))
    assert [(r.amount_cents, str(r.run_id)) for r in refunds] == [(3800, run_id)]
    assert Refund.objects.count() == 1
    ledger = list(LedgerEntry.objects.filter(run_id=run_id).order_by("pk"))  # in claim order
    # After the refund, today's provider replies to the customer (approved by the owner's rule):
    # steps after the recorded history, so the recorded sequence replays unchanged.
    assert [(e.tool, e.approval_id, e.ok) for e in ledger][:1] == [
        ("issue_refund", approval.pk, True)
    ]
    assert [e.tool for e in ledger[1:]] == ["reply_to_customer"]
    assert refunds[0].ledger_entry_id == ledger[0].pk
    assert "Refunded 38.00 USD against NW-1042" in run.summary
    approvals = AuditEvent.objects.filter(run=run, action="approval.approve")
    assert sorted(str(e.actor) for e in approvals) == ["None", "owner@northwind.test"]  # + the rule

    # The recorded checkpoints were replayed, not re-executed: each is still there, unchanged,
    # and the model was asked only for turns after them, handed the recorded conversation.
    final = _checkpoints(run_id)
    for fid, checkpoint in recorded_checkpoints.items():
        assert final[fid] == checkpoint, f"checkpoint {fid} ({checkpoint[0]}) was rewritten"
    recorded_turns = [
        json.loads(out)["content"]
        for _, (name, out) in sorted(recorded_checkpoints.items())
        if name == "model"
    ]
    new_turns = [
        fid
        for fid, (name, _) in final.items()
        if name == "model" and fid not in recorded_checkpoints
    ]
    assert len(recorded_turns) == 4 and new_turns
    assert len(model_calls) == len(new_turns), "a recorded model turn was called again"
    handed = [m["content"] for m in model_calls[0] if m["role"] == "assistant"]
    assert handed[: len(recorded_turns)] == recorded_turns

    # The step log continues after the recorded rows and overwrote none of them.
    steps = list(Step.objects.filter(run_id=run_id).order_by("seq"))
    assert [s.seq for s in steps] == list(range(1, len(steps) + 1))
    assert len(steps) > len(recorded_steps)
    for step in steps[: len(recorded_steps)]:
        was = recorded_steps[step.seq]
        now = {
            "kind": step.kind,
            "tool": step.tool,
            "tool_call_id": step.tool_call_id,
            "arguments": step.arguments,
            "result": step.result,
            "attempts": step.attempts,
            "input_tokens": step.input_tokens,
            "cost_micros": step.cost_micros,
        }
        same = [k for k in now if k in was]
        assert {k: now[k] for k in same} == {k: was[k] for k in same}, (
            f"step {step.seq} was overwritten"
        )
    later = [(s.kind, s.tool, (s.result or {}).get("event")) for s in steps[len(recorded_steps) :]]
    assert ("approval", "issue_refund", "approved") in later
    assert ("tool", "issue_refund", None) in later
    # Prompt versions are recorded by the model step's own writes (no new DBOS step): the
    # recorded turns name none, the turns after the upgrade name the one they were sent.
    versions = [s.payload.prompt_version for s in steps if s.kind == "model"]
    assert versions[: len(recorded_turns)] == [""] * len(recorded_turns)
    assert versions[len(recorded_turns) :] and all(versions[len(recorded_turns) :])
    assert Run.objects.get(pk=run_id).prompt_version_id == versions[-1]


def test_the_step_sequence_up_to_the_gate_is_the_recorded_one(dbos_executor, fixture):
    run = start(fixture["ticket"], parked_fixture.STARTED_BY)
    run_id = str(run.id)
    wait_for_run(run_id, lambda r: parked_fixture.is_parked(str(r.pk)))
    change = parked_fixture.sequence_change(
        fixture["step_names"], parked_fixture.workflow_step_names(run_id)
    )
    assert change is None, change


def test_a_sequence_change_is_named_unless_a_patch_guards_it():
    old = ["run.begin", "bounds.check", "model", "gate.request", "DBOS.sleep"]
    assert parked_fixture.sequence_change(old, list(old)) is None
    guarded = ["run.begin", "bounds.check", "DBOS.patch-lock-run", "run.lock", "model"]
    assert parked_fixture.sequence_change(old, guarded) is None
    renamed = ["run.begin", "bounds.check", "model.turn", "gate.request", "DBOS.sleep"]
    change = parked_fixture.sequence_change(old, renamed)
    assert change is not None
    assert change.startswith(
        "the workflow's step sequence changed; guard it with DBOS.patch or ship a new "
        "application version, see docs/deploys.md"
    )
    assert "'model'" in change and "'model.turn'" in change
    assert parked_fixture.sequence_change(old, old[:-1]) is not None
    assert parked_fixture.sequence_change(old, [*old, "clock"]) is not None


def test_the_loader_takes_a_schema_that_grew_since_recording(executor_stopped, fixture):
    """Columns added since recording get their defaults; seeded keys land on the new ids."""
    old = copy.deepcopy(fixture)
    for block in old["django"]:
        for row in block["rows"]:  # as if these NOT NULL fields were added after recording
            row.pop("loop_threshold", None)
            row.pop("attempts", None)
    added = [("agent_step", "note_v2 text"), ("approvals_approval", "withdrawn_at timestamptz")]
    added.append(("agent_run", "lane integer NOT NULL DEFAULT 7"))
    with connection.cursor() as cur:
        for table, column in added:
            cur.execute(f"ALTER TABLE {table} ADD COLUMN {column}")
    try:
        run_id = parked_fixture.load(old, executor_id=IN_PROCESS_EXECUTOR)
        run = Run.objects.select_related("ticket", "merchant", "started_by").get(pk=run_id)
        assert (run.ticket.reference, run.merchant.slug) == ("NW-1", "northwind")
        assert run.started_by is not None and run.started_by.email == "owner@northwind.test"
        assert run.loop_threshold == 3
        assert set(Step.objects.filter(run=run).values_list("attempts", flat=True)) == {1}
        assert Approval.objects.get(run=run).merchant_id == run.merchant_id
        with connection.cursor() as cur:
            cur.execute("SELECT lane FROM agent_run WHERE id = %s", [run_id])
            assert cur.fetchone() == (7,)
        assert parked_fixture.workflow_step_names(run_id) == fixture["step_names"]
    finally:
        with connection.cursor() as cur:
            for table, column in added:
                cur.execute(f"ALTER TABLE {table} DROP COLUMN {column.split()[0]}")


# The recorded NW-1 run's calls up to its gate (tests/fixtures/parked/nw1_at_gate.json).
NW1_TO_THE_GATE = [
    [call("get_ticket", reference="NW-1")],
    [call("get_order", reference="NW-1042")],
    [call("search_kb", query="refund policy")],
    [
        call(
            "issue_refund",
            order_reference="NW-1042",
            amount_cents=1000,
            reason="The shipping, asked of a person.",
        )
    ],
]


def test_the_parked_run_keeps_the_plain_model_step_and_a_fresh_run_takes_the_rate_limited_one(
    executor_stopped, fixture, settings
):
    """``model-calls-rate-limited`` (docs/rate-limits.md): with the scripted provider on a
    limited queue too, the recorded NW-1 still calls the plain ``model`` step after its gate
    (its history went that way), while a fresh run's calls are children on the queue."""
    from deskhand.dbos.engine.queues import register_model_queues

    settings.DESKHAND_MODEL_RPM = {"scripted": 600}
    run_id = parked_fixture.load(parked_fixture.aged(fixture, 30), executor_id=IN_PROCESS_EXECUTOR)
    recorded = _checkpoints(run_id)
    if fixture["application_version"] != settings.DESKHAND_APP_VERSION:
        assert runs_move_version(from_version=fixture["application_version"]) == [run_id]
    ensure_in_process_executor()
    register_model_queues()
    approval_decide(
        approval=Approval.objects.get(run_id=run_id, status="pending"),
        user=user("owner@northwind.test"),
        approve=True,
        channel="cli",
    )
    run = _wait_finished(run_id)

    assert (run.status, run.stop_reason) == ("succeeded", "end_turn"), run.summary
    later = [name for fid, (name, _) in sorted(_checkpoints(run_id).items()) if fid not in recorded]
    assert "model" in later, later
    assert not any(n.startswith(("deskhand.limited_call", "DBOS.patch-model")) for n in later)

    # NW-1042's goods went back above, and the keyless agent no longer asks again on an
    # order a person already refunded (issue 29): the fresh run plays the recorded path.
    install_override("*", ScriptedProvider(NW1_TO_THE_GATE))
    try:
        fresh = str(start(fixture["ticket"], parked_fixture.STARTED_BY).id)
        wait_for_run(fresh, lambda r: parked_fixture.is_parked(str(r.pk)))
    finally:
        clear_overrides()
    names = parked_fixture.workflow_step_names(fresh)
    assert "DBOS.patch-two-step-gate" in names and "model" not in names
    assert names.count("deskhand.limited_call") >= 1 and "DBOS.getResult" not in names
    assert parked_fixture.sequence_change(fixture["step_names"], names) is None
    with connection.cursor() as cur:
        cur.execute(
            "SELECT DISTINCT s.queue_name FROM dbos.operation_outputs o JOIN dbos.workflow_status"
            " s ON s.workflow_uuid = o.child_workflow_id WHERE o.workflow_uuid = %s",
            [fresh],
        )
        assert cur.fetchall() == [("model-scripted",)]


def test_a_run_parked_before_one_step_turns_keeps_its_four_operation_turns_and_finishes(
    executor_stopped, model_calls
):
    """``one-step-turns`` (docs/deploys.md): NW-1 parked by the release before it — three
    patch markers, then a notes drain, ``bounds.check`` and ``model`` per turn — replays
    that sequence, finishes with one refund, and asks the model only for turns after the gate."""
    fixture = parked_fixture.read(
        parked_fixture.FIXTURE.with_name("nw1_at_gate_three_patches.json")
    )
    assert fixture["step_names"][1:4] == [
        "DBOS.patch-fence-in-opening-turn",
        "DBOS.patch-unknown-stop-reason-ends-run",
        "DBOS.patch-model-calls-rate-limited",
    ]
    run_id = parked_fixture.load(parked_fixture.aged(fixture, 2), executor_id=IN_PROCESS_EXECUTOR)
    # Health counts it among the runs that still need agent/run/legacy_turns.py.
    assert health_report().legacy_turn_runs == 1
    recorded = _checkpoints(run_id)
    if fixture["application_version"] != settings.DESKHAND_APP_VERSION:
        assert runs_move_version(from_version=fixture["application_version"]) == [run_id]
    ensure_in_process_executor()
    approval_decide(
        approval=Approval.objects.get(run_id=run_id, status="pending"),
        user=user("owner@northwind.test"),
        approve=True,
        channel="cli",
    )
    run = _wait_finished(run_id)

    assert (run.status, run.stop_reason) == ("succeeded", "end_turn"), run.summary
    assert [r.amount_cents for r in Refund.objects.filter(order__reference="NW-1042")] == [3800]
    final = _checkpoints(run_id)
    assert all(final[fid] == checkpoint for fid, checkpoint in recorded.items())
    later = [name for fid, (name, _) in sorted(final.items()) if fid not in recorded]
    # After the gate, each turn is still the older four operations, never the one-step turn.
    assert "DBOS.patch-one-step-turns" not in later
    assert later.count("bounds.check") == later.count("model") >= 1
    new_turns = later.count("model")
    assert len(model_calls) == new_turns, "a recorded model turn was called again"
    steps = list(Step.objects.filter(run_id=run_id).order_by("seq"))
    assert [s.seq for s in steps] == list(range(1, len(steps) + 1))
    assert health_report().legacy_turn_runs == 0  # finished: nothing needs the older path


def _pending_approval(run_id: str, timeout: float = PATIENCE_S) -> Approval:
    """The run's pending approval once it reaches its gate (a run recovered mid-turn works its
    way there first)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        approval = Approval.objects.filter(run_id=run_id, status="pending").first()
        if approval is not None:
            return approval
        assert Run.objects.get(pk=run_id).status not in TERMINAL_STATUSES
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} never reached its gate")


def _deployed_and_approved(fixture: dict[str, Any], run_id: str) -> Run:
    """The deploy — the parked run moved to this release's version, as docs/deploys.md
    does, and this code's executor started — then the owner's approval of the run's pending
    refund: the run once it has ended."""
    if fixture["application_version"] != settings.DESKHAND_APP_VERSION:
        assert runs_move_version(from_version=fixture["application_version"]) == [run_id]
    ensure_in_process_executor()
    approval_decide(
        approval=_pending_approval(run_id),
        user=user("owner@northwind.test"),
        approve=True,
        channel="cli",
    )
    return _wait_finished(run_id)


def _refunded_once_over(run: Run, recorded: dict[int, tuple[str, str | None]]) -> dict[int, Any]:
    """The run succeeded with one refund of NW-1042 over its recorded checkpoints, each
    still there unchanged; its checkpoints now."""
    assert (run.status, run.stop_reason) == ("succeeded", "end_turn"), run.summary
    assert [r.amount_cents for r in Refund.objects.filter(order__reference="NW-1042")] == [3800]
    assert Refund.objects.count() == 1
    final = _checkpoints(str(run.pk))
    assert all(final[fid] == checkpoint for fid, checkpoint in recorded.items())
    return final


@pytest.mark.parametrize("recorded_as", ["nw1_at_gate_one_step.json", "nw1_mid_turn_one_step.json"])
def test_a_run_parked_by_the_release_before_agent_by_concept_finishes(
    executor_stopped, model_calls, recorded_as
):
    """``agent/`` moved into folders and DBOS into one package (docs/architecture.md): the
    names DBOS persisted — workflow, steps, topics — are compatibility data. NW-1 parked by the
    release before that move, at its refund gate and stopped mid-turn inside ``tool.get_order``,
    replays its checkpoints unchanged, asks the model only for turns after them, and refunds once."""
    fixture = parked_fixture.read(parked_fixture.FIXTURE.with_name(recorded_as))
    assert fixture["commit"].startswith("4bfd605")
    run_id = parked_fixture.load(parked_fixture.aged(fixture, 2), executor_id=IN_PROCESS_EXECUTOR)
    assert health_report().legacy_turn_runs == 0  # one-step turns: not the older path
    recorded = _checkpoints(run_id)
    run = _deployed_and_approved(fixture, run_id)

    final = _refunded_once_over(run, recorded)
    recorded_turns = [name for name, _ in recorded.values()].count("model")
    new_turns = [name for fid, (name, _) in final.items() if fid not in recorded].count("model")
    assert recorded_turns >= 2 and new_turns >= 1
    assert len(model_calls) == new_turns, "a recorded model turn was called again"
    steps = list(Step.objects.filter(run_id=run_id).order_by("seq"))
    assert [s.seq for s in steps] == list(range(1, len(steps) + 1))


def test_a_run_parked_at_the_five_operation_gate_keeps_that_gate_and_finishes(
    executor_stopped, model_calls
):
    """``two-step-gate`` (docs/deploys.md): NW-1 parked by the release before it — a ledger
    lookup, the request, a clock, a read and a clock before its wait — replays them, walks the
    older gate for the rest of its life (the reply the owner's rule approves after the refund
    too), refunds once, and asks the model only for turns after the gate. A fresh run takes
    the two-step gate, parting from the recorded sequence only at the patch marker."""
    fixture = parked_fixture.read(
        parked_fixture.FIXTURE.with_name("nw1_at_gate_before_two_step_gate.json")
    )
    assert fixture["commit"].startswith("5aa03ca")
    assert fixture["step_names"][1] == "DBOS.patch-one-step-turns"
    assert fixture["step_names"][-6:-1] == [
        "ledger.lookup",
        "gate.request",
        "clock",
        "gate.read",
        "clock",
    ]
    run_id = parked_fixture.load(parked_fixture.aged(fixture, 2), executor_id=IN_PROCESS_EXECUTOR)
    recorded = _checkpoints(run_id)
    run = _deployed_and_approved(fixture, run_id)

    final = _refunded_once_over(run, recorded)
    later = [name for fid, (name, _) in sorted(final.items()) if fid not in recorded]
    assert "DBOS.patch-two-step-gate" not in later
    # The refund's resume, then the reply's whole older gate.
    assert later.count("gate.resume") == 2 and later.count("ledger.lookup") == 1, later
    assert later.count("gate.read") >= 2 and later.count("clock") >= 3, later
    new_turns = later.count("model")
    assert new_turns >= 1 and len(model_calls) == new_turns, (
        "a recorded model turn was called again"
    )
    steps = list(Step.objects.filter(run_id=run_id).order_by("seq"))
    assert [s.seq for s in steps] == list(range(1, len(steps) + 1))
    assert [(e.tool, e.ok) for e in LedgerEntry.objects.filter(run_id=run_id).order_by("pk")] == [
        ("issue_refund", True),
        ("reply_to_customer", True),
    ]

    install_override("*", ScriptedProvider(NW1_TO_THE_GATE))
    try:
        fresh = str(start(fixture["ticket"], parked_fixture.STARTED_BY).id)
        wait_for_run(fresh, lambda r: parked_fixture.is_parked(str(r.pk)))
    finally:
        clear_overrides()
    names = parked_fixture.workflow_step_names(fresh)
    assert names[1] == "DBOS.patch-two-step-gate"
    assert not {"ledger.lookup", "gate.read", "clock"} & set(names), names
    assert names[-2:] == ["gate.request", "DBOS.sleep"], names
    assert parked_fixture.sequence_change(fixture["step_names"], names) is None
