"""Replay in real headless Chromium: an owner reads what the model saw, then forks from that step.

A real uvicorn and a real worker on the test database, as ``test_browser.py``: the NW-1
run is started and approved, then the owner walks run page → replay → a step → fork from
here → confirm, lands on the fork's page, and both pages link to each other.
"""

from __future__ import annotations

import re

import pytest

from agent.models import Run, Step
from deskhand.domain.desk.models import Refund
from tests.console.conftest import NW_OWNER
from tests.console.test_browser import browser, sign_in  # noqa: F401  (the browser fixture)
from tests.durability.helpers import decide, start
from tests.fixtures.dbos import wait_parked, wait_terminal

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]


def test_an_owner_forks_a_finished_run_from_the_model_step_that_asked_for_the_refund(
    browser,  # noqa: F811
    web_server,
    worker_process,
) -> None:
    worker_process("replay-worker").start()
    origin = wait_parked(str(start("NW-1", NW_OWNER).id))
    decide(origin, NW_OWNER)
    origin = wait_terminal(str(origin.id))
    assert origin.status == "succeeded"
    asked = Step.objects.get(run=origin, kind="model", result__content__0__name="issue_refund").seq

    context, page = sign_in(browser, web_server, NW_OWNER)
    page.goto(f"{web_server.url}/runs/{origin.id}/")
    page.click("text=Replay: what the model saw at each step")
    page.wait_for_url(f"{web_server.url}/runs/{origin.id}/replay/1/")
    page.click(f".replay-steps a[href$='/replay/{asked}/']")
    page.wait_for_url(f"{web_server.url}/runs/{origin.id}/replay/{asked}/")
    assert f"What the model was sent at step {asked}" in page.inner_text("h1")

    page.click("text=Fork from here")
    page.wait_for_url(f"{web_server.url}/runs/{origin.id}/replay/{asked}/fork")
    assert "issue_refund performed" in page.inner_text(".irreversible-steps")
    page.click(f"button:has-text('Fork from step {asked}')")
    page.wait_for_url(re.compile(r"/runs/[0-9a-f-]{36}/$"))
    fork_id = page.url.rstrip("/").rsplit("/", 1)[1]
    assert fork_id != str(origin.id)

    fork = wait_terminal(fork_id)
    assert (fork.status, fork.forked_from_id, fork.fork_step) == ("succeeded", origin.id, asked)
    assert Refund.objects.count() == 1  # the same refund: answered from the ledger
    page.click(f"#run-facts a[href='/runs/{origin.id}/']")  # fork → origin
    page.wait_for_url(f"{web_server.url}/runs/{origin.id}/")
    page.click(f".replay-links a[href='/runs/{fork_id}/']")  # origin → fork
    page.wait_for_url(f"{web_server.url}/runs/{fork_id}/")
    assert Run.objects.count() == 2
    context.close()
