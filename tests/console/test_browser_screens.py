"""Every console page on every screen a support lead uses (issue 29), in real Chromium.

At 390 (a phone), 768 (a tablet), 1280 and 1920 px each page is loaded, checked by
axe-core (no serious or critical violation: contrast included), checked for sideways
scrolling, and photographed into a temporary folder (never the tree). The same visits
record every Content-Security-Policy violation and console error. On a phone the menu
folds behind a button and opens with it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest

from agent.record.steplog import log_step
from agent.steps import ApprovalPayload
from approvals.models import Approval
from tests.console.a11y import assert_no_serious_violations
from tests.console.conftest import NW_OWNER, PASSWORD, make_approval, make_run, model_step
from tests.console.test_browser import browser, parked_run_with_a_story  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

SCREENS = (390, 768, 1280, 1920)
SHOTS = Path(tempfile.gettempdir()) / "deskhand-screenshots" / "screens"
SHOTS.mkdir(parents=True, exist_ok=True)

# Every page of the console a member reads ("{run}": a run parked at the gate with its story;
# "{done}": a finished run whose refund a person narrowed).
PAGES: dict[str, str] = {
    "home": "/",
    "attention": "/attention/",
    "tickets": "/tickets/",
    "ticket": "/tickets/NW-1/",
    "runs": "/runs/",
    "run": "/runs/{run}/",
    "run-decided": "/runs/{done}/",
    "sent": "/runs/{run}/steps/1/sent",
    "replay": "/runs/{run}/replay/1/",
    "approvals": "/approvals/",
    "policy": "/policy/",
    "usage": "/usage/",
    "merchant": "/merchant/",
    "api-keys": "/merchant/keys/",
    "search": "/search/?q=NW-1042",
}

RECORD = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
});
"""

OVERFLOW = """(width) => {
  const doc = document.documentElement;
  const wide = [...document.querySelectorAll("body *")]
    .filter(el => el.getBoundingClientRect().right > width + 1 && el.offsetParent !== null)
    .slice(0, 3).map(el => el.tagName + (el.id ? "#" + el.id : "") + "." + el.className);
  return {scroll: doc.scrollWidth, wide};
}"""


def narrowed_run() -> Approval:
    """NW-2 finished: the agent proposed $48.00, a person approved $20.00 of it."""
    run = make_run("NW-2", status="succeeded")
    model_step(run, 1, tool="issue_refund", args={"order_reference": "NW-1042"})
    approval = make_approval(run, amount_cents=4800, order="NW-1042")
    proposed = dict(approval.arguments)
    Approval.objects.filter(pk=approval.pk).update(
        status="approved",
        approved_arguments={**proposed, "amount_cents": 2000},
        approved_hash="b" * 64,
        decided_by_name=NW_OWNER,
        decided_at=approval.requested_at,
        channel="web",
    )
    log_step(
        run_id=str(run.pk),
        seq=2,
        kind="approval",
        tool="issue_refund",
        arguments=proposed,
        result=ApprovalPayload(event="requested", approval_id=str(approval.pk), status="pending"),
    )
    return approval


def signed_in(browser, server, width: int):  # noqa: F811
    context = browser.new_context(viewport={"width": width, "height": 900})
    context.add_init_script(RECORD)
    page = context.new_page()
    errors: list[str] = []
    page.on(
        "console", lambda m: errors.append(f"{page.url}: {m.text}") if m.type == "error" else None
    )
    page.on("pageerror", lambda exc: errors.append(f"{page.url}: {exc}"))
    page.goto(f"{server.url}/accounts/login/")
    page.fill("input[name=username]", NW_OWNER)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{server.url}/")
    return context, page, errors


def test_every_console_page_fits_every_screen_with_axe_and_no_csp_violation(browser, web_server):  # noqa: F811
    started = time.monotonic()
    gate = parked_run_with_a_story()
    done = narrowed_run()
    ids = {"run": gate.run_id, "done": done.run_id}
    problems: list[str] = []
    violations: list[str] = []
    context, page, errors = signed_in(browser, web_server, SCREENS[0])
    for name, path in PAGES.items():
        response = page.goto(f"{web_server.url}{path.format(**ids)}")
        assert response is not None and response.status == 200, (name, response)
        # One load, four screens: the layout is CSS media queries, re-applied on each resize.
        for width in SCREENS:
            page.set_viewport_size({"width": width, "height": 900})
            found = page.evaluate(OVERFLOW, width)
            if found["scroll"] > width:
                problems.append(f"{name} at {width} px scrolls sideways: {found}")
            assert_no_serious_violations(page, f"{name} at {width} px")
            page.screenshot(path=str(SHOTS / f"{name}-{width}.png"), full_page=True)
        page.set_viewport_size({"width": SCREENS[0], "height": 900})
        violations += [f"{name}: {v}" for v in page.evaluate("window.__csp")]
    context.close()
    assert problems == [], "\n".join(problems)
    assert violations == [], "\n".join(violations)
    assert errors == [], "\n".join(errors)
    assert time.monotonic() - started < 120, "the four screens must stay cheap for CI"


def test_on_a_phone_the_menu_folds_behind_a_button(browser, web_server):  # noqa: F811
    context, page, errors = signed_in(browser, web_server, 390)
    nav = page.locator("#console-nav")
    toggle = page.locator(".menu-toggle")
    assert toggle.is_visible() and not nav.is_visible()
    assert toggle.get_attribute("aria-expanded") == "false"
    toggle.click()
    assert nav.is_visible() and toggle.get_attribute("aria-expanded") == "true"
    # Every link of the menu lies inside the window once open.
    rights = page.evaluate(
        "() => [...document.querySelectorAll('#console-nav a')].map(a => a.getBoundingClientRect().right)"
    )
    assert rights and max(rights) <= 390
    assert_no_serious_violations(page, "the open menu at 390 px")
    page.set_viewport_size({"width": 1280, "height": 900})
    assert nav.is_visible() and not toggle.is_visible()  # a wide screen shows the menu as it is
    assert errors == []
    context.close()


# The placeholder's text typed into the box: Chromium lays a placeholder out in the same inner
# box as a value (beside the search box's clear button), so a value that scrolls is a cut placeholder.
PLACEHOLDER_FIT = """() => {
  const box = document.querySelector("#site-search");
  box.value = box.placeholder;
  const fit = {text: box.placeholder, scroll: box.scrollWidth, client: box.clientWidth};
  box.value = "";
  return fit;
}"""


def test_the_search_boxs_placeholder_shows_whole_on_wide_screens(browser, web_server):  # noqa: F811
    context, page, errors = signed_in(browser, web_server, 1024)
    for width in (1024, 1440, 2560):
        page.set_viewport_size({"width": width, "height": 900})
        box = page.evaluate(PLACEHOLDER_FIT)
        assert box["text"].startswith("Name, email, order"), box
        assert box["scroll"] <= box["client"], f"the placeholder is cut at {width} px: {box}"
        found = page.evaluate(OVERFLOW, width)
        assert found["scroll"] <= width, f"the page scrolls sideways at {width} px: {found}"
        page.screenshot(path=str(SHOTS / f"search-box-{width}.png"))
    assert errors == []
    context.close()
