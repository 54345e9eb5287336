"""Every console page in real Chromium, live updates included: no Content-Security-Policy
violation and no console error (issue 14 found an inline style the page's CSP refused)."""

from __future__ import annotations

import pytest

from tests.console.conftest import AUDITOR, NW_OWNER, PASSWORD, make_approval, make_run, model_step
from tests.console.test_browser import browser  # noqa: F401  (the fixture)
from tests.support.waiting import PATIENCE_MS

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

# Recorded by the page itself, before any of its scripts run: what the browser refused.
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""


def watched_page(browser, server, email: str):  # noqa: F811
    context = browser.new_context(viewport={"width": 1360, "height": 1000})
    context.add_init_script(RECORD_VIOLATIONS)
    page = context.new_page()
    errors: list[str] = []
    page.on(
        "console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None
    )
    page.on("pageerror", lambda exc: errors.append(f"{page.url}: {exc}"))
    page.goto(f"{server.url}/accounts/login/")
    page.fill("input[name=username]", email)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state("networkidle")
    errors.clear()  # where a role lands after signing in is another test's business
    return context, page, errors


def visit(page, url: str) -> list[str]:
    page.goto(url)
    page.wait_for_timeout(700)  # the live stream connects and swaps its first fragment in
    return list(page.evaluate("window.__csp"))


def test_no_page_of_the_console_breaks_its_csp_or_logs_an_error(browser, web_server):  # noqa: F811
    run = make_run("NW-1")
    model_step(run, 1, text="reading the ticket")
    make_approval(run)
    context, page, errors = watched_page(browser, web_server, NW_OWNER)
    violations: dict[str, list[str]] = {}
    for path in (
        "/",
        "/tickets/",
        "/tickets/NW-1/",
        "/runs/",
        f"/runs/{run.pk}/",
        "/approvals/",
        "/policy/",
        "/usage/",
        "/merchant/",
        "/attention/",
        "/search/?q=NW-1",
    ):
        violations[path] = visit(page, f"{web_server.url}{path}")
    # A step that arrives while the run page is open is swapped in by the stream.
    page.goto(f"{web_server.url}/runs/{run.pk}/")
    page.wait_for_timeout(500)
    model_step(run, 2, text="a live step")
    page.get_by_text("a live step").first.wait_for(timeout=PATIENCE_MS)
    violations["live run"] = list(page.evaluate("window.__csp"))
    # The polling fallback swaps the same fragments out of band: no violation there either.
    page.goto(f"{web_server.url}/runs/{run.pk}/?live=poll")
    model_step(run, 3, text="a polled step")
    page.get_by_text("a polled step").first.wait_for(timeout=PATIENCE_MS)
    violations["polled run"] = list(page.evaluate("window.__csp"))
    context.close()

    admin, admin_page, admin_errors = watched_page(browser, web_server, AUDITOR)
    violations["/admin/"] = visit(admin_page, f"{web_server.url}/admin/")
    admin.close()

    assert {k: v for k, v in violations.items() if v} == {}
    assert errors + admin_errors == [], "\n".join(errors + admin_errors)
