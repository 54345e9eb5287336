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
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from agent.loop import Loop
from agent.models import TERMINAL_STATUSES, Run, Step
from agent.models.ledger import LedgerEntry
from agent.providers.policy import PolicyProvider
from approvals.models import Approval, AuditEvent
from approvals.services import approval_decide
from deskhand.domain.desk.models import Refund
from deskhand.engine.deploys import runs_move_version
from tests.durability.helpers import start, user
from tests.fixtures import dbos as dbos_fixtures
from tests.fixtures.dbos import (
    empty_dbos_schema,
    ensure_in_process_executor,
    stop_in_process_executor,
    test_database_url,
    wait_for_run,
)
from tests.support import parked_fixture
from tests.support.parked_fixture import ROOT
from tests.support.waiting import PATIENCE_S, until

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
        json.loads(out)["reply"]["content"]
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
    # Every turn, recorded or after the upgrade, names the prompt version it was sent.
    versions = [s.payload.prompt_version for s in steps if s.kind == "model"]
    assert versions and all(versions)
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


@pytest.fixture
def probe_patch(monkeypatch) -> dict[str, bool]:
    """The patch mechanism (docs/deploys.md, route 1) on a step sequence that gains a patched
    branch before the first turn: what ``patch`` answered, by run."""
    taken: dict[str, bool] = {}
    ask = Loop._ask

    async def ask_after_a_patch(self: Loop) -> Any:
        if self.run_id not in taken:
            taken[self.run_id] = await self.rt.patch("probe-before-the-first-turn")
        return await ask(self)

    monkeypatch.setattr(Loop, "_ask", ask_after_a_patch)
    return taken


def test_a_patch_sends_the_recorded_run_down_its_recorded_path(
    executor_stopped, fixture, probe_patch
):
    """The parked run's history holds ``model`` where the patch now sits, so ``patch`` says
    False and the run replays its recorded path to the end."""
    run_id = parked_fixture.load(parked_fixture.aged(fixture, 1), executor_id=IN_PROCESS_EXECUTOR)
    recorded = _checkpoints(run_id)
    if fixture["application_version"] != settings.DESKHAND_APP_VERSION:
        assert runs_move_version(from_version=fixture["application_version"]) == [run_id]
    ensure_in_process_executor()
    approval = Approval.objects.get(run_id=run_id, status="pending")
    approval_decide(approval=approval, user=user("owner@northwind.test"), approve=True)
    assert _wait_finished(run_id).status == "succeeded"
    assert probe_patch[run_id] is False
    final = _checkpoints(run_id)
    assert all(final[fid] == cp for fid, cp in recorded.items())
    assert not [n for n in final.values() if n[0].startswith("DBOS.patch-")]


def test_a_patch_sends_a_new_run_down_the_new_path(dbos_executor, fixture, probe_patch):
    """A fresh run records the ``DBOS.patch-…`` marker, takes the new path, and parts from
    the recording only at that marker."""
    run_id = str(start(fixture["ticket"], parked_fixture.STARTED_BY).id)
    wait_for_run(run_id, lambda r: parked_fixture.is_parked(str(r.pk)))
    names = parked_fixture.workflow_step_names(run_id)
    assert probe_patch[run_id] is True and names[1] == "DBOS.patch-probe-before-the-first-turn"
    assert parked_fixture.sequence_change(fixture["step_names"], names) is None


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


# NW-1 parked at its refund gate by the last release before the 0.2.0 baseline, whose code
# (its ``commit``) the new code cannot replay: docs/deploys.md, "A new baseline".
PREVIOUS_VERSION = parked_fixture.FIXTURE.with_name("nw1_at_gate_0.1.0.json")


def _checkout(commit: str, into: Path) -> Path:
    """The previous release's code, as a draining worker of that version runs it."""
    if subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", commit]).returncode != 0:
        pytest.fail(
            f"commit {commit[:7]} (the previous release, whose worker this test runs) is not in"
            " this clone: the test needs the repository's history (git fetch --unshallow)."
        )
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(into), commit],
        check=True,
        capture_output=True,
    )
    return into


@pytest.mark.slow
def test_a_run_parked_on_the_previous_version_finishes_on_its_worker_while_the_new_one_serves(
    executor_stopped, tmp_path
):
    previous = parked_fixture.read(PREVIOUS_VERSION)
    old_version = previous["application_version"]
    assert old_version != settings.DESKHAND_APP_VERSION
    run_id = parked_fixture.load(parked_fixture.aged(previous, 1), executor_id="drain-old")
    recorded = _checkpoints(run_id)

    # The new version's worker serves a new run, start to end, and never touches the old one.
    ensure_in_process_executor()
    fresh = _wait_finished(str(start("NW-2", "owner@northwind.test").id))
    assert (
        fresh.status == "succeeded" and fresh.application_version == settings.DESKHAND_APP_VERSION
    )
    assert _checkpoints(run_id) == recorded
    assert Run.objects.get(pk=run_id).status == "awaiting_approval"

    # A worker of the previous version, left draining, finishes it on the previous code.
    old_tree = _checkout(previous["commit"], tmp_path / "previous")
    log = tmp_path / "drain-old.log"
    env = {
        **os.environ,
        "PYTHONPATH": str(old_tree),
        "DESKHAND_APP_VERSION": old_version,
        "DATABASE_URL": test_database_url(),
        "ANTHROPIC_API_KEY": "",
        "PYTHONUNBUFFERED": "1",
    }
    argv = [sys.executable, "-m", "tests.devtools.crashworker", "drain-old", "", ""]
    with log.open("w") as out:
        worker = subprocess.Popen(argv, cwd=old_tree, env=env, stdout=out, stderr=out)
    try:
        until("the previous version's worker", lambda: "drain-old ready" in log.read_text())
        approval = Approval.objects.get(run_id=run_id, status="pending")
        approval_decide(approval=approval, user=user("owner@northwind.test"), approve=True)
        run = _wait_finished(run_id)
    finally:
        worker.terminate()
        worker.wait(30)
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old_tree)])

    assert (run.status, run.stop_reason) == ("succeeded", "end_turn"), log.read_text()[-3000:]
    assert [r.amount_cents for r in Refund.objects.filter(run_id=run_id)] == [3800]
    final = _checkpoints(run_id)
    assert all(final[fid] == cp for fid, cp in recorded.items())
    # It finished as the previous code runs (its gate's patch marker, no step of the new one),
    # still under its own version.
    assert "DBOS.patch-two-step-gate" in parked_fixture.workflow_step_names(run_id)
    assert Run.objects.get(pk=run_id).application_version == old_version
