"""A cancel that tells the truth: it and an approved effect serialise on the run row.

The refund step is held inside its own step (a fault hook), a person cancels
the run from another thread, and then the step is let go. Whichever takes the
run's row lock first wins, and the run says what happened: no refund and
``cancelled``, or one refund and a summary that reports it. Never "no money
moved" beside a refund, and the step log keeps both the cancel's line and the
effect's line.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection

from agent.models import Run, Step
from agent.models.ledger import LedgerEntry
from agent.ops.reconciler import reconcile
from agent.record import faults
from agent.run import selectors, services
from approvals.models import Approval, AuditEvent
from deskhand.domain.desk.models import Refund, Ticket
from deskhand.infra.dbos import client as dbos_client
from tests.durability.helpers import decide, pending_approval, start, user
from tests.fixtures.dbos import wait_parked, workflow_settled
from tests.support.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)

OWNER, AGENT = "owner@northwind.test", "agent@northwind.test"


@pytest.fixture
def hooks() -> Iterator[Callable[[str, str], tuple[threading.Event, threading.Event]]]:
    """``hold(point, target)``: the workflow stops there until the test lets go."""
    released: list[threading.Event] = []

    def hold(point: str, target: str) -> tuple[threading.Event, threading.Event]:
        entered, release = threading.Event(), threading.Event()

        def action() -> None:
            entered.set()
            assert release.wait(60), f"{point}:{target} was never let go"

        faults.install(point, target, action)
        released.append(release)
        return entered, release

    yield hold
    for release in released:
        release.set()
    faults.clear()


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``fn`` in another thread with its own database connection."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["value"] = fn()
        except Exception as exc:  # reported to the test, which asserts on it
            out["error"] = exc
        finally:
            connection.close()

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, out


def cancel_from_another_thread(run_id: str, email: str = OWNER) -> tuple[threading.Thread, dict]:
    return in_thread(lambda: services.run_cancel(run=Run.objects.get(pk=run_id), user=user(email)))


def wait_until_blocked_on_a_lock() -> None:
    """Until some backend on this database waits for a row lock (the cancel, on the run row)."""

    def blocked() -> bool:
        with connection.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            return cur.fetchone()[0] >= 1

    until("a backend waiting on the run's row lock", blocked, every=0.02)


def cancel_rows(run: Run) -> list[Step]:
    return [
        s for s in Step.objects.filter(run=run, kind="bound") if s.result.get("event") == "cancel"
    ]


def test_cancel_after_the_refund_took_the_run_lock_reports_the_refund(dbos_executor, hooks):
    run = wait_parked(str(start("NW-1", OWNER).id))
    inside, let_go = hooks("before_tool", "issue_refund")  # inside the effect's transaction
    committed, let_on = hooks("after_commit", "issue_refund")  # committed, not yet checkpointed
    decide(run, OWNER)
    assert inside.wait(30), "the refund step never started"

    thread, out = cancel_from_another_thread(str(run.pk))
    wait_until_blocked_on_a_lock()  # the cancel waits for the effect's run lock
    assert Run.objects.get(pk=run.pk).status == "running"
    let_go.set()
    assert committed.wait(30)
    thread.join(30)
    assert not thread.is_alive() and "error" not in out, out
    let_on.set()
    assert workflow_settled(str(run.pk)) in ("CANCELLED", "SUCCESS")

    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    assert Refund.objects.filter(run=run).count() == 1
    assert "Refunded 38.00 USD against NW-1042." in run.summary
    assert "No money moved" not in run.summary
    assert "Approved but not performed" not in run.summary  # it was performed
    assert selectors.run_outcome(run)["refunds_cents"] == 3800
    # Both lines stay, in the order they happened, neither overwritten.
    effect = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert effect.ok and effect.result["ledger_key"] and effect.attempts == 1
    (cancel,) = cancel_rows(run)
    assert cancel.seq > effect.seq and cancel.result["by"] == OWNER
    assert cancel.result["was"] == "running"
    assert Step.objects.filter(run=run).order_by("-seq").first() == cancel


def test_cancel_before_the_refund_takes_the_run_lock_moves_no_money(dbos_executor, hooks):
    run = wait_parked(str(start("NW-1", OWNER).id))
    about_to, let_go = hooks("before_step", "tool.issue_refund")  # before its transaction
    decide(run, OWNER)
    assert about_to.wait(30), "the refund step never started"

    thread, out = cancel_from_another_thread(str(run.pk))
    thread.join(30)
    assert not thread.is_alive() and "error" not in out, out
    assert out["value"].status == "cancelled"
    body_done = threading.Event()
    faults.install("after_step", "tool.issue_refund", body_done.set)
    let_go.set()  # the step now takes the run lock, finds the run cancelled, does nothing
    assert body_done.wait(30), "the refund step's body never returned"
    assert workflow_settled(str(run.pk)) == "CANCELLED"

    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    assert not Refund.objects.filter(run=run).exists()
    assert not LedgerEntry.objects.filter(run=run).exists()
    assert "No money moved" in run.summary
    assert "Approved but not performed: Refund 38.00 USD against order NW-1042" in run.summary
    assert not Step.objects.filter(run=run, kind="tool", tool="issue_refund").exists()
    (cancel,) = cancel_rows(run)
    assert Step.objects.filter(run=run).order_by("-seq").first() == cancel


def test_an_effect_on_a_run_being_cancelled_performs_nothing_and_says_why(dbos_executor):
    """The step body itself, driven directly: on a cancelling run it refuses before the ledger."""
    from agent.ledger.effect import execute_irreversible
    from agent.steps import Done

    run = wait_parked(str(start("NW-1", OWNER).id))
    approval = pending_approval(run)
    call = {"name": approval.tool, "id": approval.tool_call_id, "input": approval.arguments}
    Run.objects.filter(pk=run.pk).update(status="cancelling")
    out = execute_irreversible(str(run.pk), 99, call, str(approval.pk))
    assert out == Done(
        stop="cancelled",
        status="cancelling",
        detail="the run is cancelling; issue_refund was not performed",
    )
    assert not LedgerEntry.objects.exists() and not Step.objects.filter(run=run, seq=99).exists()


def test_two_concurrent_cancels_one_succeeds_one_is_refused_one_audit_event(dbos_executor):
    run = wait_parked(str(start("NW-1", OWNER).id))
    barrier = threading.Barrier(2)

    def cancel(email: str) -> Run:
        barrier.wait(10)
        return services.run_cancel(run=Run.objects.get(pk=run.pk), user=user(email))

    (t1, a), (t2, b) = in_thread(lambda: cancel(OWNER)), in_thread(lambda: cancel(AGENT))
    t1.join(30)
    t2.join(30)
    outcomes = sorted([a, b], key=lambda o: "error" in o)
    assert "value" in outcomes[0] and outcomes[0]["value"].status == "cancelled"
    refused = outcomes[1].get("error")
    assert isinstance(refused, services.AlreadyCancelled) and "already cancelled" in str(refused)
    assert AuditEvent.objects.filter(run=run, action="run.cancel").count() == 1
    assert AuditEvent.objects.filter(run=run, action="approval.withdrawn").count() == 1
    (row,) = cancel_rows(run)
    # The cancel's own line closes the run: it is not a step that "finished after" the close.
    assert not row.payload.late


def test_a_cancel_dbos_cannot_confirm_leaves_the_run_cancelling_until_the_reconciler(
    dbos_executor, monkeypatch
):
    run = wait_parked(str(start("NW-1", OWNER).id))
    approval = pending_approval(run)
    client_type = type(dbos_client.client())
    real_cancel = client_type.cancel_workflow

    def unreachable(self: Any, workflow_id: str, **kwargs: Any) -> None:
        raise ConnectionError("system database unreachable")

    monkeypatch.setattr(client_type, "cancel_workflow", unreachable)
    run = services.run_cancel(run=run, user=user(OWNER))
    # Not shown cancelled while its workflow can still act; but nothing can act for it any more.
    assert run.status == "cancelling" and run.is_open and not run.is_active
    assert dbos_client.workflow_states([str(run.pk)])[str(run.pk)].active
    approval.refresh_from_db()
    assert approval.status == "withdrawn" and approval.decided_by.email == OWNER
    with pytest.raises(services.AlreadyCancelled, match="already cancelled"):
        services.run_cancel(run=run, user=user(AGENT))
    assert AuditEvent.objects.filter(run=run, action="run.cancel").count() == 1
    # The reconciler cannot reach DBOS either: still cancelling, nothing lost.
    assert reconcile()["cancelled"] == 0
    assert Run.objects.get(pk=run.pk).status == "cancelling"

    monkeypatch.setattr(client_type, "cancel_workflow", real_cancel)
    assert reconcile()["cancelled"] == 1
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("cancelled", "cancelled")
    assert run.summary.startswith(f"Cancelled by {OWNER}.")
    assert "Withdrawn when the run was cancelled: Refund 38.00 USD" in run.summary
    assert not dbos_client.workflow_states([str(run.pk)])[str(run.pk)].active
    assert len(cancel_rows(run)) == 1  # the reconciler finished it without a second line
    assert reconcile()["cancelled"] == 0


def test_a_cancelled_run_never_leaves_a_workflow_pending_after_the_reconciler(dbos_executor):
    a = wait_parked(str(start("NW-1", OWNER).id))
    b = services.run_create(ticket=Ticket.objects.get(reference="NW-2"), user=user(OWNER))
    services.run_cancel(run=a, user=user(OWNER))
    services.run_cancel(run=b, user=user(OWNER))  # its workflow never existed: cancelled at once
    assert Run.objects.get(pk=b.pk).status == "cancelled"
    reconcile()
    cancelled = [
        str(pk) for pk in Run.objects.filter(status="cancelled").values_list("pk", flat=True)
    ]
    assert set(cancelled) >= {str(a.pk), str(b.pk)}
    states = dbos_client.workflow_states(cancelled)
    assert not [s for s in states.values() if s.active], states


def test_a_cancelled_runs_withdrawn_approval_shows_on_the_run_page_cli_and_admin(
    dbos_executor, capsys
):
    """Cancelled on the web: withdrawn everywhere it is shown; a second cancel (web or CLI)
    and a late decision are refused and change nothing."""
    import json

    from django.core.management import call_command
    from django.core.management.base import CommandError
    from django.test import Client
    from django.urls import reverse

    from deskhand.web.console.selectors import pending_approvals, pending_count

    run = wait_parked(str(start("NW-1", OWNER).id))
    approval = pending_approval(run)
    assert pending_count(merchant_id=run.merchant_id) == 1
    web = Client()
    web.force_login(user(AGENT))
    assert web.post(f"/runs/{run.pk}/cancel").status_code == 302
    assert Run.objects.get(pk=run.pk).status == "cancelled"
    approval.refresh_from_db()
    assert (approval.status, approval.decided_by.email) == ("withdrawn", AGENT)
    assert approval.decided_at is not None and approval.reason == ""

    body = web.get(f"/runs/{run.pk}/").content.decode()
    assert 'class="status a-withdrawn">withdrawn</span>' in body
    assert f"by {AGENT}" in body and "Withdrawn when the run was cancelled" in body
    assert "Waiting for approval" not in body and "Cancel run" not in body
    assert f"Cancelled by {AGENT}" in body  # the cancel's step-log line
    assert "finished after the run was closed" not in body  # it is the closing line, not late
    assert pending_count(merchant_id=run.merchant_id) == 0
    assert pending_approvals(merchant_id=run.merchant_id) == []
    assert str(approval.pk) not in web.get("/approvals/").content.decode()

    call_command("approvals", "--json")
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    (row,) = [r for r in rows if r["id"] == str(approval.pk)]
    assert (row["status"], row["decided_by"], row["channel"]) == ("withdrawn", AGENT, "web")
    assert row["decided_at"]
    call_command("approvals", "--pending", "--json")
    assert capsys.readouterr().out.strip() == ""

    auditor = Client()
    auditor.force_login(user("auditor@deskhand.test"))
    listing = auditor.get(reverse("admin:approvals_approval_changelist")).content.decode()
    assert "withdrawn" in listing.lower()
    detail = auditor.get(
        reverse("admin:approvals_approval_change", args=[approval.pk])
    ).content.decode()
    assert "withdrawn" in detail.lower() and AGENT in detail

    # Refusals, none of which changes anything.
    steps_before = list(Step.objects.filter(run=run).values_list("seq", "kind", "result"))
    late = web.post(f"/approvals/{approval.pk}/decide", {"decision": "approve", "reason": ""})
    assert late.status_code == 409
    assert "withdrawn when its run was cancelled" in late.content.decode()
    second = web.post(f"/runs/{run.pk}/cancel")
    assert second.status_code == 409 and "already cancelled" in second.content.decode()
    with pytest.raises(CommandError, match="already cancelled") as refused:
        call_command("cancel", str(run.pk), "--as", OWNER)
    assert refused.value.returncode == 1  # what manage.py exits with
    assert list(Step.objects.filter(run=run).values_list("seq", "kind", "result")) == steps_before
    assert AuditEvent.objects.filter(run=run, action="run.cancel").count() == 1
    assert Approval.objects.get(pk=approval.pk).status == "withdrawn"


def test_a_read_step_in_flight_when_the_run_is_cancelled_writes_nothing_over_the_cancel(
    dbos_executor, hooks
):
    from agent.providers import clear_overrides, install_override
    from agent.providers.scripted import ScriptedProvider, call, say

    install_override(
        "*", ScriptedProvider([[call("get_order", reference="NW-1042")], [say("done")]])
    )
    try:
        about_to, let_go = hooks("before_step", "tool.get_order")
        run = start("NW-1", OWNER)
        assert about_to.wait(30), "the read step never started"
        body_done = threading.Event()
        faults.install("after_step", "tool.get_order", body_done.set)
        run = services.run_cancel(run=run, user=user(OWNER))
        assert run.status == "cancelled"
        (cancel,) = cancel_rows(run)
        let_go.set()
        assert body_done.wait(30), "the read step's body never returned"
        assert workflow_settled(str(run.pk)) == "CANCELLED"
    finally:
        clear_overrides()
    # The read step found the run cancelled: it ran nothing and wrote nothing, so the
    # cancel's line (which took the number the read step was about to use) is intact.
    cancel.refresh_from_db()
    assert cancel.result["event"] == "cancel" and cancel.kind == "bound"
    assert not Step.objects.filter(run=run, kind="tool").exists()
    assert Step.objects.filter(run=run).order_by("-seq").first() == cancel


def test_the_reconciler_stops_a_workflow_left_active_behind_a_cancelled_run(dbos_executor):
    """What an older release could leave: a run marked cancelled after a failed cancel call."""
    run = wait_parked(str(start("NW-1", OWNER).id))
    Run.objects.filter(pk=run.pk).update(status="cancelled", stop_reason="cancelled")
    assert dbos_client.workflow_states([str(run.pk)])[str(run.pk)].active
    assert reconcile()["workflows_stopped"] == 1
    assert dbos_client.workflow_states([str(run.pk)])[str(run.pk)].status == "CANCELLED"
    assert reconcile()["workflows_stopped"] == 0
