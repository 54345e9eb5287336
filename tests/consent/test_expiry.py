"""Expiry: per-merchant TTL, a wait that a restart never extends, and no fresh approval afterwards."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone

from agent.consent.gate import gate_request, gate_resume
from agent.steps import Verdict
from approvals.models import Approval, AuditEvent
from approvals.services import DecisionRefused, approval_decide
from deskhand.domain.desk.models import Merchant, Refund
from tests.consent.conftest import bare_run, gate_call, restart
from tests.durability.helpers import pending_approval, start, user
from tests.fixtures.dbos import wait_parked, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)

# The worker stays down DOWN seconds, so the approval's on-schedule expiry comes at least
# DOWN seconds (plus the restart's own start-up) before a fresh TTL counted from the restart
# would: that gap is what the test can tell apart, and it must also absorb the restarted
# worker's recovery of the run on a loaded machine. With TTL 20 and 3 s down it was 7 to 10 s,
# and a recovery slowed by two other suites on the same two cores once took longer.
TTL = 30
DOWN = 10


@pytest.mark.slow
@pytest.mark.crash
def test_an_approval_expires_on_its_original_schedule_across_a_worker_restart(worker_process):
    Merchant.objects.filter(slug="northwind").update(approval_ttl_seconds=TTL)
    worker = worker_process("consent-expiry").start()
    run = start("NW-1", "owner@northwind.test")
    wait_parked(str(run.id))
    approval = pending_approval(run)
    assert approval.expires_at - approval.requested_at == dt.timedelta(seconds=TTL)

    worker.kill()
    time.sleep(
        DOWN
    )  # down for a while: a restart that re-armed a full TTL would now be easy to see
    restart(worker)
    restarted = timezone.now()
    run = wait_terminal(str(run.id))

    assert (run.status, run.stop_reason) == ("failed", "approval_expired"), run.summary
    approval.refresh_from_db()
    assert approval.status == "expired"
    # On the original schedule: at expires_at (or at once, had the restart taken longer than
    # that), never a fresh TTL counted from the restart.
    assert approval.expires_at <= run.finished_at < restarted + dt.timedelta(seconds=TTL)
    assert Approval.objects.filter(run=run).count() == 1
    assert Refund.objects.count() == 0
    assert "Expired without a decision: Refund 38.00 USD against order NW-1042" in run.summary
    assert (
        AuditEvent.objects.filter(run=run, action="approval.expired", channel="system").count() == 1
    )
    with pytest.raises(DecisionRefused, match="already expired"):
        approval_decide(approval=approval, user=user("owner@northwind.test"), approve=True)


@pytest.mark.slow
@pytest.mark.crash
def test_a_worker_killed_just_before_it_waits_still_expires_the_approval_on_schedule(
    worker_process,
):
    """The kill lands after the clock read the wait is measured from, before the wait's own
    checkpoint: the restarted worker enters the wait for the first time, and must end it at
    ``expires_at``, not a whole TTL after the restart."""
    Merchant.objects.filter(slug="northwind").update(approval_ttl_seconds=TTL)
    worker = worker_process("consent-expiry-wait").start(faults="before_wait:approval")
    run = start("NW-1", "owner@northwind.test")
    assert worker.proc is not None
    worker.proc.wait(timeout=60)  # it died at the wait, with the approval requested
    approval = pending_approval(run)
    time.sleep(DOWN)
    restart(worker, faults="")
    run = wait_terminal(str(run.id))

    assert (run.status, run.stop_reason) == ("failed", "approval_expired"), run.summary
    approval.refresh_from_db()
    # DOWN seconds of slack for the recovery on a loaded machine; a wait re-armed with the
    # recorded duration would end about DOWN + the restart's start-up after expires_at.
    assert approval.expires_at <= run.finished_at < approval.expires_at + dt.timedelta(seconds=DOWN)


def test_the_ttl_is_the_merchants_and_a_recovery_after_expiry_never_opens_a_fresh_approval(tseeded):
    Merchant.objects.filter(slug="northwind").update(approval_ttl_seconds=90)
    run = bare_run()
    asked = gate_request(str(run.id), 1, gate_call(3800))
    approval = Approval.objects.get(pk=asked.approval_id)
    assert approval.expires_at - approval.requested_at == dt.timedelta(seconds=90)
    assert asked.expires_at == approval.expires_at.isoformat()  # the wait's timeout comes from this

    Approval.objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - dt.timedelta(seconds=1)
    )
    assert gate_resume(str(run.id), 2, gate_call(3800), asked.approval_id, 90.0) == Verdict(
        "expired"
    )
    # The step re-executed after a crash, or the run recovered: the same, expired approval.
    again = gate_request(str(run.id), 3, gate_call(3800))
    assert again.approval_id == asked.approval_id and again.status == "expired"
    assert Approval.objects.filter(run=run).count() == 1
    assert gate_resume(str(run.id), 4, gate_call(3800), asked.approval_id, 0.0) == Verdict(
        "expired"
    )
