"""A support lead on a 390 px phone (issue 29's acceptance), in real Chromium with a real worker.

NW-1 and LU-2 end to end: the menu opens from its button, the run is started and watched
live (the Approvals counter in the menu rises and falls with no reload), the refund is
approved with changes typed in dollars with the preview read back, and the decided card
leads with what was approved. Then the run is found by its short id, its customer's email
and its order reference, from the search box and as a URL. Nothing scrolls sideways, no
Content-Security-Policy violation and no console error, anywhere on the way.
"""

from __future__ import annotations

import contextlib
import re

import pytest

from agent.models import Run
from deskhand.domain.desk.models import Refund
from tests.console.conftest import LU_OWNER, NW_OWNER, PASSWORD
from tests.console.test_browser import browser, without_env  # noqa: F401  (the fixture)
from tests.console.test_browser_screens import RECORD
from tests.support.waiting import PATIENCE_MS

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

PHONE = 390


class Phone:
    """One signed-in person's page at 390 px, with what went wrong recorded."""

    def __init__(self, browser, server, email: str) -> None:  # noqa: F811
        self.server = server
        self.context = browser.new_context(viewport={"width": PHONE, "height": 844})
        self.context.add_init_script(RECORD)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.csp: list[str] = []
        self.page.on(
            "console",
            lambda m: (
                self.errors.append(f"{self.page.url}: {m.text}") if m.type == "error" else None
            ),
        )
        self.page.on("pageerror", lambda exc: self.errors.append(f"{self.page.url}: {exc}"))
        self.page.goto(f"{server.url}/accounts/login/")
        self.page.fill("input[name=username]", email)
        self.page.fill("input[name=password]", PASSWORD)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(f"{server.url}/")

    def goto(self, path: str) -> None:
        self.collect()
        self.page.goto(f"{self.server.url}{path}")

    def collect(self) -> None:
        """Keep this page's CSP violations before it is left."""
        # A page already navigating has no list to give; its violations were read before.
        with contextlib.suppress(Exception):
            self.csp += self.page.evaluate("window.__csp || []")

    def fits(self, where: str) -> None:
        scroll = self.page.evaluate("() => document.documentElement.scrollWidth")
        assert scroll <= PHONE, f"{where} scrolls sideways at {PHONE} px ({scroll} px wide)"

    def open_menu(self) -> None:
        toggle = self.page.locator(".menu-toggle")
        if toggle.get_attribute("aria-expanded") != "true":
            toggle.click()
        self.page.locator("#console-nav").wait_for(state="visible")

    def search(self, q: str) -> None:
        self.open_menu()
        self.page.fill("#site-search", q)
        self.collect()
        with self.page.expect_navigation():
            self.page.press("#site-search", "Enter")

    def counter(self, name: str) -> str:
        return self.page.inner_text(f"#count-{name}")

    def close(self) -> None:
        self.collect()
        self.context.close()
        assert self.csp == [], "\n".join(self.csp)
        assert self.errors == [], "\n".join(self.errors)


def run_to_the_gate(phone: Phone, ticket: str) -> str:
    phone.goto(f"/tickets/{ticket}/")
    phone.fits(f"ticket {ticket}")
    phone.collect()
    phone.page.click("text=Run the agent")
    phone.page.wait_for_url(re.compile(r"/runs/[0-9a-f-]{36}/$"))
    phone.page.evaluate("window.__noReload = true")
    phone.page.wait_for_selector(".gate details.changes", timeout=PATIENCE_MS)
    assert phone.page.evaluate("window.__noReload === true")  # the gate came by the stream
    # The menu's counter rose with it, live.
    phone.page.wait_for_function(
        "() => document.querySelector('#count-approvals').textContent.trim() === '1'",
        timeout=PATIENCE_MS,
    )
    phone.fits(f"the run on {ticket} at its gate")
    return phone.page.url.rstrip("/").rsplit("/", 1)[1]


def approve_with_changes(phone: Phone, typed: str, preview: str) -> None:
    gate = phone.page.locator(".gate").first
    gate.locator("details.changes summary").click()
    field = gate.locator("input[name^=amount-]")
    assert "150 and 150.00 both mean" in gate.inner_text()  # the form says how it reads money
    field.fill(typed)
    assert gate.locator(".money-preview").inner_text() == preview
    phone.fits("the approve-with-changes form")
    phone.collect()
    with phone.page.expect_navigation():
        gate.locator("button:has-text('Approve the changed call')").click()


def approve_the_rest(phone: Phone, run_id: str) -> Run:
    """Approve, plainly, anything else the run asks for (the customer's email) until it ends."""
    for _ in range(4):
        phone.page.wait_for_selector(
            "#run-status.s-succeeded, #run-status.s-failed, .gate button[value=approve]",
            timeout=PATIENCE_MS,
        )
        if phone.page.locator(".gate button[value=approve]").count() == 0:
            break
        phone.collect()
        with phone.page.expect_navigation():
            phone.page.locator(".gate button[value=approve]").first.click()
    phone.page.wait_for_selector("#run-status.s-succeeded", timeout=PATIENCE_MS)
    phone.page.wait_for_function(
        "() => document.querySelector('#count-approvals').textContent.trim() === '0'",
        timeout=PATIENCE_MS,
    )
    return Run.objects.get(pk=run_id)


def test_a_support_lead_does_nw1_and_lu2_on_a_phone(browser, web_server, worker_process):  # noqa: F811
    with without_env("DJANGO_ALLOW_ASYNC_UNSAFE"):
        worker_process("phone-worker").start()

    # NW-1: the agent proposes the goods ($38.00); the lead approves $20.00, typed "20.00".
    nw = Phone(browser, web_server, NW_OWNER)
    assert not nw.page.locator("#console-nav").is_visible()  # folded on a phone
    nw.open_menu()
    nw.fits("the open menu")
    run_id = run_to_the_gate(nw, "NW-1")
    approve_with_changes(nw, "20.00", "Refund $20.00 of $38.00 proposed.")
    run = approve_the_rest(nw, run_id)
    assert run.status == "succeeded"
    assert [r.amount_cents for r in Refund.objects.filter(run=run)] == [2000]
    nw.page.reload()
    card = nw.page.locator(".gate.decided").first
    assert card.locator("> h3").inner_text().endswith("Refund $20.00 on order NW-1042")
    assert "The agent proposed: Refund $38.00 on order NW-1042" in card.inner_text()
    nw.fits("the finished NW-1 run")

    # Found again: by its short id, its customer's email, its order reference; box and URL.
    short = run_id[:8]
    email = run.ticket.customer.email
    for q in (short, email, "NW-1042"):
        nw.search(q)
        assert nw.page.locator(f"#search-runs #run-{run_id}").count() == 1, q
        nw.fits(f"the search for {q}")
    nw.goto(f"/search/?q={email}")
    assert nw.page.locator(f"#run-{run_id}").count() == 1
    nw.goto(f"/runs/{short}/")
    assert nw.page.url == f"{web_server.url}/runs/{run_id}/"
    nw.close()

    # LU-2: a duplicate charge of $179.00; the lead refunds $150.00, typed "150".
    lu = Phone(browser, web_server, LU_OWNER)
    run_id = run_to_the_gate(lu, "LU-2")
    approve_with_changes(lu, "150", "Refund $150.00 of $179.00 proposed.")
    run = approve_the_rest(lu, run_id)
    assert [r.amount_cents for r in Refund.objects.filter(run=run)] == [15000]
    lu.page.reload()
    assert (
        lu.page.locator(".gate.decided > h3")
        .first.inner_text()
        .endswith("Refund $150.00 on order LU-2311")
    )
    lu.fits("the finished LU-2 run")
    lu.close()
