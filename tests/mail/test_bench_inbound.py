"""``manage.py bench --inbound``: what a message costs in process, per shape of mail, and how
long it takes through a real SMTP receiver and a real worker, one at a time and in a burst."""

from __future__ import annotations

import json
import os
import sys

from tests.fixtures.dbos import ROOT, test_database_url
from tests.support.processes import run_all_or_kill


def test_bench_inbound_measures_costs_and_latency_through_the_receiver_and_a_worker(
    transactional_db,
):
    proc = run_all_or_kill(
        [
            sys.executable,
            "manage.py",
            "bench",
            "--inbound",
            "--samples",
            "3",
            "--burst",
            "10",
            "--clients",
            "5",
            "--json",
        ],
        cwd=ROOT,
        env={
            **os.environ,
            "DATABASE_URL": test_database_url(),
            "PYTHONUNBUFFERED": "1",
        },
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    inbound = json.loads(proc.stdout.strip().splitlines()[-1])["inbound"]
    assert inbound["samples"] == 3
    shapes = inbound["shapes"]
    assert set(shapes) == {"plain", "html", "reply", "attachment"}
    for shape, f in shapes.items():
        assert 0 < f["parse_cpu_ms"] < f["process_cpu_ms"], (shape, f)
        assert f["store_cpu_ms"] > 0 and 0 < f["store_ms"] <= f["store_p95_ms"], (shape, f)
        assert f["process_ms"] > 0, (shape, f)
    # The attachment is the largest message; the reply carries forty quoted lines.
    assert shapes["attachment"]["bytes"] > 20_000 > shapes["reply"]["bytes"] > 2_000

    smtp = inbound["smtp"]
    assert (smtp["burst"], smtp["burst_clients"]) == (10, 5)
    # Every message of the burst reached a thread and opened a run that took its first step.
    assert smtp["burst_threaded"] == smtp["burst_started"] == 10
    for run in ("single", "burst"):
        for figure in ("answer", "first_step"):
            p50, p95 = smtp[f"{run}_{figure}_p50_ms"], smtp[f"{run}_{figure}_p95_ms"]
            assert 0 < p50 <= p95, (run, figure, smtp)
        # A run's first step comes after its message was answered: the answer is the store.
        assert smtp[f"{run}_answer_p50_ms"] < smtp[f"{run}_first_step_p50_ms"], smtp
    assert 0 < smtp["burst_all_answered_s"] <= smtp["burst_all_threaded_s"]
    assert smtp["burst_all_threaded_s"] <= smtp["burst_all_started_s"]
    assert smtp["burst_over_single_answer_p95"] > 0
    assert "burst answer p95 ÷ single answer p95" in proc.stdout
