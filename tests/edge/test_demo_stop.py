"""Ctrl-C on `make demo`, typed into a real (pseudo-)terminal, stops everything and exits 0."""

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
