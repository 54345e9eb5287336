"""Waiting for DBOS to record the end of a run's workflow, shared by the fixtures and the evals."""

from __future__ import annotations

import time

from deskhand.infra.dbos import client as dbos_client


def until_settled(run_id: str, timeout: float = 10.0) -> None:
    """Until DBOS has recorded the end of a run that says it ended, for at most ``timeout``.

    The run's terminal status commits inside its last step, one transaction before DBOS
    writes that step's output; a test reading the checkpoints in between sees one fewer,
    and a loaded machine widens the gap. A workflow that stays active past a terminal run
    (a test's own doing) is left for the test to judge, so running out of time is silent.
    """
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state = dbos_client.workflow_states([run_id]).get(run_id)
        if state is None or not state.active:
            return
        time.sleep(0.02)
