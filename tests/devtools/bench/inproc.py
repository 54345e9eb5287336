"""What one in-process executor measures: floors, steps, NW-2, pickup, throughput, parked runs.

DBOS runs in the bench's own process, launched as ``manage.py worker`` launches it
(``deskhand.engine.bootstrap.launch_executor``, persistent Django connections), so process
figures (threads, RSS, CPU) are the executor's own.

Over 400 lines because every in-process figure shares one launched executor and its probes.
"""

from __future__ import annotations

import random
import time
from functools import partial
from typing import Any

import psycopg
from django.db import close_old_connections

from tests.devtools.bench.probes import (
    BENCH_APP,
    GcClock,
    Listener,
    Progress,
    cpu_seconds,
    idle_rates,
    median,
    pct,
    rss_mb,
    settle,
    threads,
    until,
)

TERMINAL = ("succeeded", "failed", "exhausted", "cancelled")
STEP_ROUNDS = 6  # bare and agent step samples alternate in this many rounds
_registered: dict[str, Any] = {}


def register_workflows() -> dict[str, Any]:
    """The bench's own workflows; registered once, before DBOS launches."""
    if _registered:
        return _registered
    from dbos import DBOS

    from deskhand.engine.workflow import DBOSRuntime

    def noop() -> None:
        return None

    @DBOS.workflow(name="deskhand.bench.bare_steps")
    def bare_steps(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            DBOS.run_step({"name": "bench.noop"}, noop)
            out.append(time.perf_counter() - t)
        return out

    @DBOS.workflow(name="deskhand.bench.agent_steps")
    async def agent_steps(n: int) -> list[float]:
        # The very code path deskhand.engine.workflow runs every step through: DBOSRuntime.step.
        wf = DBOS.workflow_id
        assert wf is not None
        rt = DBOSRuntime(wf)
        out = []
        for _ in range(n):
            t = time.perf_counter()
            await rt.step("bench.noop", noop)
            out.append(time.perf_counter() - t)
        return out

    _registered.update(bare_steps=bare_steps, agent_steps=agent_steps)
    return _registered


def _ended(run_id: Any) -> bool:
    from agent.models import Run

    return Run.objects.filter(pk=run_id, status__in=TERMINAL).exists()


class InProcess:
    def __init__(self, conninfo: dict[str, Any], progress: Progress, out: dict[str, Any]) -> None:
        self.conninfo = conninfo
        self.progress = progress
        self.out = out
        self.listener = Listener(conninfo)
        self.lines: list[str] = []

    def say(self, line: str) -> None:
        self.lines.append(line)

    # --- floors and steps ------------------------------------------------------------

    def steps(self, samples: int) -> None:
        from dbos import DBOS

        self.progress.phase("floor: INSERT + COMMIT; bare and agent steps")
        with psycopg.connect(**self.conninfo, application_name=BENCH_APP) as conn:
            conn.execute("CREATE TABLE bench_commit (id bigserial PRIMARY KEY, v text NOT NULL)")
            conn.commit()
            commits = []
            for i in range(samples):
                t = time.perf_counter()
                conn.execute("INSERT INTO bench_commit (v) VALUES (%s)", [f"row {i}"])
                conn.commit()
                commits.append(time.perf_counter() - t)
            conn.execute("DROP TABLE bench_commit")
            conn.commit()
        wf = register_workflows()
        # Taken in alternating rounds, so a burst of load on this shared machine falls on
        # both kinds of step, not on whichever happened to be measured second.
        bare: list[float] = []
        agent: list[float] = []
        per_round = max(10, samples // STEP_ROUNDS)
        for _ in range(STEP_ROUNDS):
            bare += DBOS.start_workflow(wf["bare_steps"], per_round + 10).get_result()[10:]
            agent += DBOS.start_workflow(wf["agent_steps"], per_round + 10).get_result()[10:]
        # The ratios come from the printed (rounded) figures, so a reader dividing the two
        # numbers on the page gets the ratio beside them.
        floor_ms = round(median(commits) * 1000, 3)
        b_ms, a_ms = round(median(bare) * 1000, 3), round(median(agent) * 1000, 3)
        self.out.update(
            floor_insert_commit_ms=floor_ms,
            bare_dbos_step_ms=b_ms,
            agent_step_ms=a_ms,
            agent_step_p95_ms=round(pct(agent, 95) * 1000, 3),
            step_overhead_ratio=round(a_ms / b_ms, 2),
            bare_step_over_floor=round(b_ms / floor_ms, 1),
        )
        self.progress.advance(5)

    # --- one NW-2 run: DBOS operations per step-log row ---------------------------------

    def nw2(self) -> None:
        from agent.models import Run, Step
        from agent.providers import clear_overrides
        from agent.run.services import run_start
        from deskhand.domain.desk.models import Ticket
        from deskhand.infra.dbos.client import workflow_steps

        self.progress.phase("NW-2: DBOS operations per step-log row")
        clear_overrides()  # NW-2 on the keyless policy model, as the demo runs it
        ticket = Ticket.objects.select_related("merchant").get(reference="NW-2")
        owner = ticket.merchant.memberships.get(role="owner").user
        x0, t0 = self.xids(), time.monotonic()
        time.sleep(2.0)
        idle_rate = (self.xids() - x0 - 1) / (time.monotonic() - t0)
        x0, t0 = self.xids(), time.monotonic()
        run = run_start(ticket=ticket, user=owner)
        if not until(partial(_ended, run.pk), 120):
            raise RuntimeError(f"the NW-2 run {run.id} did not finish within 120 s")
        time.sleep(0.5)  # its last checkpoint
        commits = self.xids() - x0 - 1 - idle_rate * (time.monotonic() - t0)
        steps = workflow_steps(str(run.pk))
        rows = Step.objects.filter(run=run).count()
        names: dict[str, int] = {}
        for s in steps:
            key = "tool.*" if s["function_name"].startswith("tool.") else s["function_name"]
            names[key] = names.get(key, 0) + 1
        timed = [
            (s["started_at_epoch_ms"], s["completed_at_epoch_ms"])
            for s in steps
            if s["started_at_epoch_ms"] and s["completed_at_epoch_ms"]
        ]
        wall = (max(b for _, b in timed) - min(a for a, _ in timed)) / 1000 if timed else 0.0
        self.out.update(
            dbos_steps_per_agent_step=round(len(steps) / max(rows, 1), 2),
            nw2_dbos_steps=len(steps),
            nw2_step_rows=rows,
            nw2_wall_ms=round(wall * 1000, 1),
            nw2_status=Run.objects.get(pk=run.pk).status,
            commits_per_run=round(commits, 1),
            nw2_operations=names,
        )
        self.progress.advance(3)

    # --- pickup and throughput -----------------------------------------------------------

    def _runs(self, tickets: list[Any]) -> list[Any]:
        from agent.run.services import run_create
        from tests.devtools.load.world import owners

        who = owners()
        return [run_create(ticket=t, user=who[t.merchant_id]) for t in tickets]

    def pickup(self, samples: int, start: int, window: float = 10.0) -> None:
        """Enqueue → first step with an idle worker, one run at a time; and idle CPU first."""
        from agent.run.services import run_enqueue
        from deskhand.infra.dbos.client import client, workflow_steps
        from tests.devtools.load.world import QUICK, load_world

        self.progress.phase("idle worker CPU; enqueue → first step")
        close_old_connections()
        time.sleep(min(2.0, window))
        self.out["idle_worker_cpu_pct"] = round(
            idle_rates(cpu_seconds, self.conninfo, window)[0], 1
        )
        runs = self._runs(load_world(samples, start=start, prefix=QUICK))
        lat = []
        for run in runs:
            time.sleep(random.uniform(0.05, 0.35))  # arrive at a random point of the poll
            run_enqueue(run)
            until(partial(_ended, run.pk), 30)
            wf = client().list_workflows(
                workflow_ids=[str(run.pk)], load_input=False, load_output=False
            )[0]
            first = min(
                (
                    s["started_at_epoch_ms"]
                    for s in workflow_steps(str(run.pk))
                    if s["started_at_epoch_ms"]
                ),
                default=None,
            )
            if first is not None and wf.created_at:
                lat.append((first - wf.created_at) / 1000)
        self.out.update(
            enqueue_to_first_step_p50_ms=round(median(lat) * 1000, 1),
            enqueue_to_first_step_p95_ms=round(pct(lat, 95) * 1000, 1),
        )
        self.progress.advance(4)

    def throughput(self, n: int, start: int) -> None:
        """The same QUICK runs started directly (DBOS.start_workflow) and through the queue."""
        from dbos import DBOS, SetWorkflowID

        from agent.run.services import run_enqueue
        from deskhand.engine.workflow import run_workflow
        from tests.devtools.load.world import QUICK, load_world

        self.progress.phase(f"throughput: {n} runs direct, {n} through the queue")
        rates = {}
        for mode, offset in (("direct", 0), ("queue", n)):
            runs = self._runs(load_world(n, start=start + offset, prefix=QUICK))
            close_old_connections()
            t0 = time.perf_counter()
            if mode == "direct":
                # On DBOS's own event loop: a sync DBOS.start_workflow of an async workflow
                # holds a pool thread for the workflow's whole life, and a burst larger than
                # the pool (32) then deadlocks on its own steps' to_thread (LESSONS).
                from dbos._dbos import _get_dbos_instance

                async def start_all(ids: list[str]) -> None:
                    for wf_id in ids:
                        with SetWorkflowID(wf_id):
                            await DBOS.start_workflow_async(run_workflow)

                _get_dbos_instance()._background_event_loop.submit_coroutine(
                    start_all([str(r.pk) for r in runs])
                )
            else:
                for run in runs:
                    run_enqueue(run)
            from agent.models import Run

            ids = [r.pk for r in runs]

            def finished(ids: list[Any] = ids) -> bool:
                return Run.objects.filter(pk__in=ids, status__in=TERMINAL).count() == len(ids)

            until(finished, max(120.0, n * 2.0), every=0.1)
            rates[mode] = n / (time.perf_counter() - t0)
            self.progress.advance(4)
        direct, queued = round(rates["direct"], 2), round(rates["queue"], 2)
        self.out.update(
            runs_per_s_direct=direct,
            runs_per_s_queue=queued,
            queue_over_direct=round(queued / direct, 2),
        )

    # --- parked runs -------------------------------------------------------------------------

    def _idle(self, window: float) -> tuple[float, float, GcClock]:
        """CPU % of a core and commits/s over ``window``, and the collector's share of it."""
        with GcClock() as gc_clock:
            cpu, commits_per_s = idle_rates(cpu_seconds, self.conninfo, window)
        return cpu, commits_per_s, gc_clock

    def xids(self) -> int:
        """Transactions that wrote (each takes a transaction id), counted at once.

        ``pg_stat_database.xact_commit`` is flushed by each backend only every second or,
        idle, every ten: over a one-second run it read negative once the idle rate was
        subtracted. Every call here takes one id itself.
        """
        with psycopg.connect(**self.conninfo, autocommit=True, application_name=BENCH_APP) as c:
            row = c.execute("SELECT pg_current_xact_id()::text::bigint").fetchone()
            return int(row[0]) if row else 0

    def parked(
        self, levels: list[int], wake: int, window: float, crew: Any = None, kind: str = "approval"
    ) -> None:
        """Park runs up to each level; at each, measure what holding them costs and wake a few.

        ``kind`` is what they wait on: ``approval`` (the gate) or ``customer`` (an answer to
        ``ask_customer``; ``tests.devtools.bench.customers``), whose figures are prefixed
        ``customer_``. With a ``crew`` (``tests.devtools.bench.fleet.ParkingCrew``), worker
        processes park the runs and this executor then recovers them all; without one, this
        process starts each.
        """
        from agent.run.services import run_create, run_start
        from approvals.models import Approval
        from tests.devtools.bench import customers
        from tests.devtools.load.world import ask_world, load_world, owners

        on_customers = kind == "customer"
        series = []
        made = 0
        parked_ids: list[Any] = []
        for level in levels:
            want = level - len(parked_ids)
            self.progress.phase(f"parking runs on {kind}s: {len(parked_ids)} → {level}")
            if want > 0:
                if on_customers:
                    tickets = ask_world(want, start=customers.STARTS + made)
                else:
                    tickets = load_world(want, start=100_000 + made)
                who = owners()
                made += want
                t0 = time.perf_counter()
                if crew is None:
                    new = [run_start(ticket=t, user=who[t.merchant_id]).pk for t in tickets]
                else:
                    crew.start()  # before any run exists: a run queued late looks lost
                    new = [
                        crew.park(run_create(ticket=t, user=who[t.merchant_id])) for t in tickets
                    ]

                def count(new: list[Any] = new) -> int:
                    if on_customers:
                        return customers.parked_count(new)
                    return Approval.objects.filter(
                        status="pending", run_id__in=new, run__status="awaiting_approval"
                    ).count()

                done = 0
                deadline = time.monotonic() + max(300.0, want * 1.0)
                while time.monotonic() < deadline:
                    now = count()
                    self.progress.advance(0, f"{len(parked_ids) + now}/{level}")
                    if now == want:
                        break
                    time.sleep(1.0)
                    done = now
                else:
                    raise RuntimeError(f"only {done} of {want} runs parked on {kind}s in time")
                parked_ids += new
                rate = want / (time.perf_counter() - t0)
                if crew is not None:
                    self.progress.phase(f"recovering {want} parked runs from the parking crew")
                    self.out.setdefault(
                        "customer_crew_handover_s" if on_customers else "crew_handover_s", []
                    ).append(
                        round(
                            crew.hand_over(timeout=max(300.0, want * 0.2), held=len(parked_ids)), 1
                        )
                    )
            else:
                rate = float("nan")
            self.progress.advance(level / 200)
            close_old_connections()
            with GcClock() as settle_gc:
                settled = settle(cpu_seconds, min(window, 5.0), timeout=max(120.0, level * 0.05))
            cpu, commits, gc_clock = self._idle(window)
            woken = parked_ids[:wake]
            if on_customers:
                wakes, steps = customers.wake(woken)
            else:
                wakes, steps = self._wake(woken, owners())[0], []
            parked_ids = parked_ids[wake:]
            point = {
                "parked": level,
                "park_rate_per_s": round(rate, 1),
                "threads": threads(),
                "rss_mb": round(rss_mb(), 1),
                "idle_cpu_pct": round(cpu, 1),
                "idle_commits_per_s": round(commits, 1),
                "idle_gc_s": round(gc_clock.seconds, 3),
                "idle_full_collections": gc_clock.full,
                "settled": settled,
                "settle_gc_s": round(settle_gc.seconds, 3),
                "settle_full_collections": settle_gc.full,
                "wake_p50_ms": round(median(wakes) * 1000, 1) if wakes else None,
                "wake_p95_ms": round(pct(wakes, 95) * 1000, 1) if wakes else None,
                "wakes": len(wakes),
            }
            if on_customers:
                point["woken_statuses"] = customers.statuses(woken)
                point["next_step_p50_ms"] = round(median(steps) * 1000, 1) if steps else None
                point["next_step_p95_ms"] = round(pct(steps, 95) * 1000, 1) if steps else None
            series.append(point)
            self.progress.advance(2)
        top = series[-1]
        if on_customers:
            self.out.update(
                customer_parked_runs=top["parked"],
                customer_parked_threads=top["threads"],
                customer_parked_rss_mb=top["rss_mb"],
                customer_parked_idle_cpu_pct=top["idle_cpu_pct"],
                customer_parked_idle_commits_per_s=top["idle_commits_per_s"],
                customer_wake_p50_ms=top["wake_p50_ms"],
                customer_wake_p95_ms=top["wake_p95_ms"],
                customer_reply_to_next_step_p50_ms=top["next_step_p50_ms"],
                customer_reply_to_next_step_p95_ms=top["next_step_p95_ms"],
                customer_park_rate_per_s=series[0]["park_rate_per_s"],
                customer_parked_series=series,
            )
            # The approval series that follows starts from an executor holding nothing.
            self.progress.phase(f"answering the {len(parked_ids)} runs still parked on customers")
            self.out["customer_release_s"] = round(
                customers.release(parked_ids, timeout=max(300.0, len(parked_ids) * 0.5)), 1
            )
            self.out["customer_left_waiting"] = customers.parked_count(parked_ids)
            return
        self.out.update(
            parked_runs=top["parked"],
            parked_threads=top["threads"],
            parked_rss_mb=top["rss_mb"],
            parked_idle_cpu_pct=top["idle_cpu_pct"],
            parked_idle_commits_per_s=top["idle_commits_per_s"],
            approval_wake_p50_ms=top["wake_p50_ms"],
            approval_wake_p95_ms=top["wake_p95_ms"],
            park_rate_per_s=series[0]["park_rate_per_s"],
            parked_series=series,
        )
        mine = self.out.get("customer_parked_series")
        if mine:
            # Level by level, customers over approvals (each measured on its own).
            self.out["customer_over_approval_cpu"] = [
                round(c["idle_cpu_pct"] / a["idle_cpu_pct"], 2) if a["idle_cpu_pct"] else None
                for c, a in zip(mine, series, strict=False)
            ]
            self.out["customer_over_approval_cpu_top"] = self.out["customer_over_approval_cpu"][-1]

    def _wake(
        self, run_ids: list[Any], who: dict[int, Any], from_send: bool = False
    ) -> tuple[list[float], list[float]]:
        """Decide → the run's ``recv`` returned (DBOS's own clock), one run at a time; and
        each decision's own work, ``approval_decide`` up to its send.

        ``from_send``: the wake from the decision's send instead (``dbos_client.send_decision``
        called), as bare DBOS's wake is timed in ``bench --peers``."""
        from agent.models import Step
        from approvals.models import Approval
        from approvals.services import approval_decide
        from deskhand.infra.dbos import client as dbos_client
        from deskhand.infra.dbos.client import workflow_steps

        sent: list[float] = []
        send = dbos_client.send_decision

        def timed_send(**kw: Any) -> None:
            sent.append(time.time())
            send(**kw)

        dbos_client.send_decision = timed_send
        out, decided = [], []
        try:
            for run_id in run_ids:
                approval = Approval.objects.get(run_id=run_id, status="pending")
                requested = Step.objects.get(
                    run_id=run_id, kind="approval", tool_call_id=approval.tool_call_id
                ).seq
                sent.clear()
                epoch = time.time()
                approval_decide(
                    approval=approval, user=who[approval.merchant_id], approve=True, reason="bench"
                )
                if sent:
                    decided.append(sent[0] - epoch)
                    epoch = sent[0] if from_send else epoch
                self.listener.wait_for(f"{run_id}:{requested + 1}", 30)
                until(partial(_ended, run_id), 30, every=0.005)
                steps = workflow_steps(str(run_id))
                resume = min(
                    (s["function_id"] for s in steps if s["function_name"] == "gate.resume"),
                    default=None,
                )
                recvs = [
                    s
                    for s in steps
                    if s["function_name"] == "DBOS.recv" and resume and s["function_id"] < resume
                ]
                if recvs and recvs[-1]["completed_at_epoch_ms"]:
                    out.append(recvs[-1]["completed_at_epoch_ms"] / 1000 - epoch)
        finally:
            dbos_client.send_decision = send
        return out, decided

    def close(self) -> None:
        self.listener.close()
