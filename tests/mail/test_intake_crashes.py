"""SIGKILL a worker as it routes lines that came in through the help-desk webhook: every
line still opens exactly one run, the one named after it, and that run starts.

The webhook stores the line and answers; the line's routing workflow
(``deskhand.customer_line``) runs on a worker, which dies after routing committed and
before DBOS checkpointed it, or after the run was opened and before it was handed to DBOS.
Mail's schedules (receiver and worker) run in ``tests/bounds/test_crash_sweep.py`` and in
``manage.py crash_sweep --case intake`` (``tests/devtools/crash_intake.py``).
"""

from __future__ import annotations

import pytest

from tests.devtools import crash_intake
from tests.fixtures.dbos import empty_dbos_schema, stop_in_process_executor

pytestmark = [pytest.mark.crash, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def no_executor(tseeded):
    """Workers are subprocesses here: no DBOS executor in the test process."""
    stop_in_process_executor()
    empty_dbos_schema()
    yield
    empty_dbos_schema()


@pytest.mark.parametrize("schedule", crash_intake.CI_HELPDESK)
def test_a_worker_killed_routing_help_desk_lines_opens_one_run_per_line(
    no_executor, schedule: str
) -> None:
    crash_intake.prepare_world()
    lines, fired = crash_intake.play_helpdesk(crash_intake.Schedule.parse(schedule))
    assert fired, f"the worker was never killed at {schedule} (see .deskhand/crash-sweep/)"
    assert crash_intake.check_helpdesk(lines) == []
