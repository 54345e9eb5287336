"""What needs real worker processes: one and two workers' throughput, SIGKILL to resume, takeover.

Workers are ``python -m tests.devtools.load.worker`` (a real ``manage.py worker`` with the load
model) on the scratch database; their logs go to a temporary folder, never the tree.
CPU is read per process (psutil) for the workers and for the Postgres server when it
is the embedded one, so the bench can say which of the two is the limit.

Over 400 lines because each figure needs its own choreography of real worker processes; they
share one harness (start, kill, read CPU) best kept beside them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psutil

from tests.devtools.bench.probes import Listener, Progress, commits, idle_rates, settle, until

ROOT = Path(__file__).resolve().parents[3]


def database_url(server: dict[str, Any], dbname: str) -> str:
    host = str(server.get("host") or "127.0.0.1")
    auth = quote(str(server.get("user") or "postgres"), safe="")
    if server.get("password"):
        auth += ":" + quote(str(server["password"]), safe="")
    port = f":{server['port']}" if server.get("port") else ""
    return f"postgresql://{auth}@{quote(host, safe='')}{port}/{dbname}"


def postgres_processes(server: dict[str, Any]) -> list[psutil.Process]:
    """The embedded server's processes (its socket directory is its data folder), else none."""
    host = str(server.get("host") or "")
    pidfile = Path(host) / "postmaster.pid" if host.startswith("/") else None
    if pidfile is None or not pidfile.exists():
        return []
    try:
        master = psutil.Process(int(pidfile.read_text().split()[0]))
        return [master, *master.children(recursive=True)]
    except (psutil.Error, ValueError, OSError):
        return []


def cpu_of(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


class Worker:
    def __init__(self, executor_id: str, env: dict[str, str], logs: Path, nice: int = 0) -> None:
        self.executor_id = executor_id
        self.nice = nice  # a CPU priority below the bench's own (os.nice), 0: the same
        self.env = env
        self.log = logs / f"{executor_id}.log"
        self.proc: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 90) -> float:
        """Start it; seconds until it printed its ready line."""
        t0 = time.perf_counter()
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.devtools.load.worker", self.executor_id],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                preexec_fn=(lambda: os.nice(self.nice)) if self.nice else None,
            )

        def ready() -> bool:
            with self.log.open() as fh:
                fh.seek(offset)
                return f"worker {self.executor_id} ready" in fh.read()

        if not until(ready, timeout, every=0.05):
            raise RuntimeError(
                f"bench worker {self.executor_id} did not start:\n{self.log.read_text()[-2000:]}"
            )
        return time.perf_counter() - t0

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid


class Fleet:
    def __init__(
        self,
        server: dict[str, Any],
        dbname: str,
        conninfo: dict[str, Any],
        logs: Path,
        progress: Progress,
        out: dict[str, Any],
    ) -> None:
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url(server, dbname),
            "PYTHONUNBUFFERED": "1",
            "DESKHAND_LOG_LEVEL": "WARNING",
            # Three processes on one server with Postgres's default 100 connections: each
            # worker may hold a persistent connection per step thread (docs/fleet.md).
            "DESKHAND_MAX_EXECUTOR_THREADS": os.environ.get("DESKHAND_MAX_EXECUTOR_THREADS", "20"),
        }
        self.server = server
        self.conninfo = conninfo
        self.logs = logs
        self.progress = progress
        self.out = out
        self.workers: dict[str, Worker] = {}

    def worker(self, executor_id: str) -> Worker:
        if executor_id not in self.workers:
            self.workers[executor_id] = Worker(executor_id, self.env, self.logs)
        return self.workers[executor_id]

    def stop_all(self) -> None:
        for w in self.workers.values():
            w.stop()

    # --- throughput ----------------------------------------------------------------------

    def _burst(self, n: int, start: int, pids: list[int]) -> tuple[float, float, float]:
        """Enqueue ``n`` QUICK runs at once; (runs/s, workers' CPU cores, Postgres's CPU cores)."""
        from agent.models import Run
        from agent.run.services import run_create, run_enqueue
        from tests.devtools.load.world import QUICK, load_world, owners

        who = owners()
        runs = [
            run_create(ticket=t, user=who[t.merchant_id])
            for t in load_world(n, start=start, prefix=QUICK)
        ]
        procs = [psutil.Process(p) for p in pids]
        pg = postgres_processes(self.server)
        c0 = commits(self.conninfo)
        w0, p0, t0 = cpu_of(procs), cpu_of(pg), time.perf_counter()
        for run in runs:
            run_enqueue(run)
        ids = [r.pk for r in runs]
        until(
            lambda: Run.objects.filter(pk__in=ids, status__in=("succeeded", "failed")).count() == n,
            max(180.0, n * 2.0),
            every=0.2,
        )
        dt = time.perf_counter() - t0
        self.last_commits = commits(self.conninfo) - c0
        pg = postgres_processes(self.server) or pg
        return n / dt, (cpu_of(procs) - w0) / dt, (cpu_of(pg) - p0) / dt if pg else float("nan")

    def throughput(self, n: int, start: int) -> None:
        self.progress.phase("fleet: one worker, then two, each a burst of queued runs")
        one = self.worker("bench-w1")
        one.start()
        r1, w1cpu, pg1 = self._burst(n, start, [one.pid])
        self.progress.advance(6)
        two = self.worker("bench-w2")
        two.start()
        r2, w2cpu, pg2 = self._burst(n, start + n, [one.pid, two.pid])
        commits2 = self.last_commits
        self.progress.advance(6)
        r1, r2 = round(r1, 2), round(r2, 2)  # the ratio is of the figures printed
        self.out.update(
            runs_per_s_1_worker=r1,
            runs_per_s_2_workers=r2,
            two_workers_over_one=round(r2 / r1, 2),
            workers_cpu_cores_1=round(w1cpu, 2),
            workers_cpu_cores_2=round(w2cpu, 2),
            postgres_cpu_cores_1=round(pg1, 2),
            postgres_cpu_cores_2=round(pg2, 2),
            commits_per_quick_run=round(commits2 / n, 1),
            # What Postgres spent per commit, as commits per second per core it used.
            postgres_commits_per_core_s=round(commits2 / n * r2 / pg2, 0)
            if pg2 == pg2 and pg2
            else None,
        )

    # --- a restart with everything the in-process phase left parked --------------------------

    def drop_leftovers(self) -> None:
        """Close the connections the stopped in-process executor's step threads still hold
        (persistent Django connections outlive DBOS's shutdown until their threads are
        collected); with them, two workers do not fit Postgres's default 100."""
        import psycopg

        with psycopg.connect(**self.conninfo, autocommit=True) as c:
            c.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s"
                " AND pid <> pg_backend_pid() AND application_name = ''",
                [self.conninfo["dbname"]],
            )

    def restart_with_parked(
        self, executor_id: str, listener: Listener, decide: int, window: float
    ) -> None:
        """The in-process executor is gone, its parked runs PENDING under its id (as after a
        SIGKILL). Decide a few while nothing runs, start a worker with that id, time until
        each decision took effect (its gate.resume committed) and until all re-parked; then
        what the worker costs holding them (``_worker_idle``)."""
        import random

        from django.db import connection

        from agent.models import Step
        from approvals.models import Approval
        from approvals.services import approval_decide
        from tests.devtools.load.world import owners

        self.progress.phase("fleet: restart a worker holding every parked run")
        pending = list(
            Approval.objects.filter(status="pending", run__status="awaiting_approval").values_list(
                "pk", flat=True
            )
        )
        parked = len(pending)
        who = owners()
        marks = []
        for pk in random.Random(7).sample(pending, min(decide, parked)):
            a = Approval.objects.get(pk=pk)
            seq = Step.objects.get(run=a.run_id, kind="approval", tool_call_id=a.tool_call_id).seq
            approval_decide(approval=a, user=who[a.merchant_id], approve=True, reason="bench")
            marks.append(f"{a.run_id}:{seq + 1}")
        w = self.worker(executor_id)
        t0 = time.perf_counter()
        ready = w.start(timeout=300)
        took = [listener.wait_for(m, 120) for m in marks]

        def left() -> int:
            with connection.cursor() as cur:
                cur.execute(
                    "SELECT count(*) FROM dbos.workflow_status WHERE status = 'ENQUEUED'"
                    " OR executor_id LIKE %s",
                    ["%#staged"],
                )
                return int(cur.fetchone()[0])

        until(lambda: left() == 0, max(120.0, parked * 0.2), every=0.5)
        all_s = time.perf_counter() - t0
        self._worker_idle(w, parked - len(marks), window)
        self.out.update(
            restart_parked_runs=parked,
            restart_ready_s=round(ready, 2),
            restart_decision_s=round(
                max((t - t0 - ready for t in took if t), default=float("nan")), 2
            )
            if all(took)
            else None,
            restart_all_handed_back_s=round(all_s - ready, 1),
        )
        w.stop()
        with connection.cursor() as cur:  # abandon the rest: the fleet figures start clean
            cur.execute(
                "UPDATE dbos.workflow_status SET status = 'CANCELLED'"
                " WHERE status IN ('PENDING', 'ENQUEUED')"
            )
            cur.execute(
                "UPDATE agent_run SET status = 'cancelled', stop_reason = 'cancelled'"
                " WHERE status IN ('queued', 'running', 'awaiting_approval')"
            )
        self.progress.advance(5)

    def _worker_idle(self, w: Worker, held: int, window: float) -> None:
        """A real ``manage.py worker`` holding ``held`` parked runs: its threads, RSS and
        CPU over ``window`` seconds once it has settled (the in-process figures leave out
        the worker's own loop: lease, takeover scan, reconciler).

        Handed back is not yet re-parked: each run replays to its gate after it is
        dequeued, so the window starts once the worker has settled (``probes.settle``).
        """
        assert w.proc is not None
        proc = psutil.Process(w.proc.pid)

        def cpu() -> float:
            t = proc.cpu_times()
            return float(t.user + t.system)

        settled = settle(cpu, min(window, 5.0), timeout=max(120.0, held * 0.1))
        cpu_pct, commits_per_s = idle_rates(cpu, self.conninfo, window)
        self.out.update(
            worker_parked_runs=held,
            worker_parked_settled=settled,
            worker_parked_threads=proc.num_threads(),
            worker_parked_rss_mb=round(proc.memory_info().rss / 1024 / 1024, 1),
            worker_parked_idle_cpu_pct=round(cpu_pct, 1),
            worker_parked_idle_commits_per_s=round(commits_per_s, 1),
        )

    # --- SIGKILL → resumed, and takeover -----------------------------------------------------

    def _park_one(self, start: int) -> Any:
        from agent.run.services import run_start
        from approvals.models import Approval
        from tests.devtools.load.world import load_world, owners

        who = owners()
        (ticket,) = load_world(1, start=start)
        run = run_start(ticket=ticket, user=who[ticket.merchant_id])
        if not until(
            lambda: (
                Approval.objects.filter(run=run, status="pending").exists()
                and _executor_and_status(run.pk)[1] == "PENDING"
            ),
            60,
            every=0.05,
        ):
            raise RuntimeError(f"run {run.pk} did not park")
        time.sleep(0.5)  # its recv is waiting
        return run

    def kill_to_resume(self, listener: Listener, start: int) -> None:
        """SIGKILL the worker holding a parked run, decide while it is down, restart it:
        seconds from the kill until the run's next step committed."""
        from agent.models import Step
        from approvals.models import Approval
        from approvals.services import approval_decide
        from tests.devtools.load.world import owners

        self.progress.phase("fleet: SIGKILL a worker, restart it, time until its run resumes")
        self.worker("bench-w2").stop()
        w1 = self.worker("bench-w1")
        run = self._park_one(start)
        approval = Approval.objects.get(run=run, status="pending")
        seq = Step.objects.get(run=run, kind="approval", tool_call_id=approval.tool_call_id).seq
        t0 = time.perf_counter()
        w1.kill()
        approval_decide(approval=approval, user=owners()[run.merchant_id], approve=True)
        ready = w1.start()
        seen = listener.wait_for(f"{run.pk}:{seq + 1}", 60)
        self.out.update(
            kill_to_resume_s=round(seen - t0, 2) if seen else None,
            restart_to_ready_s=round(ready, 2),
        )
        self.progress.advance(5)

    def takeover(self, start: int) -> None:
        """Kill a worker that (as far as the registry says) ran on another host: seconds until
        a live worker has its parked run waiting again. Includes the grace period."""
        from django.db import connection

        self.progress.phase("fleet: a worker dies for good; time until another took its run over")
        w1 = self.worker("bench-w1")
        run = self._park_one(start)
        w2 = self.worker("bench-w2")
        w2.start()
        with connection.cursor() as cur:  # as if bench-w1 had run on another machine
            cur.execute(
                "UPDATE fleet_worker SET host = 'elsewhere||' WHERE executor_id = 'bench-w1'"
            )
        t0 = time.perf_counter()
        w1.kill()
        ok = until(lambda: _executor_and_status(run.pk) == ("bench-w2", "PENDING"), 90, 0.05)
        self.out["takeover_s"] = round(time.perf_counter() - t0, 2) if ok else None
        from django.conf import settings

        self.out["takeover_grace_s"] = settings.DESKHAND_TAKEOVER_GRACE_SEC
        self.progress.advance(5)


def _executor_and_status(run_id: Any) -> tuple[str, str]:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT executor_id, status FROM dbos.workflow_status WHERE workflow_uuid = %s",
            [str(run_id)],
        )
        row = cur.fetchone()
    return (row[0], row[1]) if row else ("", "")


class ParkingCrew:
    """Park thousands of runs faster than one process can, for the bench process to hold.

    Parking is CPU work in Python (a run's turns, tools and gate request: ~0.4 s of a core
    each), so one process parks ~2.5 runs a second and 10,000 would take over an hour. Here
    ``k`` load workers take the runs from the queue alongside the bench's own executor; once
    every run waits at its gate they are SIGKILLed and the bench process recovers their
    workflows as a takeover would (``recover_executor``), so what is measured afterwards —
    threads, RSS, idle CPU, wake latency — is one executor holding every parked run.
    """

    def __init__(self, fleet: Fleet, k: int, holder: str) -> None:
        # Fewer connections than a fleet worker: the bench process beside them will hold
        # thousands of runs, and the embedded server allows 100 clients in all.
        fleet.env.update(DESKHAND_MAX_EXECUTOR_THREADS="8", DESKHAND_SYS_DB_POOL="4")
        self.fleet = fleet
        self.ids = [f"bench-park-{i + 1}" for i in range(k)]
        self.holder = holder

    def start(self) -> None:
        """Start the crew (again, after a hand-over)."""
        for executor_id in self.ids:
            worker = self.fleet.worker(executor_id)
            if worker.proc is None or worker.proc.poll() is not None:
                worker.start()

    def stop(self) -> None:
        self.fleet.stop_all()

    def park(self, run: Any) -> Any:
        """Queue a just-created run for the crew (and this executor); its id."""
        from agent.run.services import run_enqueue

        run_enqueue(run)
        return run.pk

    def hand_over(self, timeout: float, held: int) -> float:
        """Kill the crew, recover its workflows here; seconds until this executor holds all
        ``held`` parked runs, each back in its ``recv`` (not merely claimed: replaying a run
        to its gate is CPU work that would otherwise leak into the idle and wake figures)."""
        from django.conf import settings

        from deskhand.engine.workarounds.executor_recovery import recover_executor
        from deskhand.engine.workarounds.recv_recheck import waiting_recvs

        for executor_id in self.ids:
            self.fleet.worker(executor_id).kill()
        t0 = time.perf_counter()
        for executor_id in self.ids:
            recover_executor(executor_id, settings.DESKHAND_APP_VERSION)
        if not until(lambda: self._elsewhere() == 0, timeout, every=0.5):
            raise RuntimeError(f"{self._elsewhere()} workflows not recovered in {timeout:.0f} s")
        if not until(lambda: waiting_recvs() >= held, timeout, every=0.5):
            raise RuntimeError(f"only {waiting_recvs()} of {held} runs waiting again")
        return time.perf_counter() - t0

    def _elsewhere(self) -> int:
        """Workflows still queued, or pending under an executor other than the holder."""
        from django.db import connection

        with connection.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM dbos.workflow_status WHERE status = 'ENQUEUED'"
                " OR (status = 'PENDING' AND executor_id <> %s)",
                [self.holder],
            )
            return int(cur.fetchone()[0])
