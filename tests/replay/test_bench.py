"""``manage.py bench`` runs end to end in its own scratch database and prints its ratio lines."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import psycopg
from django.db import connections

from tests.fixtures.dbos import ROOT, test_database_url


def test_bench_runs_end_to_end_with_twenty_parked_runs_and_leaves_no_database(transactional_db):
    env = {**os.environ, "DATABASE_URL": test_database_url(), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "bench",
            "--parked",
            "20",
            "--runs",
            "1",
            "--wake",
            "5",
            "--samples",
            "50",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    for pattern in (
        r"\(a\) one durable step against one INSERT \+ COMMIT",
        r"bare DBOS step \(sync, no-op\) .* ratio \d+\.\dx",
        r"the same, as agent.workflow runs a step .* ratio \d+\.\dx",
        r"\(b\) one NW-2 run .* step-log rows, \d+ DBOS steps",
        r"sum of step-log latencies .* wall / sum \d+\.\dx",
        r"\(c\) 20 runs parked at the approval gate",
        r"all parked after .*; 0 ended instead",
        r"per parked run \d+\.\d{4}",
        r"per 1000 parked -?\d+\.\d MB",
        r"Postgres connections \(this executor\): \d+ before, \d+ parked",
        r"wake latency, 5 of 5 parked runs woken",
        r"decide → gate.resume committed \(resumed\) +p50 \d+\.\d\d ms +p95 \d+\.\d\d ms",
        r"\(d\) step commit → NOTIFY received on deskhand_steps \(50 commits",
    ):
        assert re.search(pattern, out), f"{pattern!r} not in:\n{out}"
    scratch = re.search(r"scratch database (deskhand_bench_[0-9a-f]+)", out).group(1)
    sd = connections["default"].settings_dict
    server = {
        k: v
        for k, v in {
            "host": sd.get("HOST"),
            "port": sd.get("PORT"),
            "user": sd.get("USER"),
            "password": sd.get("PASSWORD"),
        }.items()
        if v
    }
    with psycopg.connect(**server, dbname=sd["NAME"]) as conn:
        assert (
            conn.execute(
                "SELECT count(*) FROM pg_database WHERE datname = %s", [scratch]
            ).fetchone()[0]
            == 0
        )
