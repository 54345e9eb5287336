#!/usr/bin/env python3
"""Make sure Debian's Chromium is at /usr/bin/chromium for the browser tests.

Called by ``make test`` (target ``browsers``). The tests drive this system
browser through Playwright's ``executable_path``; Playwright's own browser
download (``playwright install``) is never used. If the browser is missing
and we are root, install the Debian package with apt-get; otherwise say
exactly what to do and exit non-zero.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")


def say(message: str) -> None:
    print(f"ensure_chromium: {message}", flush=True)


def version() -> str:
    try:
        out = subprocess.run(
            [str(CHROMIUM), "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(could not run it: {exc})"
    return (out.stdout or out.stderr).strip()


def main() -> int:
    if CHROMIUM.exists():
        say(f"{CHROMIUM} is present: {version()}")
        return 0
    if shutil.which("apt-get") is None:
        say(
            f"{CHROMIUM} is missing and there is no apt-get here; install a Chromium at {CHROMIUM} to run the browser tests."
        )
        return 1
    if os.geteuid() != 0:
        say(
            f"{CHROMIUM} is missing and installing it needs root: run `sudo apt-get update && sudo apt-get install -y chromium`."
        )
        return 1
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # Another apt-get (an unattended upgrade, a second checkout's first `make test`) may hold
    # the dpkg lock for a while: wait for it rather than fail the browser tests.
    wait = ["-o", "DPkg::Lock::Timeout=600"]
    for cmd in (["apt-get", *wait, "update"], ["apt-get", *wait, "install", "-y", "chromium"]):
        say("running " + " ".join(cmd))
        result = subprocess.run(cmd, env=env)
        if result.returncode != 0:
            say(
                f"`{' '.join(cmd)}` failed with exit code {result.returncode}; the browser tests cannot run without {CHROMIUM}."
            )
            return 1
    if not CHROMIUM.exists():
        say(
            f"apt-get installed the chromium package but {CHROMIUM} is still missing; check the package for this distribution."
        )
        return 1
    say(f"installed {CHROMIUM}: {version()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
