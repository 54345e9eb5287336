"""The suite's waits hold on a loaded machine: they poll from the start and say what they wanted.

Issue 40: ``wait_for_run`` read the run once before polling, so a run its worker had not yet
written failed the test with ``Run.DoesNotExist`` instead of being waited for.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.db import connection

from agent.models import Run
from tests.console.conftest import make_run
from tests.fixtures.dbos import wait_for_run
from tests.support.waiting import until


def test_a_run_not_yet_written_is_waited_for_not_an_error(tseeded):
    run_id = str(uuid.uuid4())
    written = threading.Event()

    def write_later() -> None:
        time.sleep(0.5)  # the worker is slow to open the run
        try:
            make_run("NW-1", status="succeeded", pk=run_id)
        finally:
            connection.close()
            written.set()

    threading.Thread(target=write_later, daemon=True).start()
    run = wait_for_run(run_id, lambda r: r.status == "succeeded", timeout=30)
    assert written.is_set() and run.pk == uuid.UUID(run_id)


def test_a_wait_that_gives_up_says_what_it_waited_for_and_what_it_saw(tseeded):
    run = make_run("NW-1", status="running")
    with pytest.raises(AssertionError) as gave_up:
        wait_for_run(str(run.pk), lambda r: r.status == "succeeded", timeout=0.3, what="the end")
    message = str(gave_up.value)
    assert f"run {run.pk} to reach the end" in message and "last seen: running" in message
    assert Run.objects.get(pk=run.pk).status == "running"


def test_until_asks_before_it_sleeps_and_returns_the_answer():
    asked: list[float] = []

    def check() -> str | None:
        asked.append(time.monotonic())
        return "there" if len(asked) == 3 else None

    started = time.monotonic()
    assert until("the third answer", check, every=0.01, timeout=10) == "there"
    assert asked[0] - started < 0.01 and len(asked) == 3
