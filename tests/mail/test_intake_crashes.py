"""SIGKILL the processes that take webhooks in and route what they stored: every message or
line taken is stored once, every line still opens exactly one run, the one named after it,
and that run starts.

- The web process (``manage.py web`` under ``tests/devtools/crashweb.py``) dies taking a
  burst of Mailgun's posts, with a message committed and not yet handed to its workflow;
  Mailgun posts again what got no 200, to the web process started again on the same port.
- The web process dies taking a help desk's new tickets, with a line committed and its
  routing workflow not yet enqueued; the desk's re-post is a duplicate (200, the same
  ticket) and enqueues nothing, so only the worker's sweep routes that line.
- A worker dies routing help-desk lines (``deskhand.customer_line``): after routing
  committed and before DBOS checkpointed it, or after the run was opened and before it was
  handed to DBOS.

Mail's SMTP schedules run in ``tests/bounds/test_crash_sweep.py``; every schedule runs in
``manage.py crash_sweep --case intake`` (``tests/devtools/crash_intake.py``).
"""

from __future__ import annotations

import pytest

from tests.devtools import crash_intake
from tests.fixtures.dbos import empty_dbos_schema, stop_in_process_executor

pytestmark = [pytest.mark.crash, pytest.mark.django_db(transaction=True)]

MAILGUN_CI, HELPDESK_WEB_CI = crash_intake.CI_WEB


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
