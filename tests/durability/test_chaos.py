"""The small chaos configuration: workers SIGKILLed and Postgres restarted under live runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fixtures.dbos import ROOT

pytestmark = pytest.mark.crash


@pytest.mark.slow
def test_chaos_on_two_workers_with_kills_and_a_postgres_restart_breaks_no_invariant():
    proc = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "chaos",
            "--runs",
            "12",
            "--workers",
            "2",
            "--seconds",
            "16",
            "--grace",
            "3",
            "--json",
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["violation_count"] == 0, result["violations"]
    assert result["runs"] == 12  # one per ticket, even one whose start a restart cut short
    assert result["kills"] >= 1 and result["pg_restarts"] == 1
    assert result["approved"] >= 1 and result["refunds"] >= 1
    assert not any(k.startswith(("queued", "running", "awaiting")) for k in result["statuses"])
    assert "0 invariant violations" in proc.stdout
