"""axe-core, which the browser tests inject, is one exact version everywhere it is named."""

from __future__ import annotations

import json
import re

from tests.console.a11y import AXE, ROOT


def test_axe_core_is_pinned_to_one_exact_version_and_that_is_what_is_installed():
    wanted = json.loads((ROOT / "package.json").read_text())["devDependencies"]["axe-core"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", wanted), f"not an exact version: {wanted!r}"
    lock = json.loads((ROOT / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/axe-core"]["version"] == wanted
    installed = json.loads((AXE.parent / "package.json").read_text())["version"]
    assert installed == wanted, "run `make browsers` (scripts/ensure_axe.py) to install the pin"
