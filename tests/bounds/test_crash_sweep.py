"""The crash sweep, CI-sized: real workers SIGKILLed at the boundaries that matter most.

``nw1-payments`` is NW-1 with Northwind's refunds at the payments double: each of its
schedules must end with one refund at the double and one (settled) in the database.

The full sweep — every boundary of NW-1, NW-3's denial and LU-2 — is
``python manage.py crash_sweep``; docs/evals.md has its last numbers.
"""

from __future__ import annotations

import pytest

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
