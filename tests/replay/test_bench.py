"""``manage.py bench --quick --json`` runs end to end at a test-only size and leaves nothing behind.

Its runs are parked through one worker process (``--park-workers 1``), the path the
10,000-parked figures take."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import psycopg
import pytest
from django.db import connections

from tests.fixtures.dbos import ROOT, test_database_url
from tests.support.processes import run_all_or_kill

pytestmark = pytest.mark.crash  # its fleet phase SIGKILLs worker processes

FIELDS = (
    "floor_insert_commit_ms",
    "bare_dbos_step_ms",
    "agent_step_ms",
    "step_overhead_ratio",
    "dbos_steps_per_agent_step",
    "approval_wake_p50_ms",
    "approval_wake_p95_ms",
    "enqueue_to_first_step_p50_ms",
    "enqueue_to_first_step_p95_ms",
    "runs_per_s_queue",
    "runs_per_s_direct",
    "runs_per_s_2_workers",
    "parked_runs",
    "parked_threads",
    "parked_rss_mb",
    "parked_idle_cpu_pct",
    "kill_to_resume_s",
    "takeover_s",
    # Through a real web process (issue 28's acceptance).
    "webhook_to_ticket_stored_p95_ms",
    "api_run_to_first_step_p95_ms",
)


@pytest.mark.slow
def test_bench_quick_json_measures_every_figure_and_leaves_no_database_or_file(
    transactional_db,
):
    status = subprocess.run(
        ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True
    )
    env = {
        **os.environ,
        "DATABASE_URL": test_database_url(),
        "PYTHONUNBUFFERED": "1",
        # Takeover waits out the grace period: a short one keeps this test short.
        "DESKHAND_TAKEOVER_GRACE_SEC": "3",
        "DESKHAND_TAKEOVER_SCAN_SEC": "0.5",
        "DESKHAND_HEARTBEAT_SEC": "0.5",
    }
    proc = run_all_or_kill(
        [
            sys.executable,
            "manage.py",
            "bench",
            "--quick",
            "--json",
            "--parked",
            "3,6",
            "--park-workers",
            "1",
            "--wake",
            "3",
            "--samples",
            "30",
            "--runs",
            "4",
            "--pickup",
            "4",
            "--api",
            "3",
            "--window",
            "1",
        ],
        cwd=ROOT,
        env=env,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for field in FIELDS:
        assert isinstance(result.get(field), int | float), (field, result.get(field))
    assert result["parked_runs"] == 6
    assert result["idle_window_s"] == 1.0  # every idle figure, the parked levels' too
    # A real worker process held what the in-process phase left parked (a test-size run
    # leaves few or none, so only the shape is pinned).
    assert result["worker_parked_runs"] >= 0 and result["worker_parked_threads"] > 0
    assert isinstance(result["worker_parked_idle_cpu_pct"], int | float)
    # Parked by a worker process beside the bench's executor, then all held by the bench's:
    # at each level, every run it woke was one it held (a wake times its own executor's recv).
    assert result["park_workers"] == 1 and len(result["crew_handover_s"]) == 2
    assert [p["wakes"] for p in result["parked_series"]] == [3, 3]
    assert result["nw2_status"] == "succeeded"
    assert result["step_overhead_ratio"] == round(
        result["agent_step_ms"] / result["bare_dbos_step_ms"], 2
    )
    assert 0 < result["takeover_s"] < 60 and 0 < result["kill_to_resume_s"] < 60
    assert result["api_samples"] == 3
    assert (
        result["webhook_to_ticket_stored_p95_ms"] > 0 and result["api_run_to_first_step_p95_ms"] > 0
    )
    assert "agent step (DBOSRuntime.step)" in proc.stdout  # the human lines come first
    assert "help-desk webhook → ticket stored" in proc.stdout
    # Nothing left behind: no scratch database, no file in the tree.
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
        left = conn.execute(
            "SELECT count(*) FROM pg_database WHERE datname = %s", [result["scratch_database"]]
        ).fetchone()[0]
    assert left == 0
    after = subprocess.run(
        ["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True
    )
    assert after.stdout == status.stdout


CUSTOMER_FIELDS = (
    "customer_parked_runs",
    "customer_parked_threads",
    "customer_parked_rss_mb",
    "customer_parked_idle_cpu_pct",
    "customer_wake_p95_ms",
    "customer_reply_to_next_step_p50_ms",
    "customer_reply_to_next_step_p95_ms",
    "customer_over_approval_cpu_top",
    "parked_idle_cpu_pct",
    "approval_wake_p95_ms",
)


@pytest.mark.slow
def test_bench_customers_parks_on_customers_and_approvals_and_each_answer_wakes_its_run(
    transactional_db,
):
    """Issue 27's bench point at a test-only size: runs parked on a customer's answer,
    parked by a worker process and held by the bench's executor, beside runs parked on
    approvals in the same run; each answer stored wakes its run, which then finishes."""
    env = {**os.environ, "DATABASE_URL": test_database_url(), "PYTHONUNBUFFERED": "1"}
    proc = run_all_or_kill(
        [
            *(sys.executable, "manage.py", "bench", "--quick", "--json", "--customers"),
            *("--parked", "20", "--wake", "5", "--park-workers", "1", "--no-fleet"),
            *("--samples", "20", "--runs", "3", "--pickup", "3", "--api", "2", "--window", "1"),
        ],
        cwd=ROOT,
        env=env,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for field in CUSTOMER_FIELDS:
        assert isinstance(result.get(field), int | float), (field, result.get(field))
    assert result["customer_parked_runs"] == result["parked_runs"] == 20
    [level] = result["customer_parked_series"]
    # Every woken run woke on its answer: its recv returned, then its next step committed.
    assert level["wakes"] == 5 and level["woken_statuses"] == {"succeeded": 5}
    assert 0 < level["wake_p95_ms"] <= level["next_step_p95_ms"] < 30_000
    assert len(result["customer_crew_handover_s"]) == 1
    # The other 15 were answered before the approval series, and none waits any more.
    assert result["customer_release_s"] > 0 and result["customer_left_waiting"] == 0
    assert "parked on customers     20:" in proc.stdout
    assert "customers ÷ parked on approvals" in proc.stdout
    _scratch_dropped(result["scratch_database"])


def _scratch_dropped(scratch: str) -> None:
    """The bench dropped its scratch database at the end."""
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
        left = conn.execute("SELECT count(*) FROM pg_database WHERE datname = %s", [scratch])
        assert left.fetchone()[0] == 0


PEER_FIELDS = (
    "durable_cpu_per_step_ms",
    "commits_per_run",
    "bytes_per_run",
    "wake_p95_ms",
    "crash_refunds",
)


@pytest.mark.slow
@pytest.mark.timeout(900)  # three systems, a crash test each: about 4 minutes on a quiet machine
def test_bench_peers_quick_json_ends_with_each_systems_figures(transactional_db):
    env = {**os.environ, "DATABASE_URL": test_database_url(), "PYTHONUNBUFFERED": "1"}
    proc = run_all_or_kill(
        [
            *(sys.executable, "manage.py", "bench", "--peers", "--quick", "--json"),
            *("--rounds", "1", "--parked", "3", "--wake", "2"),
        ],
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    peers = json.loads(proc.stdout.strip().splitlines()[-1])["peers"]
    assert set(peers) == {"deskhand", "dbos", "langgraph"}
    for system, figures in peers.items():
        for field in PEER_FIELDS:
            assert isinstance(figures.get(field), int | float), (system, field, figures)
    assert isinstance(peers["deskhand"]["agent_cpu_per_step_ms"], float)
    # The ledger keeps the refund single across the crash; the peers re-run the step.
    assert peers["deskhand"]["crash_refunds"] == 1
    assert peers["dbos"]["crash_refunds"] == peers["langgraph"]["crash_refunds"] == 2
    # Which tables an NW-1 run writes: its step rows among them.
    assert peers["deskhand"]["tables"]["public.agent_step"]["ins"] > 0
    assert "rows written per NW-1 run, by table" in proc.stdout


@pytest.mark.slow
def test_bench_loop_measures_deskhands_own_work_per_step_its_profile_and_sql_sites(
    transactional_db, tmp_path
):
    """``--loop``: the figure ``agent_cpu_per_step_ms`` is made of, alone, with its per-step
    table, (``--profile``) a cProfile file pstats can read and (``--sites``) each run's SQL
    CPU charged to the product lines that asked."""
    import pstats

    env = {**os.environ, "DATABASE_URL": test_database_url(), "PYTHONUNBUFFERED": "1"}
    profile = tmp_path / "loop.prof"
    proc = run_all_or_kill(
        [
            *(sys.executable, "manage.py", "bench", "--loop", "--quick", "--json"),
            *("--runs", "1", "--profile", str(profile), "--sites"),
        ],
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    loop = json.loads(proc.stdout.strip().splitlines()[-1])["loop"]
    assert loop["runs"] == 1 and loop["profiled"] is True
    assert loop["agent_cpu_per_step_ms"] > 0 and loop["wall_per_step_ms"] > 0
    # Six model turns and six tool calls a run, each counted under its step name.
    assert loop["steps"]["model"]["calls"] == 6.0 and loop["steps"]["tool.*"]["calls"] == 6.0
    assert "ms CPU per step (target ≤ 4)" in proc.stdout
    assert pstats.Stats(str(profile)).total_calls > 0
    sql = loop["sql"]
    assert sql["runs"] == 1 and sql["statements_per_run"] > 50 and sql["sql_cpu_ms_per_run"] > 0
    sites = {s["site"].split(" < ")[0].split(":")[0] for s in sql["sites"]}
    assert "agent/record/steplog.py" in sites  # every step writes its row: always among the top
    assert all(s["statements"] >= 0 and s["compile_ms"] >= 0 for s in sql["sites"])
    assert "querysets compiled" in proc.stdout


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--profile", "x.prof"], "--profile profiles the loop alone"),
        (["--loop", "--peers"], "--loop and --peers are two different runs"),
        (["--sites"], "--sites tallies the loop alone"),
    ],
)
def test_bench_loop_refuses_what_it_cannot_do_with_a_sentence(args, why):
    proc = run_all_or_kill(
        [sys.executable, "manage.py", "bench", *args],
        cwd=ROOT,
        env=dict(os.environ),  # refused before any database is reached
        timeout=120,
    )
    assert proc.returncode != 0
    assert why in proc.stderr + proc.stdout
