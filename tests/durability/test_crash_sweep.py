"""A crash sweep over NW-1: the worker is SIGKILLed at every step boundary in turn.

Each worker incarnation is told to die at the *second* step it executes. After
a restart, the step that was in flight re-executes first (it had no
checkpoint) and survives; the next step is then killed between its own work
and its checkpoint. So one run walks through every boundary — each step of
the run is killed once after doing its work and re-executed once — and must
still end terminal, with money moved at most once and the step log's totals
equal to the run's.
"""

from __future__ import annotations

import time

import pytest

from agent.ledger.models import LedgerEntry
from agent.models import TERMINAL_STATUSES, Run, Step
from approvals.models import Approval
from deskhand.desk.models import Refund
from tests.durability.helpers import (
    assert_accounting_matches,
    assert_every_effect_was_approved,
    decide,
    start,
)

pytestmark = [pytest.mark.crash, pytest.mark.django_db(transaction=True)]


def sweep(
    worker_process, ticket: str, email: str, point: str, max_incarnations: int = 80
) -> tuple[Run, int]:
    worker = worker_process(f"sweep-{ticket.lower()}-{point}")
    worker.start(faults=f"{point}:*:2")
    run = start(ticket, email)
    kills = 0
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if (
            run.status in TERMINAL_STATUSES
            and Step.objects.filter(run=run, kind__in=["final", "bound"]).exists()
        ):
            break
        if (
            run.status == "awaiting_approval"
            and Approval.objects.filter(run=run, status="pending").exists()
        ):
            decide(run, email)
        if worker.proc is not None and worker.proc.poll() is not None:
            assert worker.proc.returncode == -9, f"worker exited {worker.proc.returncode}"
            kills += 1
            assert kills <= max_incarnations, "the sweep did not converge"
            worker.start(faults=f"{point}:*:2")
        time.sleep(0.05)
    worker.stop()
    run.refresh_from_db()
    return run, kills


@pytest.mark.slow
@pytest.mark.parametrize("point", ["after_step", "before_step"])
def test_a_crash_sweep_over_nw1_moves_money_at_most_once(worker_process, point):
    run, kills = sweep(worker_process, "NW-1", "owner@northwind.test", point)

    assert run.status == "succeeded", run.summary
    steps = list(Step.objects.filter(run=run).order_by("seq"))
    # Every step boundary saw a kill: at least one per step-log row, bar the last.
    assert kills >= len(steps) - 1
    if point == "after_step":
        # Killed after its work, before its checkpoint: every step but the last ran twice.
        assert [s.attempts for s in steps[:-1]] == [2] * (len(steps) - 1)
        # The refund committed, the worker died, the re-run found its ledger claim.
        assert Step.objects.get(run=run, kind="tool", tool="issue_refund").replayed is True
    assert Refund.objects.count() == 1 and Refund.objects.get().amount_cents == 3800
    assert LedgerEntry.objects.filter(tool="issue_refund").count() == 1
    assert_accounting_matches(run)
    assert_every_effect_was_approved()
