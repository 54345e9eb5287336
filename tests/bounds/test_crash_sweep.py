"""The crash sweep, CI-sized: real workers SIGKILLed at the boundaries that matter most.

``nw1-payments`` is NW-1 with Northwind's refunds at the payments double: each of its
schedules must end with one refund at the double and one (settled) in the database.

The full sweep — every boundary of NW-1, NW-3's denial, LU-2, a customer's mail
conversation and a burst of inbound mail — is ``python manage.py crash_sweep``;
docs/evals.md has its last numbers.
"""

from __future__ import annotations

import pytest

from tests.devtools import crash_customer, crash_intake
from tests.devtools.crash import CASES, CI_SCHEDULES, Boundary, check, play, prepare_world
from tests.fixtures.dbos import empty_dbos_schema, stop_in_process_executor

pytestmark = [pytest.mark.crash, pytest.mark.django_db(transaction=True)]

SCHEDULES = [(case, point) for case, points in CI_SCHEDULES.items() for point in points]


@pytest.fixture
def no_executor(tseeded):
    """Workers are subprocesses here: no DBOS executor in the test process."""
    stop_in_process_executor()
    empty_dbos_schema()
    yield
    empty_dbos_schema()


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


# The customer's conversation by mail (the sweep's ``customer`` case): killed as the run
# parks on the customer, and as it takes the stored answer in.
CUSTOMER_CI = ("after_step:customer.park", "after_step:customer.resume")


@pytest.mark.parametrize("point", CUSTOMER_CI)
def test_a_worker_killed_in_a_customer_conversation_asks_once_and_answers_once(
    no_executor, point: str
) -> None:
    crash_customer.prepare_world()
    run, ticket, fired = crash_customer.play(Boundary.parse(point))
    assert fired, f"the worker was never killed at {point} (see .deskhand/crash-sweep/)"
    assert crash_customer.check(run, ticket) == []


# Mail arriving in a burst (the sweep's ``intake`` case): the receiver killed with a message
# committed and not handed on; the worker killed with a line routed and not checkpointed, and
# with its run opened and committed and not yet handed to DBOS.
@pytest.mark.parametrize("schedule", crash_intake.CI_MAIL)
def test_a_burst_of_mail_through_a_kill_is_threaded_once_and_opens_one_run_per_message(
    no_executor, schedule: str
) -> None:
    crash_intake.prepare_world()
    plan = crash_intake.Schedule.parse(schedule)
    letters, fired = crash_intake.play(plan)
    assert fired, f"nothing was killed at {schedule} (see .deskhand/crash-sweep/)"
    assert crash_intake.check(letters, plan) == []
