"""DBOS's own tools in an operator's hands: ``dbos workflow cancel / resume / fork``.

An operator who knows DBOS reaches for its CLI, not ours. Each test here drives the real
``dbos`` command (a subprocess, on the test database, as an operator would run it) against
runs worked by real DBOS, and checks that Deskhand ends in a state that tells the truth —
at once where a person is told something (a decision), within one reconciler pass
otherwise — and says what happened where people look: the console, ``health --json``, the
attention queue.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection
from django.test import Client

from agent.models import Run, Step, WorkflowFinding
from agent.models.ledger import LedgerEntry
from agent.ops.reconciler import reconcile
from agent.record import faults
from agent.run import services
from approvals.models import Approval, AuditEvent
from deskhand.domain.desk.models import Refund
from deskhand.infra.dbos import client as dbos_client
from tests.durability.helpers import decide, pending_approval, start, user
from tests.fixtures.dbos import ROOT, test_database_url, wait_parked, wait_terminal
from tests.support.messages_api import DEFAULT_KEY, MessagesApi
from tests.support.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "owner@northwind.test"
DBOS_CLI = Path(sys.executable).parent / "dbos"


def dbos(*args: str) -> subprocess.CompletedProcess[str]:
    """``dbos workflow <args>`` against the test database, as an operator types it."""
    assert DBOS_CLI.exists(), f"the dbos CLI is missing at {DBOS_CLI}: run make venv"
    done = subprocess.run(
        [str(DBOS_CLI), "workflow", *args, "--sys-db-url", dbos_client.database_url()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"dbos workflow {' '.join(args)} failed:\n{done.stderr[-3000:]}"
    return done


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    """``manage.py <args>`` in its own process, on the test database."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={"DATABASE_URL": test_database_url(), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_decision_on_a_run_whose_workflow_dbos_cancelled_is_refused_at_once(dbos_executor):
    run = wait_parked(str(start("NW-1", OWNER).id))
    approval = pending_approval(run)
    dbos("cancel", str(run.pk))
    # Our row does not know yet (the reconciler has not passed): DBOS is what is asked.
    assert Run.objects.get(pk=run.pk).status == "awaiting_approval"

    cli = manage("decide", str(approval.pk), "approve", "--as", OWNER)
    assert cli.returncode != 0
    assert "workflow was cancelled in DBOS, outside Deskhand" in cli.stderr
    assert "nothing was recorded" in cli.stderr and "Traceback" not in cli.stderr
    as_json = manage("decide", str(approval.pk), "approve", "--as", OWNER, "--json")
    assert as_json.returncode != 0
    assert json.loads(as_json.stdout)["code"] == "refused"

    web = Client()
    web.force_login(user(OWNER))
    page = web.post(f"/approvals/{approval.pk}/decide", {"decision": "approve"})
    assert page.status_code == 409
    assert "workflow was cancelled in DBOS, outside Deskhand" in page.content.decode()

    approval.refresh_from_db()
    assert approval.status == "pending" and approval.decided_at is None
    assert not AuditEvent.objects.filter(action__startswith="approval.approve").exists()
    assert not Refund.objects.filter(run=run).exists()

    # One reconciler pass and the run says what happened; the approval was withdrawn.
    reconcile()
    run.refresh_from_db()
    assert run.status == "cancelled" and "outside Deskhand" in run.stop_detail
    assert Approval.objects.get(pk=approval.pk).status == "withdrawn"


# --- dbos workflow fork ------------------------------------------------------------------


def finished_nw1() -> Run:
    """NW-1 worked to its end: the refund approved and made, the ticket resolved."""
    run = wait_parked(str(start("NW-1", OWNER).id))
    decide(run, OWNER)
    return wait_terminal(str(run.pk))


def dbos_step_of(run: Run, **match: object) -> tuple[int, int]:
    """(step-log seq, DBOS function id) of the run's last step matching ``match``."""
    step = Step.objects.filter(run=run, **match).order_by("-seq").first()
    assert step is not None and step.function_id is not None, match
    return step.seq, step.function_id


def fork_of(run: Run, *args: str) -> str:
    """``dbos workflow fork`` of the run; the fork's workflow id, as DBOS printed it."""
    return json.loads(dbos("fork", str(run.pk), *args).stdout)["workflow_id"]


def findings(**match: object) -> list[WorkflowFinding]:
    return list(WorkflowFinding.objects.filter(**match).order_by("pk"))


def test_a_dbos_fork_of_a_finished_run_becomes_a_run_with_its_lineage(dbos_executor):
    parent = finished_nw1()
    seq, start_step = dbos_step_of(parent, kind="model", seq__lt=8)  # the turn that asked to refund
    fork_id = fork_of(parent, "--step", str(start_step))

    # Whoever decides first — the workflow as it starts, or one reconciler pass — it is a run.
    reconcile()
    fork = wait_terminal(fork_id)
    assert (fork.forked_from_id, fork.fork_step) == (parent.pk, seq)
    assert (fork.ticket_id, fork.merchant_id, fork.prompt) == (
        parent.ticket_id,
        parent.merchant_id,
        parent.prompt,
    )
    assert fork.started_by is None and fork.status == "succeeded"
    # Its effects were answered from the lineage's ledger: asked nothing, paid nothing again.
    assert not Approval.objects.filter(run=fork).exists()
    assert Refund.objects.filter(run__ticket=parent.ticket).count() == 1
    assert "Inherited from the lineage (already done, not repeated)" in fork.summary
    assert fork.step_log.order_by("seq").first().seq == seq  # its own steps start at the fork
    event = AuditEvent.objects.get(run=fork, action="run.fork")
    assert event.actor is None and event.detail["dbos_start_step"] == start_step
    (adopted,) = findings(workflow_id=fork_id)
    assert (adopted.kind, adopted.run_id, adopted.forked_from_id) == (
        "fork_adopted",
        fork.pk,
        parent.pk,
    )
    assert adopted.resolved_at is not None  # nothing for a person to do

    # What became of it, where people look.
    report = json.loads(manage("health", "--json").stdout)
    recent = {f["workflow_id"]: f for f in report["workflows"]["recent"]}
    assert recent[fork_id]["kind"] == "fork_adopted" and recent[fork_id]["run_id"] == fork_id
    assert f"became run {fork_id}" in recent[fork_id]["detail"]
    assert report["workflows"]["open"] == 0
    web = Client()
    web.force_login(user(OWNER))
    assert fork_id in web.get("/runs/").content.decode()
    page = web.get(f"/runs/{fork_id}/").content.decode()
    assert f"{parent.pk}</a> at step {seq}" in page  # Forked from
    assert "DBOS, outside Deskhand (a fork)" in page
    assert f"became run {fork_id}" in web.get(f"/runs/{parent.pk}/").content.decode()


def test_a_dbos_fork_replay_would_refuse_is_cancelled_and_shown_for_a_person(dbos_executor):
    parent = finished_nw1()
    seq, start_step = dbos_step_of(parent, kind="tool", tool="issue_refund")
    # On a version no worker serves: the reconciler, not the workflow, must decide it.
    fork_id = fork_of(parent, "--step", str(start_step), "--application-version", "nobody-1")
    counts = reconcile()
    assert counts["forks_refused"] == 1 and counts["forks_adopted"] == 0

    assert not Run.objects.filter(pk=fork_id).exists()
    assert dbos_client.workflow_state(fork_id).status == "CANCELLED"
    (refused,) = findings(workflow_id=fork_id)
    assert refused.kind == "fork_refused" and refused.resolved_at is None
    assert refused.forked_from_id == parent.pk and refused.merchant_id == parent.merchant_id
    why = f"step {seq} (issue_refund) is an approved irreversible effect of the original run"
    assert why in refused.detail and "DBOS cancelled it, so it did nothing" in refused.detail
    assert "--fork-from" in refused.detail
    assert reconcile()["forks_refused"] == 0  # decided once

    report = json.loads(manage("health", "--json").stdout)
    assert report["ok"] is False and report["workflows"]["open"] == 1
    assert report["workflows"]["by_kind"] == {"fork_refused": 1}
    assert why in report["workflows"]["findings"][0]["detail"]
    web = Client()
    web.force_login(user(OWNER))
    queue = web.get("/attention/").content.decode()
    assert "DBOS fork refused" in queue and why in queue
    assert (
        "DBOS fork refused" not in client_for_other_merchant().get("/attention/").content.decode()
    )

    settle = manage(
        "workflow_findings", "--resolve", str(refused.pk), "--note", "told ops", "--by", OWNER
    )
    assert settle.returncode == 0, settle.stderr
    assert "DBOS fork refused" not in web.get("/attention/").content.decode()
    again = manage("workflow_findings", "--resolve", str(refused.pk), "--note", "x", "--by", OWNER)
    assert again.returncode != 0 and "already settled" in again.stderr


def test_a_dbos_fork_at_an_approval_request_asks_the_ledger_first_and_pays_nothing_again(
    dbos_executor,
):
    """The request step itself asks the lineage's ledger before anyone is asked, so a DBOS
    fork at the request is a run like any: the refund the original made is answered from the
    ledger, nobody is asked, nothing is paid twice."""
    parent = finished_nw1()
    seq, request = dbos_step_of(parent, kind="approval", seq__lt=9)
    names = {s["function_name"] for s in dbos_client.workflow_steps(str(parent.pk))}
    assert "ledger.lookup" not in names  # nothing before the request to start at instead
    fork_id = fork_of(parent, "--step", str(request))
    reconcile()  # whoever decides first — the workflow as it starts, or this pass — it is a run
    fork = wait_terminal(fork_id)

    assert (fork.forked_from_id, fork.fork_step, fork.status) == (parent.pk, seq, "succeeded")
    (adopted,) = findings(workflow_id=fork_id)
    assert adopted.kind == "fork_adopted"
    assert not Approval.objects.filter(run=fork).exists()
    assert Refund.objects.filter(run__ticket=parent.ticket).count() == 1
    assert not LedgerEntry.objects.filter(run=fork, tool="issue_refund").exists()
    assert "Inherited from the lineage (already done, not repeated)" in fork.summary


def test_a_dbos_fork_while_the_ticket_has_an_open_run_is_refused(dbos_executor):
    parked = wait_parked(str(start("NW-1", OWNER).id))
    _, start_step = dbos_step_of(parked, kind="model", seq=1)
    fork_id = fork_of(parked, "--step", str(start_step))
    refused = wait_for_finding(fork_id)
    assert refused.kind == "fork_refused" and "already has an open run" in refused.detail
    assert Run.objects.get(pk=parked.pk).status == "awaiting_approval"  # untouched


def test_a_dbos_fork_that_failed_before_deskhand_saw_it_is_reported(dbos_executor):
    parent = finished_nw1()
    _, start_step = dbos_step_of(parent, kind="model", seq=1)
    fork_id = fork_of(parent, "--step", str(start_step), "--application-version", "nobody-1")
    with connection.cursor() as cur:  # as a worker of an older release left it: no run, failed
        cur.execute(
            "UPDATE dbos.workflow_status SET status = 'ERROR', error = %s WHERE workflow_uuid = %s",
            ['{"message": "Run matching query does not exist."}', fork_id],
        )
    assert reconcile()["forks_failed"] == 1
    (failed,) = findings(workflow_id=fork_id)
    assert failed.kind == "fork_failed" and failed.resolved_at is None
    assert "ended ERROR before Deskhand adopted it (Run matching query does not exist.)" in (
        failed.detail
    )
    assert reconcile()["forks_failed"] == 0


def wait_for_finding(workflow_id: str) -> WorkflowFinding:
    return until(
        f"a finding recorded about workflow {workflow_id}",
        WorkflowFinding.objects.filter(workflow_id=workflow_id).first,
        every=0.1,
    )


def client_for_other_merchant() -> Client:
    web = Client()
    web.force_login(user("owner@lumen.test"))
    return web


# --- dbos workflow cancel and resume ------------------------------------------------------


def wait_workflow(run_id: str, predicate) -> str:
    def status() -> str | None:
        state = dbos_client.workflow_state(run_id)
        return state.status if state is not None and predicate(state) else None

    return until(
        f"workflow {run_id} to reach the state the test needs",
        status,
        every=0.1,
        seen=lambda: dbos_client.workflow_state(run_id),
    )


def test_a_dbos_cancel_then_resume_of_a_parked_run_never_revives_it_and_says_so(dbos_executor):
    run = wait_parked(str(start("NW-1", OWNER).id))
    dbos("cancel", str(run.pk))
    assert reconcile()["cancelled"] == 1
    run.refresh_from_db()
    assert run.status == "cancelled"
    (ended,) = findings(workflow_id=str(run.pk))
    assert ended.kind == "workflow_ended" and ended.dbos_status == "CANCELLED"
    assert "while the run was awaiting_approval, outside Deskhand" in ended.detail

    dbos("resume", str(run.pk))
    wait_workflow(str(run.pk), lambda s: s.status == "PENDING")  # back at its gate, waiting
    assert reconcile()["workflows_stopped"] == 1
    assert dbos_client.workflow_state(str(run.pk)).status == "CANCELLED"
    run.refresh_from_db()
    assert run.status == "cancelled"  # a closed run is never revived
    assert "Later: DBOS had this run's workflow running again after the run was closed" in (
        run.summary
    )
    assert "so Deskhand cancelled the workflow again" in run.summary
    revived = WorkflowFinding.objects.get(workflow_id=str(run.pk), kind="workflow_revived")
    assert revived.is_open and "`manage.py replay" in revived.detail
    assert not Refund.objects.filter(run=run).exists()

    report = json.loads(manage("health", "--json").stdout)
    assert report["workflows"]["by_kind"] == {"workflow_ended": 1, "workflow_revived": 1}
    web = Client()
    web.force_login(user(OWNER))
    queue = web.get("/attention/").content.decode()
    assert "Resumed in DBOS, stopped" in queue and "Workflow ended in DBOS" in queue
    assert "this run&#x27;s workflow running again" in web.get(f"/runs/{run.pk}/").content.decode()
    assert reconcile()["workflows_stopped"] == 0 and reconcile()["revived_ended"] == 0


def test_a_resumed_workflow_that_ended_before_a_pass_is_reported_and_the_run_stays_closed(
    dbos_executor,
):
    """Cancelled mid-turn; resumed, its workflow runs to its end in a moment (every step
    refuses for a closed run): DBOS says SUCCESS, the run says cancelled — and now says why."""
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:
        entered.set()
        assert release.wait(60)

    faults.install("before_step", "model", hold)
    try:
        run = start("NW-1", OWNER)
        assert entered.wait(60), "the first model step never started"
        run = services.run_cancel(run=Run.objects.get(pk=run.pk), user=user(OWNER))
        assert run.status == "cancelled"
    finally:
        faults.clear()
        release.set()
    wait_workflow(str(run.pk), lambda s: not s.active)

    dbos("resume", str(run.pk))
    assert wait_workflow(str(run.pk), lambda s: s.status == "SUCCESS") == "SUCCESS"
    counts = reconcile()
    assert counts["revived_ended"] == 1 and counts["workflows_stopped"] == 0
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    assert "ended SUCCESS having done nothing more" in run.summary
    assert Step.objects.filter(run=run, kind="model").count() == 0  # the model was not called
    (revived,) = findings(workflow_id=str(run.pk))
    assert revived.kind == "workflow_revived" and revived.dbos_status == "SUCCESS"
    assert reconcile()["revived_ended"] == 0  # reported once


def test_dbos_internal_queue_name_is_the_one_deskhand_reads():
    from dbos._utils import INTERNAL_QUEUE_NAME

    assert dbos_client.DBOS_INTERNAL_QUEUE == INTERNAL_QUEUE_NAME


def test_an_open_run_whose_workflow_dbos_says_ended_takes_that_end(dbos_executor):
    run = wait_parked(str(start("NW-1", OWNER).id))
    dbos("cancel", str(run.pk))
    with connection.cursor() as cur:  # DBOS now says it ended, though the run never closed
        cur.execute(
            "UPDATE dbos.workflow_status SET status = 'SUCCESS' WHERE workflow_uuid = %s",
            [str(run.pk)],
        )
    assert reconcile()["workflows_ended"] == 1
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("failed", "error")
    assert "its workflow ended in DBOS (SUCCESS) without closing the run" in run.summary
    assert "No money moved" in run.summary
    assert Approval.objects.get(run=run).status == "expired"
    (ended,) = findings(workflow_id=str(run.pk))
    assert ended.kind == "workflow_ended" and "the run took its end: failed" in ended.detail
    assert reconcile()["workflows_ended"] == 0


@pytest.fixture
def api(settings) -> Iterator[MessagesApi]:
    """The anthropic provider against the strict Messages-API double (``end_turn`` to every
    call), so each model call is a rate-limited child workflow (``deskhand.limited_call``)."""
    from agent.providers.anthropic import clear_clients

    with MessagesApi() as double:
        settings.ANTHROPIC_API_KEY = DEFAULT_KEY
        settings.ANTHROPIC_BASE_URL = double.url
        settings.ANTHROPIC_MODEL = "claude-sonnet-4-6"
        yield double
    clear_clients()


def test_a_dbos_fork_of_a_runs_model_call_is_refused_and_calls_nothing(dbos_executor, api):
    run = wait_terminal(str(start("NW-1", OWNER).id))  # the double answers end_turn: one call
    assert run.status == "succeeded" and len(api.requests) == 1
    with connection.cursor() as cur:
        cur.execute(
            "SELECT child_workflow_id FROM dbos.operation_outputs WHERE workflow_uuid = %s"
            " AND function_name = 'deskhand.limited_call'",
            [str(run.pk)],
        )
        (child,) = (r[0] for r in cur.fetchall())
    fork_id = json.loads(dbos("fork", child, "--step", "1").stdout)["workflow_id"]
    refused = wait_for_finding(fork_id)
    assert refused.kind == "fork_refused" and refused.forked_from_id == run.pk
    assert f"is a model call of run {run.pk}" in refused.detail
    assert wait_workflow(fork_id, lambda s: not s.active) == "CANCELLED"
    assert len(api.requests) == 1  # the model was not called again
    assert Step.objects.get(run=run, kind="model").attempts == 1  # nor its cost added
