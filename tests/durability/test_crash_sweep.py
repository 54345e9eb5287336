"""The crash sweep, as CI runs it: real processes SIGKILLed at the boundaries that matter most.

One module for every crash-sweep test. The full sweep — every boundary of NW-1, NW-3's
denial, LU-2, NW-1 paying at the payments double, a customer's mail conversation and a
burst of inbound mail — is ``python manage.py crash_sweep`` (docs/evals.md has its last
numbers); the schedules here are the ones CI runs, through the same drivers and checks
(``tests/devtools/crash.py``, ``crash_customer.py``, ``crash_intake.py``). The crash points
they name are ``deskhand.infra.crashpoints.Point``.

- **A run's boundaries** (``crash.CI_SCHEDULES``): money committed but not checkpointed, an
  effect torn mid-transaction, a model call paid but not checkpointed, a wait across a dead
  worker; ``nw1-payments`` (refunds at the payments double) must end with one refund there
  and one, settled, here; ``nw1-shopify`` (NW-1's order at the Shopify double, refunded
  through ``refundCreate``) must end with one $38.00 refund at the double, one settled here,
  and reconciliation at Shopify finding no difference.
- **Every step of NW-1 in one run**: each worker incarnation dies at the second step it
  executes; after a restart the step that was in flight re-executes first (it had no
  checkpoint) and survives, and the next is killed. One run walks through every boundary
  (LESSONS 1) and must still end once, with money moved at most once and the step log's
  totals equal to the run's.
- **A customer's conversation by mail**: the worker killed as it asks, parks or enters the
  wait, and as it reads or takes in the answer.
- **Mail and help-desk lines arriving** (``crash_intake``): the SMTP receiver killed with a
  message committed and not handed on; the web process killed taking Mailgun's posts or a
  help desk's tickets; the worker killed routing lines (routed and not checkpointed; a run
  opened and committed and not yet handed to DBOS).
"""

from __future__ import annotations

import time

import pytest

from agent.models import TERMINAL_STATUSES, Run, Step
from agent.models.ledger import LedgerEntry
from approvals.models import Approval
from deskhand.domain.desk.models import Refund
from tests.devtools import crash_customer, crash_intake
from tests.devtools.crash import CASES, CI_SCHEDULES, Boundary, check, play, prepare_world
from tests.durability.helpers import (
    assert_accounting_matches,
    assert_every_effect_was_approved,
    decide,
    start,
)
from tests.fixtures.dbos import empty_dbos_schema, stop_in_process_executor

pytestmark = [pytest.mark.crash, pytest.mark.django_db(transaction=True)]

SCHEDULES = [(case, point) for case, points in CI_SCHEDULES.items() for point in points]
MAILGUN_CI, HELPDESK_WEB_CI = crash_intake.CI_WEB


@pytest.fixture
def no_executor(tseeded):
    """Workers are subprocesses here: no DBOS executor in the test process."""
    stop_in_process_executor()
    empty_dbos_schema()
    yield
    empty_dbos_schema()


# --- a run's boundaries ----------------------------------------------------------------------


@pytest.mark.parametrize(("case", "point"), SCHEDULES, ids=[f"{c}-{p}" for c, p in SCHEDULES])
def test_a_worker_killed_at_a_boundary_finishes_the_run_once(
    no_executor, case: str, point: str
) -> None:
    prepare_world(CASES[case])
    run, fired, executor_id = play(CASES[case], Boundary.parse(point))
    assert fired, (
        f"the worker was never killed at {point} (see .deskhand/crash-sweep/{executor_id}.log)"
    )
    assert check(CASES[case], run) == []


def walk(
    worker_process, ticket: str, email: str, point: str, max_incarnations: int = 80
) -> tuple[Run, int]:
    """One run of ``ticket`` with every worker incarnation killed at its second ``point``."""
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
    run, kills = walk(worker_process, "NW-1", "owner@northwind.test", point)

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


# --- a customer's conversation by mail ---------------------------------------------------------


@pytest.mark.parametrize("boundary", crash_customer.BOUNDARIES, ids=str)
def test_a_kill_at_each_boundary_asks_once_wakes_once_and_answers_once(
    no_executor, boundary: Boundary
) -> None:
    crash_customer.prepare_world()
    run, ticket, fired = crash_customer.play(boundary)
    assert fired, f"the worker was never killed at {boundary} (see .deskhand/crash-sweep/)"
    assert crash_customer.check(run, ticket) == []


# --- mail and help-desk lines arriving ---------------------------------------------------------


@pytest.mark.parametrize("schedule", crash_intake.CI_MAIL)
def test_a_burst_of_mail_through_a_kill_is_threaded_once_and_opens_one_run_per_message(
    no_executor, schedule: str
) -> None:
    crash_intake.prepare_world()
    plan = crash_intake.Schedule.parse(schedule)
    letters, fired = crash_intake.play(plan)
    assert fired, f"nothing was killed at {schedule} (see .deskhand/crash-sweep/)"
    assert crash_intake.check(letters, plan) == []


@pytest.mark.parametrize("schedule", crash_intake.CI_HELPDESK)
def test_a_worker_killed_routing_help_desk_lines_opens_one_run_per_line(
    no_executor, schedule: str
) -> None:
    crash_intake.prepare_world()
    plan = crash_intake.Schedule.parse(schedule)
    deliveries, fired = crash_intake.play_helpdesk(plan)
    assert fired, f"the worker was never killed at {schedule} (see .deskhand/crash-sweep/)"
    assert crash_intake.check_helpdesk(deliveries, plan) == []


def test_a_web_process_killed_taking_mailgun_posts_loses_none_and_opens_one_run_each(
    no_executor,
) -> None:
    crash_intake.prepare_world()
    plan = crash_intake.Schedule.parse(MAILGUN_CI)
    posts, fired = crash_intake.play_mailgun(plan)
    assert fired, f"the web process was never killed at {MAILGUN_CI} (see .deskhand/crash-sweep/)"
    assert crash_intake.check(posts, plan) == []


def test_a_help_desk_line_stored_as_the_web_process_dies_is_routed_once_by_the_sweep(
    no_executor,
) -> None:
    crash_intake.prepare_world()
    plan = crash_intake.Schedule.parse(HELPDESK_WEB_CI)
    deliveries, fired = crash_intake.play_helpdesk(plan)
    assert fired, (
        f"the web process was never killed at {HELPDESK_WEB_CI} (see .deskhand/crash-sweep/)"
    )
    assert crash_intake.check_helpdesk(deliveries, plan) == []
