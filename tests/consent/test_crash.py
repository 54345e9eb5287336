"""A worker dies while a person decides; the decision is not lost and the effect happens once."""

from __future__ import annotations

import time

import pytest
from django.utils import timezone

from agent.models import Step
from agent.models.ledger import LedgerEntry
from deskhand.domain.desk.models import Refund
from tests.consent.conftest import restart
from tests.durability.helpers import (
    assert_accounting_matches,
    assert_every_effect_was_approved,
    decide,
    start,
)
from tests.fixtures.dbos import wait_parked, wait_terminal

pytestmark = [pytest.mark.crash, pytest.mark.django_db(transaction=True)]


def test_a_decision_that_arrives_while_no_worker_runs_executes_exactly_once(worker_process):
    worker = worker_process("consent-pending").start()
    run = start("NW-1", "owner@northwind.test")
    wait_parked(str(run.id))
    worker.kill()

    approval = decide(run, "owner@northwind.test")  # recorded and sent while nobody executes
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.delivered_at is not None
    time.sleep(1)
    run.refresh_from_db()
    assert (
        run.status == "awaiting_approval" and Refund.objects.count() == 0
    )  # nothing acted meanwhile

    killed_for = timezone.now()
    restart(worker)
    run = wait_terminal(str(run.id))

    assert run.status == "succeeded", run.summary
    assert Refund.objects.get().amount_cents == 3800
    assert LedgerEntry.objects.get(tool="issue_refund").approval_id == approval.pk
    effect = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert (effect.attempts, effect.replayed) == (1, False)  # executed once, not re-executed
    resumed = Step.objects.get(
        run=run, kind="approval", tool="issue_refund", result__event="approved"
    )
    assert resumed.result["decided_by"] == "owner@northwind.test"
    assert run.waited_seconds >= 1  # the wait, including the outage, is handed back to the deadline
    assert run.finished_at > killed_for
    assert "Refunded 38.00 USD against NW-1042." in run.summary
    assert_accounting_matches(run)
    assert_every_effect_was_approved()
