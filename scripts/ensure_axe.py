#!/usr/bin/env python3
"""Make sure axe-core is in node_modules/ for the browser tests' accessibility checks.

Called by ``make test`` (target ``browsers``). The version is pinned in
package.json and package-lock.json at the repository root; ``npm ci`` installs
exactly that into node_modules/ (git-ignored) the first time, and is skipped
while the installed copy matches the pin. The tests read
node_modules/axe-core/axe.min.js and inject it into each page they check.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AXE = ROOT / "node_modules" / "axe-core"


def say(message: str) -> None:
    print(f"ensure_axe: {message}", flush=True)


def pinned() -> str:
    return str(json.loads((ROOT / "package.json").read_text())["devDependencies"]["axe-core"])


def installed() -> str | None:
    try:
        meta = json.loads((AXE / "package.json").read_text())
    except (OSError, ValueError):
        return None
    return str(meta.get("version")) if (AXE / "axe.min.js").exists() else None


def main() -> int:
    want = pinned()
    if installed() == want:
        say(f"axe-core {want} is in node_modules/")
        return 0
    npm = shutil.which("npm")
    if npm is None:
        say(
            "npm is missing: install Node.js and npm (Debian: `apt-get install -y npm`) to run the accessibility checks."
        )
        return 1
    say(f"installing axe-core {want} with `npm ci` (first run only)")
    result = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=ROOT, check=False
    )
    if result.returncode != 0 or installed() != want:
        say(f"`npm ci` did not install axe-core {want} (exit code {result.returncode}).")
        return 1
    say(f"installed axe-core {want}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
