"""Durability: a SIGKILLed worker resumes at the step that failed and pays nobody twice."""

from __future__ import annotations

import pytest

from agent.models import Step
from agent.models.ledger import LedgerEntry
from deskhand.domain.desk.models import Refund
from tests.durability.helpers import (
    assert_accounting_matches,
    assert_every_effect_was_approved,
    decide,
    start,
)
from tests.fixtures.dbos import wait_parked, wait_terminal

pytestmark = [pytest.mark.crash, pytest.mark.django_db(transaction=True)]


def test_a_refund_committed_before_its_checkpoint_is_paid_once(worker_process):
    worker = worker_process("crash-refund").start(faults="after_step:tool.issue_refund")
    run = start("NW-1", "owner@northwind.test")
    wait_parked(str(run.id))
    decide(run, "owner@northwind.test")
    assert worker.wait_exit(60) == -9  # SIGKILLed between the refund's commit and its checkpoint
    assert Refund.objects.count() == 1  # the effect committed before the crash

    worker.start(faults="")  # same executor id: it recovers its own workflows
    run = wait_terminal(str(run.id))

    assert run.status == "succeeded", run.summary
    assert Refund.objects.count() == 1
    assert Refund.objects.get().amount_cents == 3800
    assert LedgerEntry.objects.filter(tool="issue_refund").count() == 1
    refund_step = Step.objects.get(run=run, tool="issue_refund", kind="tool")
    assert refund_step.replayed is True
    assert refund_step.attempts == 2
    assert_accounting_matches(run)
    assert_every_effect_was_approved()


def test_a_decision_sent_while_no_worker_runs_is_not_lost(worker_process):
    worker = worker_process("crash-parked").start()
    run = start("NW-1", "owner@northwind.test")
    wait_parked(str(run.id))
    worker.kill()
    decide(run, "owner@northwind.test")  # delivered while no worker is alive
    worker.start()
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary
    assert Refund.objects.count() == 1
    assert LedgerEntry.objects.filter(tool="issue_refund").count() == 1
    assert_accounting_matches(run)
