"""The trajectory evals under pytest: one test per scenario, on the test database's DBOS."""

from __future__ import annotations

import pytest

from tests.devtools.evals.runner import run_scenario
from tests.devtools.evals.scenarios import SCENARIOS, Scenario
from tests.fixtures.dbos import ensure_in_process_executor, stop_in_process_executor

pytestmark = pytest.mark.django_db(transaction=True)


class FixtureExecutor:
    """The ``dbos_executor`` fixture's executor, stopped and relaunched under its own id."""

    def start(self) -> None:
        ensure_in_process_executor()

    def stop(self) -> None:
        stop_in_process_executor()

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.mark.parametrize("scenario", SCENARIOS, ids=str)
def test_scenario(dbos_executor, scenario: Scenario) -> None:
    executor = FixtureExecutor()
    # The fixture empties DBOS's tables and launches before the queue row exists again, so
    # DBOS's queue manager would find the queue a second later. Relaunching now (0.1 s)
    # lets it find the queue at once: a second saved per scenario.
    executor.restart()
    result = run_scenario(scenario, executor, reset=False)
    assert result.ok, f"{scenario.name} — {scenario.claim}\n{result.message}"
