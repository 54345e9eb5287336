"""The console in real headless Chromium: sign in, start NW-1, watch it live, approve, see the refund.

Debian's ``chromium`` driven by Playwright (never ``playwright install``), a
real uvicorn and a real worker on the test database. Screenshots of the run
page and the inbox land in docs/screenshots/ for the README.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.models import Run
from approvals.models import Approval
from tests.console.conftest import (
    NW_OWNER,
    NW_VIEWER,
    PASSWORD,
    make_approval,
    make_run,
    model_step,
)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@pytest.fixture
def browser(monkeypatch) -> Iterator[object]:
    if not CHROMIUM.exists():
        pytest.fail("Debian chromium is missing: run `make browsers` (scripts/ensure_chromium.py)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop on this thread; the test's own ORM calls are
    # still synchronous, so Django's guard must stand aside here (never in the servers).
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@contextlib.contextmanager
def without_env(name: str) -> Iterator[None]:
    saved = os.environ.pop(name, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[name] = saved


def sign_in(browser, server, email: str):
    context = browser.new_context(viewport={"width": 1360, "height": 1000})
    page = context.new_page()
    page.goto(f"{server.url}/accounts/login/")
    page.fill("input[name=username]", email)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/")
    return context, page


def test_an_owner_runs_nw1_live_approves_and_sees_the_refund(browser, web_server, worker_process):
    with without_env("DJANGO_ALLOW_ASYNC_UNSAFE"):
        worker_process("browser-worker").start()
    context, page = sign_in(browser, web_server, NW_OWNER)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

    page.goto(f"{web_server.url}/tickets/NW-1/")
    page.click("text=Run the agent")
    page.wait_for_url(re.compile(r"/runs/[0-9a-f-]{36}/$"))
    run_id = page.url.rstrip("/").rsplit("/", 1)[1]
    page.evaluate("window.__noReload = true")

    # Steps arrive and the gate appears, with no reload.
    page.wait_for_selector("#timeline li.step", timeout=30_000)
    page.wait_for_selector(".gate button[value=approve]", timeout=60_000)
    assert page.evaluate("window.__noReload === true")
    assert page.locator("#timeline li.step").count() >= 2
    assert "Awaiting Approval" in page.inner_text("#run-status")

    page.goto(f"{web_server.url}/approvals/")
    page.wait_for_selector("article.gate")
    assert "NW-1042" in page.inner_text("#inbox")
    page.screenshot(path=str(SCREENSHOTS / "inbox.png"), full_page=True)

    page.goto(f"{web_server.url}/runs/{run_id}/")
    page.fill(".gate input[name=reason]", "Within the 14-day quality policy.")
    page.click(".gate button[value=approve]")
    page.wait_for_url(f"{web_server.url}/runs/{run_id}/")
    page.evaluate("window.__noReload = true")
    page.wait_for_selector("#run-status.s-succeeded", timeout=60_000)  # swapped in by the stream
    assert page.evaluate("window.__noReload === true")
    refunded = page.inner_text("#run-refunded")
    assert refunded.startswith("$") and refunded != "$0.00", refunded
    assert page.locator("#timeline li.step.k-final").count() == 1
    page.set_viewport_size({"width": 1360, "height": 1500})
    page.screenshot(path=str(SCREENSHOTS / "run.png"))

    run = Run.objects.get(pk=run_id)
    assert run.status == "succeeded" and run.refunds.exists()
    assert not [e for e in errors if "Content Security Policy" in e or "Refused" in e], errors
    context.close()


def test_the_runs_list_shows_a_new_run_without_reloading(browser, web_server):
    context, page = sign_in(browser, web_server, NW_OWNER)
    page.goto(f"{web_server.url}/runs/")
    page.evaluate("window.__noReload = true")
    page.wait_for_timeout(500)  # let the stream connect
    run = make_run("NW-2")
    model_step(run, 1, text="reading the ticket")
    page.wait_for_selector(f"#run-{run.pk}", timeout=5_000)
    assert page.evaluate("window.__noReload === true")
    context.close()


def test_a_viewer_sees_no_approve_button_and_a_direct_post_is_refused(browser, web_server):
    approval = make_approval(make_run("NW-3", status="awaiting_approval"), order="NW-0918")
    context, page = sign_in(browser, web_server, NW_VIEWER)
    for url in ("/approvals/", f"/runs/{approval.run_id}/"):
        page.goto(f"{web_server.url}{url}")
        assert "NW-0918" in page.content()
        assert page.locator("button[value=approve]").count() == 0, url
    token = next(c["value"] for c in context.cookies() if c["name"] == "csrftoken")
    response = context.request.post(
        f"{web_server.url}/approvals/{approval.pk}/decide",
        form={"decision": "approve", "reason": ""},
        headers={"X-CSRFToken": token, "Referer": f"{web_server.url}/approvals/"},
    )
    assert response.status == 403
    assert "viewer" in response.text()
    approval.refresh_from_db()
    assert approval.status == "pending"
    assert Approval.objects.filter(status="pending").count() == 1
    context.close()


def test_a_northwind_user_opening_a_lumen_run_gets_404(browser, web_server):
    lumen = make_run("LU-1", "lumen", status="succeeded")
    context, page = sign_in(browser, web_server, NW_OWNER)
    response = page.goto(f"{web_server.url}/runs/{lumen.pk}/")
    assert response is not None and response.status == 404
    assert "LU-1" not in page.content()
    context.close()
