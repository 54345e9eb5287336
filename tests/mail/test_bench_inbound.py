"""``manage.py bench --inbound`` prints what one inbound message costs, per shape of mail."""

from __future__ import annotations

import json
import os
import sys

from tests.fixtures.dbos import ROOT, test_database_url
from tests.support.processes import run_all_or_kill


def test_bench_inbound_measures_parsing_and_intake_for_each_shape_of_mail(transactional_db):
    proc = run_all_or_kill(
        [sys.executable, "manage.py", "bench", "--inbound", "--samples", "5", "--json"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": test_database_url(), "PYTHONUNBUFFERED": "1"},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    inbound = json.loads(proc.stdout.strip().splitlines()[-1])["inbound"]
    assert inbound["samples"] == 5
    for shape in ("plain", "html", "reply", "attachment"):
        f = inbound[shape]
        assert 0 < f["parse_cpu_ms"] < f["intake_cpu_ms"], (shape, f)
        assert 0 < f["intake_ms"] <= f["intake_p95_ms"], (shape, f)
    # The attachment is the largest message; the reply carries forty quoted lines.
    assert inbound["attachment"]["bytes"] > 20_000 > inbound["reply"]["bytes"] > 2_000
    assert "stored and threaded" in proc.stdout
