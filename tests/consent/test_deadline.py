"""The working deadline neither resets nor eats human time.

Stamped once when the run is created; time spent waiting for a person is
handed back (once); a crash loop earns no fresh clock.
"""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.db import connection
from django.utils import timezone

from agent.consent.gate import gate_request, gate_resume
from agent.models import Run
from agent.providers.scripted import say
from approvals.models import Approval
from approvals.services import approval_decide
from deskhand.domain.desk.models import Refund
from tests.consent.conftest import bare_run, gate_call, refund, restart
from tests.durability.helpers import assert_accounting_matches, decide, start, user
from tests.fixtures.dbos import wait_parked, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_refund_approved_after_the_deadline_would_have_passed_still_executes_with_a_true_summary(
    dbos_executor, scripted
):
    scripted([[refund(3800)], [say("Refunded the two bags of coffee.")]])
    run = start("NW-1", "owner@northwind.test")
    wait_parked(str(run.id))
    # As if the run had a five-second working deadline, just started when it parked.
    Run.objects.filter(pk=run.pk).update(deadline_at=timezone.now() + dt.timedelta(seconds=5))
    time.sleep(5.5)  # the person takes longer than the whole working budget
    run.refresh_from_db()
    assert timezone.now() > run.deadline_at  # had waiting counted, the run would be out of time

    decide(run, "owner@northwind.test")
    run = wait_terminal(str(run.id))

    assert (run.status, run.stop_reason) == ("succeeded", "end_turn"), run.summary
    assert run.waited_seconds >= 5.5
    assert Refund.objects.get().amount_cents == 3800
    assert "Refunded 38.00 USD against NW-1042." in run.summary
    assert_accounting_matches(run)


def test_waiting_time_is_handed_back_once_even_when_the_resume_step_runs_again(tseeded):
    run = bare_run()
    asked = gate_request(str(run.id), 1, gate_call(3800))
    approval_decide(
        approval=Approval.objects.get(pk=asked.approval_id),
        user=user("owner@northwind.test"),
        approve=True,
    )
    # The step re-executed after a crash before its checkpoint (same seq), then resumed again.
    for seq in (2, 2, 3):
        verdict = gate_resume(str(run.id), seq, gate_call(3800), asked.approval_id, 600.0)
        assert verdict.verdict == "approved"
    run.refresh_from_db()
    assert run.waited_seconds == 600.0


@pytest.mark.crash
def test_a_crash_loop_does_not_extend_the_deadline(worker_process):
    worker = worker_process("consent-deadline").start(faults="after_step:model:1")
    run = start("NW-1", "owner@northwind.test")
    stamped = run.deadline_at
    assert (
        abs((stamped - run.created_at).total_seconds() - run.deadline_seconds) < 0.5
    )  # stamped at creation
    assert worker.wait_exit(30) == -9  # killed after its first model call
    restart(worker, faults="after_step:tool.get_order")
    assert worker.wait_exit(30) == -9  # and again, two steps further on
    run.refresh_from_db()
    assert run.deadline_at == stamped  # neither the start nor a recovery re-stamped it

    # The working budget runs out during the outage; a fresh clock would let the run go on.
    Run.objects.filter(pk=run.pk).update(deadline_at=timezone.now())
    spent = Run.objects.get(pk=run.pk).deadline_at
    restart(worker, faults="")
    run = wait_terminal(str(run.id))

    assert (run.status, run.stop_reason) == ("exhausted", "deadline"), run.summary
    assert run.deadline_at == spent
    assert run.waited_seconds == 0
    assert run.approvals.count() == 0  # stopped before it could even ask for the refund
    assert Refund.objects.count() == 0
    assert _recovery_attempts(run) >= 2
    assert_accounting_matches(run)


def _recovery_attempts(run: Run) -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT recovery_attempts FROM dbos.workflow_status WHERE workflow_uuid = %s",
            [str(run.id)],
        )
        return int(cur.fetchone()[0])
