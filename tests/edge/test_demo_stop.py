"""Stopping `make demo`: Ctrl-C in a real (pseudo-)terminal stops everything and exits 0; and
what the first install says before pip starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.fixtures.dbos import ROOT


@pytest.mark.slow
def test_ctrl_c_on_make_demo_exits_0_and_leaves_no_process():
    done = subprocess.run(
        [sys.executable, "scripts/demo_ctrl_c.py", "--times", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    run = lines[0]
    assert run["ok"] and run["exit"] == 0 and run["left"] == [], run
    assert run["processes_before"] >= 4, run  # make, the script, the worker, the web server, …
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_first_install_says_what_it_is_doing_before_pip_starts(tmp_path):
    """Issue 40: the first `make demo` installed for minutes with only pip's warnings on screen."""
    venv = tmp_path / "venv"  # no venv there: make would install into it
    dry = subprocess.run(
        ["make", "-n", "venv", f"VENV={venv}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = dry.stdout.splitlines()
    said = next(
        i for i, line in enumerate(lines) if "Installing Deskhand's Python packages" in line
    )
    pip = next(i for i, line in enumerate(lines) if "pip install" in line)
    assert said < pip, dry.stdout
    assert not venv.exists()  # a dry run: nothing installed
