"""Checks a browser test runs on a console page: axe-core, keyboard reach, facts that fit.

axe-core comes from npm (package.json pins it; ``make browsers`` runs
scripts/ensure_axe.py, which installs it into node_modules/). It is evaluated
in the page through Playwright rather than added as a <script> tag: the
console's Content-Security-Policy admits only nonce'd scripts, and the test
must not loosen the policy it also checks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = ("serious", "critical")

# The console pages axe-core checks. Adding a page is one line: its name and its path
# ("{run}" is a run id the test provides).
AXE_PAGES: dict[str, str] = {
    "home": "/",
    "runs": "/runs/",
    "run": "/runs/{run}/",
    "inbox": "/approvals/",
    "attention": "/attention/",
}

RUN_AXE = """async () => {
  const result = await axe.run(document, {resultTypes: ["violations"]});
  return result.violations.map(v => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.slice(0, 4).map(n => n.target.join(" ")),
  }));
}"""


def axe_violations(page: Any) -> list[dict[str, Any]]:
    """Every axe-core violation on the page as it is now."""
    if not AXE.exists():
        pytest.fail("axe-core is missing: run `make browsers` (scripts/ensure_axe.py)")
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE.read_text() + "\n;void 0")
    return list(page.evaluate(RUN_AXE))


def assert_no_serious_violations(page: Any, where: str) -> None:
    bad = [v for v in axe_violations(page) if v["impact"] in BLOCKING]
    assert not bad, f"axe-core on {where}:\n" + "\n".join(json.dumps(v) for v in bad)


def tab_to(page: Any, selector: str, *, limit: int = 120) -> None:
    """Press Tab until ``selector`` has the focus (as a keyboard user would), or fail."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate(
            "(sel) => !!document.activeElement && document.activeElement.matches(sel)", selector
        ):
            return
    pytest.fail(f"{selector} is not reachable with the Tab key")


FACTS_BOXES = """(card) => {
  const root = document.querySelector(card);
  if (!root) return null;
  const box = root.getBoundingClientRect();
  return {
    card: {left: box.left, right: box.right, scroll: root.scrollWidth, client: root.clientWidth},
    facts: [...root.querySelectorAll(".order-facts dt, .order-facts dd")].map(el => {
      const r = el.getBoundingClientRect();
      return {text: el.innerText.trim(), left: r.left, right: r.right,
              scroll: el.scrollWidth, client: el.clientWidth};
    }),
  };
}"""


def assert_order_facts_fit(page: Any, card: str, width: int) -> list[str]:
    """The card's order facts lie wholly inside the card, and the card inside the window."""
    page.set_viewport_size({"width": width, "height": 1000})
    page.locator(card).scroll_into_view_if_needed()
    found = page.evaluate(FACTS_BOXES, card)
    assert found is not None, f"no {card} on the page at {width} px"
    box = found["card"]
    assert box["scroll"] <= box["client"] + 1, (width, box)
    assert box["right"] <= width, (width, box)
    for fact in found["facts"]:
        assert fact["scroll"] <= fact["client"] + 1, (width, fact)
        assert box["left"] <= fact["left"] and fact["right"] <= box["right"] + 0.5, (width, fact)
    assert page.evaluate("() => document.documentElement.scrollWidth") <= width
    return [f["text"] for f in found["facts"]]
