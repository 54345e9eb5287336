"""The peers' crash row: SIGKILL between the refund's commit and the step's record, then restart.

``crash_peer(system, conninfo)`` runs ``python -m tests.devtools.bench.peer_crash`` twice:
first told to die right after the refund commits (``crash``), then again on the same run
(``recover``: DBOS recovers its executor's pending workflow; LangGraph resumes the thread
from its last checkpoint). It returns how many refunds the run made. Neither peer has a
ledger, so the step re-runs and refunds again: 2. Deskhand's row comes from the crash sweep.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[3]


def _url(conninfo: dict[str, Any]) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(**conninfo)


def _dbos_url() -> str:
    from deskhand.infra.dbos.client import database_url

    return database_url()  # the Django database (the bench's scratch one), as DBOS takes it


def crash_peer(system: str, conninfo: dict[str, Any], timeout: float = 120.0) -> int:
    run_id = f"peer-crash-{system}-{secrets.token_hex(4)}"
    for mode in ("crash", "recover"):
        proc = subprocess.run(
            [sys.executable, "-m", "tests.devtools.bench.peer_crash", system, mode, run_id],
            cwd=ROOT,
            env={
                **os.environ,
                "BENCH_PEER_DSN": _url(conninfo),
                "BENCH_PEER_DBOS_URL": _dbos_url(),
                "BENCH_PEER_CRASH": "1" if mode == "crash" else "0",
                "PYTHONUNBUFFERED": "1",
            },
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        want = -9 if mode == "crash" else 0
        if proc.returncode != want:
            raise RuntimeError(
                f"{system} {mode}: exit {proc.returncode}, wanted {want}:\n{proc.stderr[-2000:]}"
            )
    with psycopg.connect(**conninfo, autocommit=True) as c:
        row = c.execute(
            "SELECT count(*) FROM bench_peer_refund WHERE run_id = %s", [run_id]
        ).fetchone()
    return int(row[0]) if row else 0


def _dbos(mode: str, run_id: str, dsn: str) -> None:
    from dbos import DBOS, SetWorkflowID

    from tests.devtools.bench import peer_workloads as pw

    conninfo = psycopg.conninfo.conninfo_to_dict(dsn)
    wf = pw.register_dbos(conninfo)
    DBOS(
        config={
            "name": "deskhand-bench-peer",
            "system_database_url": os.environ["BENCH_PEER_DBOS_URL"],
            "executor_id": f"{run_id}-executor",
            "application_version": "bench-peer",
        }
    )
    DBOS.launch()
    if mode == "crash":
        with SetWorkflowID(run_id):
            DBOS.start_workflow(wf)  # BENCH_PEER_CRASH: dies after the refund's commit
        while True:  # park, then approve: the refund runs and the process is killed
            steps = DBOS.list_workflow_steps(run_id)
            if sum(1 for s in steps if s["function_name"] == "model") >= 5:
                break
            time.sleep(0.05)
        DBOS.send(run_id, {"approve": True}, "approval")
        time.sleep(60)
        raise SystemExit("the crash never came")
    # recover: launching under the same executor id recovers the pending workflow.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        status = DBOS.get_workflow_status(run_id)
        if status is not None and status.status == "SUCCESS":
            DBOS.destroy()
            return
        time.sleep(0.1)
    raise SystemExit(f"the recovered workflow did not finish: {status}")


def _langgraph(mode: str, run_id: str, dsn: str) -> None:
    from tests.devtools.bench import peer_workloads as pw

    conninfo = psycopg.conninfo.conninfo_to_dict(dsn)
    saver = pw.langgraph_postgres(conninfo)
    graph = pw.langgraph_graph(conninfo, saver, crash=mode == "crash")
    if mode == "crash":
        pw.langgraph_until_approval(graph, run_id)
        pw.langgraph_resume(graph, run_id)  # the refund commits, then the process is killed
        raise SystemExit("the crash never came")
    # recover: the thread goes on from its last checkpoint (the refund node runs again).
    graph.invoke(None, {"configurable": {"thread_id": run_id}}, durability="sync")


def main(argv: list[str]) -> None:
    system, mode, run_id = argv[1:4]
    dsn = os.environ["BENCH_PEER_DSN"]
    {"dbos": _dbos, "langgraph": _langgraph}[system](mode, run_id, dsn)


if __name__ == "__main__":
    main(sys.argv)
