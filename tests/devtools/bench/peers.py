"""``bench --peers``: the NW-1 shaped workload on Deskhand, bare DBOS and LangGraph, side by side.

In rounds, interleaved (each round runs every system once, in a shuffled order, so a burst
of load on this shared machine falls on all of them), medians over the rounds:

- ``durable_cpu_per_step_ms`` — process CPU of one durable run, minus the executor's idle
  CPU over the same wall time, minus the same loop run with no durability, ÷ 12 steps;
- ``agent_cpu_per_step_ms`` (Deskhand) — that loop on ``MemoryRuntime``, ÷ 12 (each loop
  with no durability also has the executor's idle CPU over its wall time subtracted: the
  executor's polls run in this process beside it);
- ``commits_per_run`` — transactions that wrote (each takes a transaction id), idle
  background writes subtracted; ``bytes_per_run`` — WAL bytes, idle subtracted;
- ``wake_p95_ms`` — with ``parked`` runs of that system waiting for their approval: the
  decision sent → the run going on (Deskhand and DBOS: its ``recv`` returned; LangGraph: the
  resumed graph reaching the refund). Deskhand's is timed from ``send_decision``, after the
  person's decision committed; that decision's own work (``approval_decide`` up to its
  send: who may decide, the row lock, DBOS's view of the workflow, the audit row) is
  ``wake_decide_p95_ms`` beside it;
- ``crash_refunds`` — refunds after a SIGKILL between the refund's commit and the step's
  record, then a restart (``tests.devtools.bench.peer_crash``; Deskhand: the crash sweep's
  ``after_commit:issue_refund`` on NW-1).

Deskhand's tables and transactions per run are printed beside it (``writes``, from
``pg_stat_user_tables`` over a batch of runs once the statistics are flushed; ``steps``, the
client's count per step name on ``MemoryRuntime``).
"""

from __future__ import annotations

import random
import time
from functools import partial
from typing import Any

import psycopg
from django.db import close_old_connections

from tests.devtools.bench import nw1
from tests.devtools.bench import peer_workloads as pw
from tests.devtools.bench.probes import BENCH_APP, cpu_seconds, median, pct, until

SYSTEMS = ("deskhand", "dbos", "langgraph")
STATS_FLUSH_S = 11.0  # an idle backend flushes its statistics within 10 s


class Peers:
    def __init__(self, conninfo: dict[str, Any], executor: Any, progress: Any) -> None:
        self.conninfo = conninfo
        self.inproc = executor  # tests.devtools.bench.inproc.InProcess (its NOTIFY listener)
        self.progress = progress
        self.db = psycopg.connect(**conninfo, autocommit=True, application_name=BENCH_APP)
        self.db.execute(pw.REFUND_TABLE)
        self.saver = pw.langgraph_postgres(conninfo)
        self.graph = pw.langgraph_graph(conninfo, self.saver)
        from langgraph.checkpoint.memory import InMemorySaver

        self.memory_graph = pw.langgraph_graph(conninfo, InMemorySaver())
        self.made = 0

    # --- the counters --------------------------------------------------------------------

    def _wal_xid(self) -> tuple[int, int]:
        row = self.db.execute(
            "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn, pg_current_xact_id()::text::bigint"
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    def idle(self, seconds: float) -> dict[str, float]:
        """The executor's background CPU, writing transactions and WAL bytes per second."""
        close_old_connections()
        c0, (w0, x0), t0 = cpu_seconds(), self._wal_xid(), time.monotonic()
        time.sleep(seconds)
        c1, (w1, x1), t1 = cpu_seconds(), self._wal_xid(), time.monotonic()
        dt = t1 - t0
        # Each reading takes one transaction id itself.
        return {"cpu": (c1 - c0) / dt, "xids": (x1 - x0 - 1) / dt, "wal": (w1 - w0) / dt}

    def measured(self, fn: Any, idle: dict[str, float]) -> dict[str, float]:
        c0, (w0, x0), t0 = cpu_seconds(), self._wal_xid(), time.monotonic()
        fn()
        c1, (w1, x1), t1 = cpu_seconds(), self._wal_xid(), time.monotonic()
        dt = t1 - t0
        return {
            "cpu": c1 - c0 - idle["cpu"] * dt,
            "xids": x1 - x0 - 1 - idle["xids"] * dt,
            "wal": w1 - w0 - idle["wal"] * dt,
        }

    # --- one run of each --------------------------------------------------------------------

    def _tickets(self, n: int) -> list[Any]:
        tickets = nw1.tickets(n, start=500_000 + self.made)
        self.made += n
        return tickets

    def deskhand_create(self, n: int) -> list[str]:
        """``n`` Deskhand runs on fresh NW-1 shaped tickets (a person's ``run_create``)."""
        from agent.run.services import run_create
        from tests.devtools.load.world import owners

        who = owners()
        return [str(run_create(ticket=t, user=who[t.merchant_id]).pk) for t in self._tickets(n)]

    def deskhand_start(self, ids: list[str]) -> list[str]:
        """Start these runs' workflows directly (no queue poll in the way)."""
        from dbos import DBOS, SetWorkflowID
        from dbos._dbos import _get_dbos_instance

        from deskhand.engine.workflow import run_workflow

        async def start_all() -> None:
            for wf_id in ids:
                with SetWorkflowID(wf_id):
                    await DBOS.start_workflow_async(run_workflow)

        _get_dbos_instance()._background_event_loop.submit_coroutine(start_all())
        return ids

    def _status(self, sql: str, key: str) -> str:
        row = self.db.execute(sql, [key]).fetchone()
        return str(row[0]) if row else ""

    def _workflow_done(self, wf_id: str) -> bool:
        return self._status(
            "SELECT status FROM dbos.workflow_status WHERE workflow_uuid = %s", wf_id
        ) in ("SUCCESS", "ERROR")

    def _pending_approval(self, run_id: str) -> bool:
        return (
            self._status(
                "SELECT status FROM approvals_approval WHERE run_id = %s AND status = 'pending'",
                run_id,
            )
            == "pending"
        )

    def deskhand_decide(self, run_id: str) -> None:
        from approvals.models import Approval
        from approvals.services import approval_decide
        from tests.devtools.load.world import owners

        approval = Approval.objects.get(run_id=run_id, status="pending")
        approval_decide(
            approval=approval, user=owners()[approval.merchant_id], approve=True, reason="bench"
        )

    def deskhand_run(self, run_id: str) -> None:
        """One run created beforehand (the ticket and the run row are not the loop's work):
        started, approved when it asks, to its workflow's end."""
        self.deskhand_start([run_id])
        if not until(partial(self._pending_approval, run_id), 120, every=0.02):
            raise RuntimeError(f"Deskhand run {run_id} never asked for its approval")
        self.deskhand_decide(run_id)
        if not until(partial(self._workflow_done, run_id), 120, every=0.02):
            raise RuntimeError(f"Deskhand run {run_id} did not finish")

    def dbos_start(self, n: int) -> list[str]:
        from dbos import DBOS, SetWorkflowID
        from dbos._dbos import _get_dbos_instance

        wf = pw._dbos["wf"]
        ids = [f"peer-dbos-{self.made + i}-{random.getrandbits(32):08x}" for i in range(n)]
        self.made += n

        async def start_all() -> None:
            for wf_id in ids:
                with SetWorkflowID(wf_id):
                    await DBOS.start_workflow_async(wf)

        _get_dbos_instance()._background_event_loop.submit_coroutine(start_all())
        return ids

    def _recv_parked(self, wf_id: str) -> bool:
        """The bare DBOS workflow has asked its fifth model turn: it waits for the approval."""
        row = self.db.execute(
            "SELECT count(*) FROM dbos.operation_outputs o JOIN dbos.workflow_status w"
            " ON w.workflow_uuid = o.workflow_uuid WHERE o.workflow_uuid = %s"
            " AND o.function_name = 'model' AND w.status = 'PENDING'",
            [wf_id],
        ).fetchone()
        return bool(row and row[0] >= 5)

    def dbos_run(self, _: str = "") -> None:
        from dbos import DBOS

        (wf_id,) = self.dbos_start(1)
        if not until(partial(self._recv_parked, wf_id), 120, every=0.02):
            raise RuntimeError(f"bare DBOS workflow {wf_id} never reached its approval")
        DBOS.send(wf_id, {"approve": True}, "approval")
        if not until(partial(self._workflow_done, wf_id), 120, every=0.02):
            raise RuntimeError(f"bare DBOS workflow {wf_id} did not finish")

    def langgraph_run(self, _: str = "") -> None:
        thread = f"peer-lg-{self.made}-{random.getrandbits(32):08x}"
        self.made += 1
        pw.langgraph_until_approval(self.graph, thread)
        pw.langgraph_resume(self.graph, thread)

    # --- the rounds -----------------------------------------------------------------------

    def rounds(self, n: int, per_round: int) -> dict[str, dict[str, Any]]:
        """``n`` interleaved rounds of ``per_round`` runs each; medians per run."""
        samples: dict[str, list[dict[str, float]]] = {s: [] for s in SYSTEMS}
        memory: dict[str, list[float]] = {s: [] for s in SYSTEMS}
        runs = {
            "deskhand": self.deskhand_run,
            "dbos": self.dbos_run,
            "langgraph": self.langgraph_run,
        }
        prepared = {
            "deskhand": lambda: self.deskhand_create(1)[0],
            "dbos": lambda: "",
            "langgraph": lambda: "",
        }
        # Warm each once: imports, prepared statements, the prompt version row.
        for s in SYSTEMS:
            runs[s](prepared[s]())
        nw1.memory_runs(1, start=600_000 + self.made)
        self.made += 1
        for r in range(n):
            self.progress.phase(f"peers: round {r + 1} of {n}")
            idle = self.idle(2.0)
            order = list(SYSTEMS)
            random.shuffle(order)
            for s in order:
                for _ in range(per_round):
                    samples[s].append(self.measured(partial(runs[s], prepared[s]()), idle))
            # The same loops with no durability, less the executor's idle CPU over their
            # wall time (its queue polls run in this process beside them, as in `measured`).
            mem = nw1.memory_runs(per_round, start=600_000 + self.made)
            self.made += per_round
            memory["deskhand"] += [
                max(0.0, c - idle["cpu"] * w)
                for c, w in zip(mem["cpu_s"], mem["wall_s"], strict=True)
            ]
            for _ in range(per_round):
                c0, w0 = time.process_time(), time.perf_counter()
                pw.dbos_in_memory()
                memory["dbos"].append(
                    max(0.0, time.process_time() - c0 - idle["cpu"] * (time.perf_counter() - w0))
                )
                thread = f"peer-lgm-{self.made}"
                self.made += 1
                c0, w0 = time.process_time(), time.perf_counter()
                pw.langgraph_until_approval(self.memory_graph, thread)
                pw.langgraph_resume(self.memory_graph, thread)
                memory["langgraph"].append(
                    max(0.0, time.process_time() - c0 - idle["cpu"] * (time.perf_counter() - w0))
                )
            self.progress.advance(1)
        out: dict[str, dict[str, Any]] = {}
        for s in SYSTEMS:
            cpu = median([x["cpu"] for x in samples[s]])
            mem_cpu = median(memory[s])
            out[s] = {
                "durable_cpu_per_step_ms": round((cpu - mem_cpu) * 1000 / pw.STEPS, 2),
                "process_cpu_per_step_ms": round(cpu * 1000 / pw.STEPS, 2),
                "memory_cpu_per_step_ms": round(mem_cpu * 1000 / pw.STEPS, 3),
                "commits_per_run": round(median([x["xids"] for x in samples[s]]), 1),
                "bytes_per_run": round(median([x["wal"] for x in samples[s]])),
                "rounds": n,
                "runs": len(samples[s]),
            }
        out["deskhand"]["agent_cpu_per_step_ms"] = out["deskhand"]["memory_cpu_per_step_ms"]
        return out

    # --- wake at N parked -------------------------------------------------------------------

    def wake(self, parked: int, wakes: int) -> dict[str, float | None]:
        """Park ``parked`` runs of each system at their approval, then wake ``wakes`` of them
        one at a time; the p95 of each system's wakes (ms), and as ``deskhand_decide`` the p95
        of Deskhand's ``approval_decide`` alone (the start of its wake)."""
        from dbos import DBOS

        from deskhand.infra.dbos.client import workflow_steps
        from tests.devtools.load.world import owners

        out: dict[str, float | None] = {}
        # Deskhand: decide → the run's recv returned (DBOS's clock), as the bench's parked phase.
        self.progress.phase(f"peers: parking {parked} Deskhand runs")
        ids = self.deskhand_start(self.deskhand_create(parked))
        if not until(
            lambda: all(self._pending_approval(i) for i in ids), max(300.0, parked), every=1.0
        ):
            raise RuntimeError("the Deskhand runs did not all park")
        # Timed from the decision's send, as bare DBOS's below; the person's decision before
        # it (authority, row lock, audit, commit) is Deskhand's own and printed beside it.
        lat, decided = self.inproc._wake(ids[:wakes], owners(), from_send=True)
        out["deskhand"] = round(pct(lat, 95) * 1000, 1) if lat else None
        out["deskhand_decide"] = round(pct(decided, 95) * 1000, 1) if decided else None
        # Bare DBOS: send → recv returned.
        self.progress.phase(f"peers: parking {parked} bare DBOS workflows")
        ids = self.dbos_start(parked)
        if not until(lambda: all(self._recv_parked(i) for i in ids), max(300.0, parked), every=1.0):
            raise RuntimeError("the bare DBOS workflows did not all park")
        lat = []
        for wf_id in ids[:wakes]:
            epoch = time.time()
            DBOS.send(wf_id, {"approve": True}, "approval")
            until(partial(self._workflow_done, wf_id), 30, every=0.005)
            recv = [s for s in workflow_steps(wf_id) if s["function_name"] == "DBOS.recv"]
            if recv and recv[-1]["completed_at_epoch_ms"]:
                lat.append(recv[-1]["completed_at_epoch_ms"] / 1000 - epoch)
        out["dbos"] = round(pct(lat, 95) * 1000, 1) if lat else None
        # LangGraph: nothing waits in a process; resume → the graph reaches the refund.
        self.progress.phase(f"peers: parking {parked} LangGraph threads")
        threads = [f"peer-lgw-{self.made + i}" for i in range(parked)]
        self.made += parked
        for t in threads:
            pw.langgraph_until_approval(self.graph, t)
        lat = []
        for t in threads[:wakes]:
            epoch = time.time()
            pw.langgraph_resume(self.graph, t)
            if t in pw.woke:
                lat.append(pw.woke[t] - epoch)
        out["langgraph"] = round(pct(lat, 95) * 1000, 1) if lat else None
        return out

    # --- which tables an NW-1 run writes ------------------------------------------------------

    def _table_counts(self) -> dict[str, tuple[int, int, int]]:
        rows = self.db.execute(
            "SELECT schemaname || '.' || relname, n_tup_ins, n_tup_upd, n_tup_del"
            " FROM pg_stat_user_tables"
        ).fetchall()
        return {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in rows}

    def _xact(self) -> int:
        row = self.db.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
        return int(row[0]) if row else 0

    def writes(self, runs: int) -> dict[str, Any]:
        """Rows each table took per Deskhand NW-1 run, and all commits (read-only ones too)
        per run, from the server's statistics: an idle window first, then ``runs`` runs,
        each counted once every backend has flushed (idle subtracted)."""
        self.progress.phase("peers: which tables an NW-1 run writes")
        time.sleep(STATS_FLUSH_S)
        t0, x0, c0 = time.monotonic(), self._xact(), self._table_counts()
        time.sleep(STATS_FLUSH_S)
        t1, x1, c1 = time.monotonic(), self._xact(), self._table_counts()
        ids = self.deskhand_create(runs)
        time.sleep(STATS_FLUSH_S)  # creating them is not the run's work
        t2, x2, c2 = time.monotonic(), self._xact(), self._table_counts()
        for run_id in ids:
            self.deskhand_run(run_id)
        wall = time.monotonic() - t2
        time.sleep(STATS_FLUSH_S)
        t3, x3, c3 = time.monotonic(), self._xact(), self._table_counts()
        # The idle window's counts (t0 → t1), scaled to the measured one's length.
        idle_share = (t3 - t2) / (t1 - t0)
        tables: dict[str, dict[str, float]] = {}
        for name, (ins, upd, dele) in c3.items():
            b = c2.get(name, (0, 0, 0))
            a = c0.get(name, (0, 0, 0))
            got = [
                (now - before - (idle - first) * idle_share) / runs
                for now, before, first, idle in zip(
                    (ins, upd, dele), b, a, c1.get(name, (0, 0, 0)), strict=True
                )
            ]
            if any(round(g, 1) for g in got):
                tables[name] = {
                    k: round(v, 1)
                    for k, v in zip(("ins", "upd", "del"), got, strict=True)
                    if round(v, 1)
                }
        all_commits = (x3 - x2 - (x1 - x0) * idle_share) / runs
        return {
            "tables": tables,
            "all_commits_per_run": round(all_commits, 1),
            "wall_s": round(wall, 1),
        }

    def close(self) -> None:
        self.db.close()
        self.saver.conn.close()


def run_memory_breakdown(n: int) -> dict[str, Any]:
    return nw1.breakdown(n, start=700_000)


def crash_refunds(conninfo: dict[str, Any]) -> dict[str, int]:
    """Refunds after a SIGKILL between the refund's commit and the step's record, per system.
    Needs the bench's own executor stopped (the crash sweep's workers take the queue)."""
    from tests.devtools.bench.peer_crash import crash_peer

    out = {"dbos": crash_peer("dbos", conninfo), "langgraph": crash_peer("langgraph", conninfo)}
    out["deskhand"] = crash_deskhand()
    return out


def crash_deskhand() -> int:
    from deskhand.domain.desk.models import Refund
    from tests.devtools.crash import CASES, Boundary, play, prepare_world

    case = CASES["nw1"]
    prepare_world(case)
    run, fired, _ = play(case, Boundary.parse("after_commit:issue_refund"))
    if not fired:
        raise RuntimeError("the Deskhand crash never fired")
    return Refund.objects.filter(order__reference="NW-1042", run__ticket=run.ticket).count()
