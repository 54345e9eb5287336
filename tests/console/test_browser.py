"""The console in real headless Chromium: sign in, start NW-1, watch it live, approve, see the refund.

Debian's ``chromium`` driven by Playwright (never ``playwright install``), a
real uvicorn and a real worker on the test database. Screenshots of the run
page and the inbox land in a temporary folder, or in docs/screenshots/ for the README
when ``make screenshots`` asks (``DESKHAND_SCREENSHOTS``): ``make test`` leaves tracked files alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.models import Run
from agent.record.steplog import log_step
from agent.steps import ApprovalPayload
from approvals.models import Approval
from tests.console.a11y import (
    AXE_PAGES,
    assert_no_serious_violations,
    assert_order_facts_fit,
    axe_violations,
    tab_to,
)
from tests.console.conftest import (
    NW_OWNER,
    NW_VIEWER,
    PASSWORD,
    make_approval,
    make_run,
    model_step,
    tool_step,
)
from tests.support.waiting import PATIENCE_MS

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(
    os.environ.get("DESKHAND_SCREENSHOTS") or Path(tempfile.gettempdir()) / "deskhand-screenshots"
)
SCREENSHOTS.mkdir(parents=True, exist_ok=True)
# The width checks' screenshots are evidence for a failure, never the README's: always a temporary folder.
WIDTH_SHOTS = Path(tempfile.gettempdir()) / "deskhand-screenshots" / "widths"
WIDTH_SHOTS.mkdir(parents=True, exist_ok=True)
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


WIDTHS = (1024, 1440, 2560)


def watch_errors(page) -> list[str]:
    """Every console error and uncaught exception the page reports, from now on."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def assert_story_reads_in_sentences(page) -> list[str]:
    """Each step is a sentence; no raw JSON shows until a step's disclosure is opened."""
    stories = [s.strip() for s in page.locator("#timeline .story").all_inner_texts()]
    assert stories and all(s[:1].isalnum() and s.endswith(".") for s in stories), stories
    visible = page.inner_text("#timeline")
    for raw in ('{"', '"}', "_cents", "tool_use", "ledger key"):
        assert raw not in visible, (raw, visible)
    tool = page.locator("#timeline li.k-tool details.raw").first
    tool.locator("summary").press("Enter")  # a disclosure opens from the keyboard
    assert '"reference": "NW-' in tool.inner_text()
    return stories


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
    errors = watch_errors(page)

    page.goto(f"{web_server.url}/tickets/NW-1/")
    page.click("text=Run the agent")
    page.wait_for_url(re.compile(r"/runs/[0-9a-f-]{36}/$"))
    run_id = page.url.rstrip("/").rsplit("/", 1)[1]
    page.evaluate("window.__noReload = true")

    # Steps arrive and the gate appears, with no reload.
    page.wait_for_selector("#timeline li.step", timeout=PATIENCE_MS)
    page.wait_for_selector(".gate button[value=approve]", timeout=PATIENCE_MS)
    assert page.evaluate("window.__noReload === true")
    assert page.locator("#timeline li.step").count() >= 2
    # The status is its own swap (the panel's), which may land after the gate's: waited for.
    page.wait_for_selector("#run-status.s-awaiting_approval", timeout=PATIENCE_MS)
    assert "Awaiting Approval" in page.inner_text("#run-status")

    page.goto(f"{web_server.url}/approvals/")
    page.wait_for_selector("article.gate")
    assert "NW-1042" in page.inner_text("#inbox")
    page.screenshot(path=str(SCREENSHOTS / "inbox.png"), full_page=True)

    # Approved with the keyboard alone: Tab to the reason, type it, Tab to Approve, Enter.
    page.goto(f"{web_server.url}/runs/{run_id}/")
    tab_to(page, ".gate input[name=reason]")
    page.keyboard.type("Within the 14-day quality policy.")
    page.keyboard.press("Tab")
    assert page.evaluate("() => document.activeElement.value") == "approve"
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url == f"{web_server.url}/runs/{run_id}/"
    page.evaluate("window.__noReload = true")
    page.wait_for_selector(
        "#run-status.s-succeeded", timeout=PATIENCE_MS
    )  # swapped in by the stream
    assert page.evaluate("window.__noReload === true")
    refunded = page.inner_text("#run-refunded")
    assert refunded.startswith("$") and refunded != "$0.00", refunded
    assert page.locator("#timeline li.step.k-final").count() == 1
    page.set_viewport_size({"width": 1360, "height": 1500})
    page.screenshot(path=str(SCREENSHOTS / "run.png"))

    # The approved run, read by a person: sentences, the decided card's facts at three widths.
    page.reload()
    stories = assert_story_reads_in_sentences(page)
    assert any(s.startswith("Looked up order NW-1042 — $") for s in stories), stories
    assert any(f"{NW_OWNER} approved at " in s for s in stories), stories
    # The refund's card (the reply to the customer that followed has a decided card too).
    refund_card = f"#decided-{Approval.objects.get(run_id=run_id, tool='issue_refund').pk}"
    for width in WIDTHS:
        facts = assert_order_facts_fit(page, refund_card, width)
        assert {"Total", "Refunded so far", "Left to refund"} <= set(facts), facts
        page.screenshot(path=str(WIDTH_SHOTS / f"run-approved-{width}.png"), full_page=True)
    assert_no_serious_violations(page, "an approved run")

    run = Run.objects.get(pk=run_id)
    assert run.status == "succeeded" and run.refunds.exists()
    assert errors == [], errors
    context.close()


def test_the_runs_list_shows_a_new_run_without_reloading(browser, web_server):
    context, page = sign_in(browser, web_server, NW_OWNER)
    page.goto(f"{web_server.url}/runs/")
    page.evaluate("window.__noReload = true")
    page.wait_for_timeout(500)  # let the stream connect
    run = make_run("NW-2")
    model_step(run, 1, text="reading the ticket")
    page.wait_for_selector(f"#run-{run.pk}", timeout=PATIENCE_MS)
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


def parked_run_with_a_story() -> Approval:
    """NW-3 parked at the gate, with the steps that led there (rows, no worker)."""
    run = make_run("NW-3", status="awaiting_approval")
    model_step(run, 1, text="Checking the order.", tool="get_order", args={"reference": "NW-0918"})
    order = {"reference": "NW-0918", "currency": "USD", "total_cents": 15600, "refunded_cents": 0}
    tool_step(run, 2, "get_order", {"reference": "NW-0918"}, text=json.dumps(order))
    args = {"order_reference": "NW-0918", "amount_cents": 1900, "reason": "stale beans"}
    model_step(run, 3, tool="issue_refund", args=args)
    approval = make_approval(run, order="NW-0918")
    log_step(
        run_id=str(run.pk),
        seq=4,
        kind="approval",
        tool="issue_refund",
        arguments=args,
        result=ApprovalPayload(event="requested", approval_id=str(approval.pk), status="pending"),
    )
    return approval


def test_console_pages_have_no_serious_accessibility_violations(browser, web_server):
    approval = parked_run_with_a_story()
    context, page = sign_in(browser, web_server, NW_OWNER)
    errors = watch_errors(page)
    for name, path in AXE_PAGES.items():
        page.goto(f"{web_server.url}{path.format(run=approval.run_id)}")
        assert_no_serious_violations(page, name)
    assert errors == [], errors
    context.close()


def test_the_accessibility_check_catches_an_unlabelled_field(browser, web_server):
    """The axe harness is not hollow: a field with no label fails it."""
    context, page = sign_in(browser, web_server, NW_OWNER)
    page.goto(f"{web_server.url}/runs/")
    assert axe_violations(page) == []  # none at all on the page as served, of any impact
    page.evaluate("() => document.querySelector('main').append(document.createElement('input'))")
    with pytest.raises(AssertionError, match='"id": "label"'):
        assert_no_serious_violations(page, "runs with an unlabelled field")
    context.close()


def test_the_gate_cards_order_facts_fit_from_1024_to_2560_px(browser, web_server):
    approval = parked_run_with_a_story()
    context, page = sign_in(browser, web_server, NW_OWNER)
    errors = watch_errors(page)
    page.goto(f"{web_server.url}/runs/{approval.run_id}/")
    for width in WIDTHS:
        facts = assert_order_facts_fit(page, f"#gate-{approval.pk}", width)
        assert facts[:6] == [
            "Total",
            "$156.00",
            "Refunded so far",
            "$0.00",
            "Left to refund",
            "$156.00",
        ]
        page.screenshot(path=str(WIDTH_SHOTS / f"run-gate-{width}.png"), full_page=True)
    stories = assert_story_reads_in_sentences(page)
    assert "Looked up order NW-0918 — $156.00, nothing refunded yet." in stories
    assert errors == [], errors
    context.close()


def test_a_person_denies_with_the_keyboard_alone(browser, web_server):
    approval = parked_run_with_a_story()
    context, page = sign_in(browser, web_server, NW_OWNER)
    page.goto(f"{web_server.url}/runs/{approval.run_id}/")
    page.keyboard.press("Tab")  # the first stop skips the navigation
    assert page.evaluate("() => document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Enter")
    assert page.evaluate("() => document.activeElement.id") == "content"
    tab_to(page, f"#reason-{approval.pk}")
    page.keyboard.type("Roast date is within policy.")
    tab_to(page, f"#gate-{approval.pk} button[value=deny]")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert page.url == f"{web_server.url}/runs/{approval.run_id}/"
    approval.refresh_from_db()
    assert (approval.status, approval.reason) == ("denied", "Roast date is within policy.")
    assert page.locator(f"#decided-{approval.pk} .a-denied").count() == 1
    context.close()
