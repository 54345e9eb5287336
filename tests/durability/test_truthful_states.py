"""Every run ends in a state that tells the truth — including runs that never started."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from agent.models import Run
from agent.ops.reconciler import reconcile
from agent.run import services
from approvals.models import Approval
from deskhand.domain.desk.models import Ticket
from tests.durability.helpers import pending_approval, start, user
from tests.fixtures.dbos import wait_for_run, wait_parked

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_run_whose_enqueue_fails_ends_failed_at_once(tseeded, monkeypatch):
    class Broken:
        def enqueue(self, *a, **k):
            raise ConnectionError("system database unreachable")

    monkeypatch.setattr("deskhand.infra.dbos.client.client", lambda: Broken())
    run = services.run_start(
        ticket=Ticket.objects.get(reference="NW-2"), user=user("owner@northwind.test")
    )
    assert run.status == "failed"
    assert run.stop_reason == "enqueue_failed"
    assert "system database unreachable" in run.stop_detail
    assert run.step_log.filter(kind="error").exists()


def test_a_run_created_but_never_enqueued_is_failed_by_the_reconciler(dbos_executor):
    run = services.run_create(
        ticket=Ticket.objects.get(reference="NW-2"), user=user("owner@northwind.test")
    )
    # The web process "died" here. Inside the grace period the reconciler leaves it alone.
    reconcile()
    assert Run.objects.get(pk=run.pk).status == "queued"
    reconcile(now=timezone.now() + dt.timedelta(minutes=5))
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("failed", "enqueue_lost")
    # And the ticket is free for a new run.
    assert start("NW-2", "owner@northwind.test").status in ("queued", "running", "succeeded")


def test_a_workflow_cancelled_behind_our_back_is_recorded_as_cancelled(dbos_executor):
    from deskhand.infra.dbos.client import client

    run = wait_parked(str(start("NW-1", "owner@northwind.test").id))
    client().cancel_workflow(str(run.id))
    reconcile()
    run.refresh_from_db()
    assert run.status == "cancelled"
    withdrawn = Approval.objects.get(run=run)
    assert (withdrawn.status, withdrawn.decided_by) == ("withdrawn", None)  # the system's act
    assert "No money moved" in run.summary
    assert "Withdrawn when the run was cancelled: Refund" in run.summary


def test_a_recorded_decision_whose_send_was_lost_is_resent_once(dbos_executor, monkeypatch):
    from approvals import services

    run = wait_parked(str(start("NW-1", "owner@northwind.test").id))
    approval = pending_approval(run)
    real_send = services.approval_send
    monkeypatch.setattr(
        services, "approval_send", lambda a: (_ for _ in ()).throw(ConnectionError("lost"))
    )
    services.approval_decide(approval=approval, user=user("owner@northwind.test"), approve=True)
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.delivered_at is None
    monkeypatch.setattr(services, "approval_send", real_send)
    # The reconciler leaves a decision alone for 2 s while its own send may be in flight,
    # by the clock it is given.
    assert reconcile()["resent"] == 0
    later = timezone.now() + dt.timedelta(seconds=3)
    assert reconcile(now=later)["resent"] == 1
    run = wait_for_run(str(run.id), lambda r: r.status == "succeeded")
    assert run.refunds.count() == 1
    assert reconcile(now=later)["resent"] == 0


def test_cancel_withdraws_approvals_and_reports_what_completed(dbos_executor):
    run = wait_parked(str(start("NW-1", "owner@northwind.test").id))
    run = services.run_cancel(run=run, user=user("agent@northwind.test"))
    assert run.status == "cancelled" and run.stop_reason == "cancelled"
    approval = Approval.objects.get(run=run)
    assert approval.status == "withdrawn" and approval.decided_by.email == "agent@northwind.test"
    assert "agent@northwind.test" in run.summary and "No money moved" in run.summary
    assert "Withdrawn when the run was cancelled:" in run.summary
    assert "Expired without a decision" not in run.summary
    with pytest.raises(services.RunRefused, match="already cancelled"):
        services.run_cancel(run=run, user=user("owner@northwind.test"))
