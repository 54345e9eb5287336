"""``python manage.py bench [--quick] [--json] [--write-docs]``: the costs, measured in one run.

Works in a scratch database it creates on the configured server
(``deskhand_bench_<random>``), migrates and seeds, and drops at the end (also on failure).
First an in-process executor, configured as ``manage.py worker`` runs it, measures the
floor (one INSERT + COMMIT), a bare DBOS step and an agent step, one NW-2 run, pickup
latency, then (through a real ``manage.py web`` on a free port) a help-desk webhook →
ticket stored and ``POST /api/v1/runs`` → first step, direct vs queued throughput and
parked runs at several counts (with ``--customers``, first the same counts parked on a
customer's answer, then on approvals); then real worker processes measure one and two workers' throughput, SIGKILL to resume and takeover.
It prints figures beside the floor, never pass/fail; ``--json`` makes the last line one
JSON object; ``--write-docs`` rewrites the default run's section of docs/benchmarks.md and
its chart (``tests/devtools/bench/report.py``), and without it nothing in the tree is
touched. Definitions, commands and the latest values: docs/benchmarks.md.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.db import connections

from deskhand.domain.cli import DeskhandCommand, UsageError
from tests.devtools.bench.probes import BENCH_APP, Progress, machine

QUICK: dict[str, Any] = {
    "parked": [100, 300],
    "wake": 15,
    "samples": 100,
    "runs": 30,
    "pickup": 25,
    "api": 8,
}
FULL: dict[str, Any] = {
    "parked": [1000, 5000, 10000],
    "wake": 40,
    "samples": 300,
    "runs": 100,
    "pickup": 60,
    "api": 40,
}


def _levels(text: str) -> list[int]:
    try:
        levels = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"--parked takes counts like 100,500; not {text!r}.") from None
    if not levels or levels[0] < 1:
        raise UsageError("--parked counts must be at least 1.")
    return levels


class Command(DeskhandCommand):
    not_done = "the benchmark did not run to the end"
    help = "Measure durability's and the fleet's costs in a scratch database (docs/benchmarks.md)."
    # Only the server is needed: the configured database itself may not even exist.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--quick", action="store_true", help="a smaller run, under 5 minutes")
        parser.add_argument("--json", action="store_true", help="the last line is one JSON object")
        parser.add_argument(
            "--write-docs",
            action="store_true",
            help="rewrite the default run's section of docs/benchmarks.md and its chart from this run",
        )
        parser.add_argument(
            "--parked", default=None, metavar="N,N", help="parked-run counts to measure at"
        )
        parser.add_argument("--wake", type=int, default=None, help="runs woken per parked count")
        parser.add_argument(
            "--customers",
            action="store_true",
            help="also park the same counts on a customer's answer, measured before the approvals",
        )
        parser.add_argument(
            "--samples", type=int, default=None, help="samples for the step figures"
        )
        parser.add_argument("--runs", type=int, default=None, help="runs per throughput burst")
        parser.add_argument("--pickup", type=int, default=None, help="runs for pickup latency")
        parser.add_argument(
            "--api",
            type=int,
            default=None,
            metavar="N",
            help="webhooks and API-started runs through a real web process (default 40; 8 with --quick)",
        )
        parser.add_argument(
            "--window",
            type=float,
            default=None,
            metavar="S",
            help="seconds per idle measurement (default 60; 10 with --quick)",
        )
        parser.add_argument("--no-fleet", action="store_true", help="skip the worker processes")
        parser.add_argument(
            "--park-workers",
            type=int,
            default=0,
            metavar="K",
            help="park runs through K worker processes, then hold them all here (for 10,000)",
        )
        parser.add_argument(
            "--model-calls",
            action="store_true",
            help="only the rate-limit overhead: a plain model step vs a child on a limited queue",
        )
        parser.add_argument(
            "--inbound",
            action="store_true",
            help="only inbound mail: what a message costs to parse, store and process, and"
            " arrival → answer and → first step through a real SMTP receiver and worker",
        )
        parser.add_argument(
            "--burst",
            type=int,
            default=200,
            metavar="N",
            help="with --inbound: messages sent at once by concurrent SMTP clients (default 200)",
        )
        parser.add_argument(
            "--clients",
            type=int,
            default=os.cpu_count() or 2,
            metavar="N",
            help="with --inbound: concurrent SMTP clients sending the burst (default: the"
            " machine's cores; 20 is Postfix's most to one destination, and past the cores a"
            " sender that never pauses queues at the receiver's CPU whatever it does)",
        )
        parser.add_argument(
            "--peers",
            action="store_true",
            help="only the NW-1 shaped workload on Deskhand, bare DBOS and LangGraph, interleaved",
        )
        parser.add_argument(
            "--rounds", type=int, default=None, help="interleaved rounds for --peers (at least 5)"
        )
        parser.add_argument(
            "--loop",
            action="store_true",
            help="only Deskhand's own work per step: NW-1 shaped runs on MemoryRuntime"
            " (--runs of them, 5 with --quick, else 20), no executor",
        )
        parser.add_argument(
            "--profile",
            default=None,
            metavar="FILE",
            help="with --loop: write cProfile statistics of the runs to FILE (pstats)",
        )
        parser.add_argument(
            "--sites",
            action="store_true",
            help="with --loop: also charge each run's SQL CPU to the lines of ours that asked",
        )
        parser.add_argument("--keep", action="store_true", help="keep the scratch database")

    def handle(self, *args: Any, **opts: Any) -> None:
        plan = dict(QUICK if opts["quick"] else FULL)
        if opts["parked"]:
            plan["parked"] = _levels(opts["parked"])
        if opts["park_workers"] < 0:
            raise UsageError("--park-workers must be 0 or more.")
        for key in ("wake", "samples", "runs", "pickup", "api"):
            if opts[key] is not None:
                if opts[key] < (0 if key == "wake" else 1):
                    raise UsageError(f"--{key} must be at least {0 if key == 'wake' else 1}.")
                plan[key] = opts[key]
        if opts["rounds"] is not None and opts["rounds"] < 1:
            raise UsageError("--rounds must be at least 1.")
        if opts["profile"] and not opts["loop"]:
            raise UsageError("--profile profiles the loop alone: give it with --loop.")
        if opts["sites"] and not opts["loop"]:
            raise UsageError("--sites tallies the loop alone: give it with --loop.")
        if opts["burst"] < 1:
            raise UsageError("--burst must be at least 1.")
        if opts["clients"] < 1:
            raise UsageError("--clients must be at least 1.")
        if opts["loop"] and opts["peers"]:
            raise UsageError("--loop and --peers are two different runs: give one of them.")
        self.opts, self.plan = opts, plan
        logging.getLogger("dbos").setLevel(logging.ERROR)
        logging.getLogger("deskhand.events").setLevel(logging.WARNING)
        # A line per stored customer message (``--customers`` stores thousands).
        logging.getLogger("agent.customer.route").setLevel(logging.WARNING)
        base = connections["default"].settings_dict
        if base["ENGINE"] == "deskhand.infra.embedded_db":
            from deskhand.infra import embedded_pg

            embedded_pg.ensure_running()
        self.server: dict[str, Any] = {
            k: v
            for k, v in {
                "host": base.get("HOST") or None,
                "port": int(base["PORT"]) if base.get("PORT") else None,
                "user": base.get("USER") or None,
                "password": base.get("PASSWORD") or None,
            }.items()
            if v is not None
        }
        original = base["NAME"]
        scratch = f"deskhand_bench_{secrets.token_hex(4)}"
        admin, error = None, ""
        for dbname in (original, "postgres", "template1"):
            try:
                admin = psycopg.connect(
                    **self.server, dbname=dbname, autocommit=True, application_name=BENCH_APP
                )
                break
            except psycopg.Error as exc:
                error = str(exc).strip().splitlines()[0]
        if admin is None:
            raise UsageError(f"cannot reach the database server: {error}.")
        t0 = time.monotonic()
        with admin:
            try:
                admin.execute(f'CREATE DATABASE "{scratch}"')
            except psycopg.Error as exc:
                raise UsageError(
                    f"cannot create a scratch database: {str(exc).strip().splitlines()[0]}."
                ) from None
            try:
                with self._pointed_at(scratch, original):
                    results = self._bench(scratch)
            finally:
                if opts["keep"]:
                    self.stderr.write(f"kept the scratch database {scratch}")
                else:
                    admin.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')
        results["wall_s"] = round(time.monotonic() - t0, 1)
        results["load_end"] = round(os.getloadavg()[0], 1)
        self._print(results)
        if opts["write_docs"]:
            import sys

            from tests.devtools.bench.report import write

            command = "python manage.py " + " ".join(sys.argv[1:])
            for path in write(results, Path(settings.BASE_DIR) / "docs", command):
                self.stdout.write(f"wrote {path.relative_to(settings.BASE_DIR)}")
        if opts["json"]:
            # With --peers (--loop) the last line is the comparison (the loop) alone, for a script.
            last = next(({k: results[k]} for k in ("peers", "loop") if k in results), results)
            self.stdout.write(json.dumps(last, default=str))

    @contextmanager
    def _pointed_at(self, scratch: str, original: str) -> Iterator[None]:
        """Django (every thread's new connections) and DBOS on the scratch database, then back."""
        connections.close_all()
        db = settings.DATABASES["default"]
        age = db.get("CONN_MAX_AGE")
        db["NAME"] = connections["default"].settings_dict["NAME"] = scratch
        # As the worker runs: persistent connections (unless the environment says otherwise).
        if "DESKHAND_CONN_MAX_AGE" not in os.environ:
            db["CONN_MAX_AGE"] = connections["default"].settings_dict["CONN_MAX_AGE"] = 60
        self.launched = False
        self.lease: Any = None
        try:
            call_command("migrate", verbosity=0, interactive=False)
            call_command("seed", verbosity=0)
            yield
        finally:
            from agent.providers import clear_overrides
            from deskhand.infra.dbos.client import close_clients

            clear_overrides()
            self._stop_executor()
            close_clients()
            connections.close_all()
            db["NAME"] = connections["default"].settings_dict["NAME"] = original
            db["CONN_MAX_AGE"] = connections["default"].settings_dict["CONN_MAX_AGE"] = age

    def _idle_window(self) -> float:
        """Seconds each idle figure is averaged over. The default spans the worker's 30-s
        recv sweep twice: a 10-s window (the parked levels' until 2026-12-03) could fall
        between sweeps and leave out a periodic cost."""
        window = self.opts["window"]
        return float(window) if window else (10.0 if self.opts["quick"] else 60.0)

    def _stop_executor(self) -> None:
        if self.launched:
            from deskhand.engine.bootstrap import stop_executor

            logging.getLogger("dbos").setLevel(logging.CRITICAL)
            stop_executor(workflow_completion_timeout_sec=0)
            self.launched = False
        if self.lease is not None:  # the fleet phase restarts a worker under this id
            self.lease.release()
            self.lease = None

    def _bench(self, scratch: str) -> dict[str, Any]:
        from importlib.metadata import version

        from agent.providers import install_override
        from deskhand.engine.bootstrap import launch_executor
        from deskhand.infra.fleet.lease import Lease
        from deskhand.infra.fleet.lease import install as install_lease
        from tests.devtools.bench.fleet import Fleet, ParkingCrew
        from tests.devtools.bench.inproc import InProcess, register_workflows
        from tests.devtools.bench.model_calls import measure as measure_model_calls
        from tests.devtools.bench.model_calls import register as register_model_calls
        from tests.devtools.load.world import LoadProvider

        plan = self.plan
        fleet_work = 0 if self.opts["no_fleet"] else 33
        parked_work = sum(plan["parked"]) / 200 + 2 * len(plan["parked"])
        kinds = 2 if self.opts["customers"] else 1
        progress = Progress(15 + 4 + 8 + 2 + kinds * parked_work + fleet_work)
        with connections["default"].cursor() as cur:
            cur.execute("SHOW server_version")
            pg = f"Postgres {cur.fetchone()[0]}"
        from tests.devtools.bench import without

        out: dict[str, Any] = {
            "without": without.apply(),  # DESKHAND_BENCH_WITHOUT (docs/benchmarks.md)
            "machine": machine(),
            "postgres": pg,
            "dbos": version("dbos"),
            "app_version": settings.DESKHAND_APP_VERSION,
            "scratch_database": scratch,
            "queue_poll_s": settings.DESKHAND_QUEUE_POLL_SEC,
            "heartbeat_s": settings.DESKHAND_HEARTBEAT_SEC,
            "takeover_grace_s": settings.DESKHAND_TAKEOVER_GRACE_SEC,
            "recv_recheck_s": settings.DESKHAND_RECV_RECHECK_SEC,
            "recv_sweep_s": settings.DESKHAND_RECV_SWEEP_SEC,
            "conn_max_age": settings.DATABASES["default"].get("CONN_MAX_AGE"),
            "plan": {k: v for k, v in plan.items()},
            "idle_window_s": self._idle_window(),
            # Measured only with worker processes (not with --no-fleet).
            "runs_per_s_2_workers": None,
            "kill_to_resume_s": None,
            "takeover_s": None,
        }
        conninfo: dict[str, Any] = {**self.server, "dbname": scratch}
        register_workflows()
        register_model_calls()
        if self.opts["peers"]:
            from tests.devtools.bench.peer_workloads import register_dbos

            register_dbos(conninfo)
        if self.opts["loop"]:
            from tests.devtools.bench.nw1 import loop_figures

            runs = self.opts["runs"] or (5 if self.opts["quick"] else 20)
            out["loop"] = loop_figures(runs, profile=self.opts["profile"])
            if self.opts["sites"]:
                from tests.devtools.bench.sql_sites import sql_sites

                out["loop"]["sql"] = sql_sites(min(runs, 10), start=850_000)
            return out
        install_override("*", LoadProvider())
        executor_id = f"bench-{scratch[-8:]}"
        # The executor holds its id's lease, as a worker does: without it the parking crew's
        # takeover scans find this executor "dead" and re-run its parked runs, and each run
        # it loses keeps a coroutine here polling for the outcome once a second.
        self.lease = Lease.from_settings(executor_id)
        self.lease.acquire(wait=0)
        install_lease(self.lease)
        self.lease.start()
        launch_executor(executor_id, log_level="ERROR")
        self.launched = True
        if self.opts["model_calls"]:
            out["model_calls"] = measure_model_calls(plan["samples"])
            return out
        if self.opts["inbound"]:
            from tests.devtools.bench.inbound import measure as measure_inbound

            # Intake is measured through a worker process: nothing here may take its queue.
            self._stop_executor()
            try:
                out["inbound"] = measure_inbound(
                    plan["samples"],
                    self.opts["burst"],
                    clients=self.opts["clients"],
                    server=self.server,
                    dbname=scratch,
                    progress=progress,
                )
            finally:
                progress.close()
            return out
        inproc = InProcess(conninfo, progress, out)
        if self.opts["peers"]:
            try:
                out["peers"] = self._peers(conninfo, inproc, progress)
            finally:
                inproc.close()
                progress.close()
            return out
        try:
            inproc.steps(plan["samples"])
            inproc.nw2()
            install_override("*", LoadProvider())
            inproc.pickup(plan["pickup"], start=1, window=self._idle_window())
            self._api(scratch, progress, out)
            inproc.throughput(plan["runs"], start=10_000)
            crew = None
            if self.opts["park_workers"]:
                logs = Path(tempfile.mkdtemp(prefix="deskhand-bench-park-"))
                parkers = Fleet(self.server, scratch, conninfo, logs, progress, out)
                crew = ParkingCrew(parkers, self.opts["park_workers"], holder=executor_id)
                out["park_workers"] = self.opts["park_workers"]
            try:
                # Customers first: they are all answered before the approval series, whose
                # runs the fleet phase below restarts with.
                for kind in ("customer", "approval")[2 - kinds :]:
                    inproc.parked(
                        plan["parked"],
                        plan["wake"],
                        window=self._idle_window(),
                        crew=crew,
                        kind=kind,
                    )
            finally:
                if crew is not None:
                    crew.stop()
            self._stop_executor()
            if not self.opts["no_fleet"]:
                logs = Path(tempfile.mkdtemp(prefix="deskhand-bench-"))
                fleet = Fleet(self.server, scratch, conninfo, logs, progress, out)
                try:
                    from django.db import connections as dj

                    dj.close_all()
                    fleet.drop_leftovers()
                    fleet.restart_with_parked(
                        executor_id, inproc.listener, decide=5, window=self._idle_window()
                    )
                    fleet.throughput(plan["runs"], start=20_000)
                    fleet.kill_to_resume(inproc.listener, start=30_000)
                    fleet.takeover(start=30_100)
                finally:
                    fleet.stop_all()
        finally:
            inproc.close()
            progress.close()
        return out

    def _api(self, scratch: str, progress: Any, out: dict[str, Any]) -> None:
        """Webhook → ticket stored and API start → first step, over ``manage.py web``."""
        from tests.devtools.bench import api

        logs = Path(tempfile.mkdtemp(prefix="deskhand-bench-web-"))
        web = api.WebProcess(self.server, scratch, logs)
        try:
            api.measure(web, self.plan["api"], start=5_000, progress=progress, out=out)
        finally:
            web.stop()

    def _peers(self, conninfo: dict[str, Any], inproc: Any, progress: Any) -> dict[str, Any]:
        """``--peers``: the three systems interleaved, then the wake and crash rows."""
        from agent.providers import install_override
        from tests.devtools.bench.nw1 import NW1Provider
        from tests.devtools.bench.peers import Peers, crash_refunds, run_memory_breakdown

        quick = self.opts["quick"]
        rounds = self.opts["rounds"] or 5
        parked = self.plan["parked"][-1] if self.opts["parked"] else (20 if quick else 500)
        wakes = self.opts["wake"] if self.opts["wake"] is not None else (10 if quick else 40)
        install_override("*", NW1Provider())
        progress.total = rounds + 10
        peers = Peers(conninfo, inproc, progress)
        try:
            out = peers.rounds(rounds, per_round=1 if quick else 2)
            woke = peers.wake(parked, min(wakes, parked))
            out["deskhand"]["wake_decide_p95_ms"] = woke.pop("deskhand_decide")
            for system, p95 in woke.items():
                out[system]["wake_p95_ms"] = p95
                out[system]["parked"] = parked
            out["deskhand"].update(peers.writes(2 if quick else 5))
        finally:
            peers.close()
        out["deskhand"]["steps"] = run_memory_breakdown(2 if quick else 5)["steps"]
        self._stop_executor()  # the crash rows run their own workers
        for system, refunds in crash_refunds(conninfo).items():
            out[system]["crash_refunds"] = refunds
        return out

    def _print_loop(self, loop: dict[str, Any]) -> None:
        w = self.stdout.write
        w(
            f"NW-1 shaped loop on MemoryRuntime, {loop['runs']} runs (median):"
            f" {loop['agent_cpu_per_step_ms']} ms CPU per step (target ≤ 4),"
            f" {loop['wall_per_step_ms']} ms wall; load {loop['load']}"
        )
        w(f"{'step (per run)':<16}{'calls':>7}{'cpu ms':>9}{'stmts':>7}{'xacts':>7}{'writing':>9}")
        for name, f in loop["steps"].items():
            w(
                f"{name:<16}{f['calls']:>7}{f['cpu_ms']:>9}{f['statements']:>7}"
                f"{f['transactions']:>7}{f['writing']:>9}"
            )

        if "sql" in loop:
            q = loop["sql"]
            w(
                f"SQL per run, client CPU: {q['sql_cpu_ms_per_run']} ms over"
                f" {q['statements_per_run']} statements, {q['compiles_per_run']} querysets compiled"
            )
            w(f"{'stmts':>6}{'compile':>9}{'execute':>9}  site (ms per run)")
            for site in q["sites"]:
                w(
                    f"{site['statements']:>6}{site['compile_ms']:>9}{site['execute_ms']:>9}"
                    f"  {site['site']}"
                )

    def _print_peers(self, peers: dict[str, Any]) -> None:
        w = self.stdout.write
        keys = (
            "durable_cpu_per_step_ms",
            "commits_per_run",
            "bytes_per_run",
            "wake_p95_ms",
            "crash_refunds",
            "process_cpu_per_step_ms",
            "memory_cpu_per_step_ms",
        )
        w(f"{'NW-1 shaped, medians':<26}" + "".join(f"{s:>12}" for s in peers))
        for k in keys:
            w(f"{k:<26}" + "".join(f"{peers[s].get(k, '—')!s:>12}" for s in peers))
        d, b = peers["deskhand"], peers["dbos"]

        def ratio(k: str) -> str:
            return f"{d[k] / b[k]:.2f}x" if b.get(k) else "—"

        w(
            f"Deskhand's own work per step {d['agent_cpu_per_step_ms']} ms CPU (target ≤ 4);"
            f" over bare DBOS: durable CPU {ratio('durable_cpu_per_step_ms')} (≤ 1.5x),"
            f" commits {ratio('commits_per_run')} (≤ 1.5x), bytes {ratio('bytes_per_run')} (≤ 3x);"
            f" wake p95 {d.get('wake_p95_ms')} ms vs {b.get('wake_p95_ms')} ms (≤ bare + 6 ms;"
            f" timed from the send; Deskhand's decision before it p95"
            f" {d.get('wake_decide_p95_ms')} ms)"
        )
        w(f"Deskhand commits per run, read-only ones too: {d.get('all_commits_per_run')}")
        w("Deskhand rows written per NW-1 run, by table (inserts/updates/deletes):")
        for table, n in d.get("tables", {}).items():
            w(f"  {table:<40} {n}")
        w("Deskhand per step name on MemoryRuntime, per run (CPU ms, statements, transactions):")
        for name, v in d.get("steps", {}).items():
            w(
                f"  {name:<16} {v['calls']:>4} calls {v['cpu_ms']:>8} ms {v['statements']:>6} stmts"
                f" {v['transactions']:>5} txns {v.get('writing', 0):>5} writing"
            )

    def _print_inbound(self, inbound: dict[str, Any]) -> None:
        w = self.stdout.write
        w(
            f"one inbound message, in this process ({inbound['samples']} samples a shape,"
            " medians; no automatic runs):"
        )
        w(
            f"  {'shape':<11}{'bytes':>7}{'parse CPU':>11}{'store':>9}{'p95':>8}"
            f"{'store CPU':>11}{'process':>9}{'process CPU':>13}   (ms)"
        )
        for shape, f in inbound["shapes"].items():
            w(
                f"  {shape:<11}{f['bytes']:>7}{f['parse_cpu_ms']:>11.2f}{f['store_ms']:>9.1f}"
                f"{f['store_p95_ms']:>8.1f}{f['store_cpu_ms']:>11.1f}{f['process_ms']:>9.1f}"
                f"{f['process_cpu_ms']:>13.1f}"
            )
        s = inbound["smtp"]
        w(
            "through the SMTP receiver and a worker process, Northwind opening a run on every"
            " message (ms, from DATA sent):"
        )
        w(f"  {'':<36}{'answer p50':>11}{'p95':>9}{'first step p50':>16}{'p95':>9}")
        for key, label in (
            ("single", f"{s['singles']} single messages, one at a time"),
            ("burst", f"burst of {s['burst']} from {s['burst_clients']} clients"),
        ):
            w(
                f"  {label:<36}{s[f'{key}_answer_p50_ms']:>11.1f}{s[f'{key}_answer_p95_ms']:>9.1f}"
                f"{s[f'{key}_first_step_p50_ms']:>16.1f}{s[f'{key}_first_step_p95_ms']:>9.1f}"
            )
        w(
            f"  burst answer p95 ÷ single answer p95: {s['burst_over_single_answer_p95']}"
            " (target ≤ 2 from no more clients than cores; N clients on C cores queue N/C deep)"
        )
        w(
            f"  from the burst's first send: all answered {s['burst_all_answered_s']} s, all on a"
            f" thread {s['burst_all_threaded_s']} s ({s['burst_threaded']}), all runs' first"
            f" steps {s['burst_all_started_s']} s ({s['burst_started']})"
        )

    def _print(self, r: dict[str, Any]) -> None:
        w = self.stdout.write
        m = r["machine"]
        w(f"deskhand bench · {m['cores']} cores ({m['cpu']}) · {r['postgres']} · dbos {r['dbos']}")
        w(f"load {m['load_1m']} → {r.get('load_end')} · {r.get('wall_s')} s · plan {r['plan']}")
        if "peers" in r:
            self._print_peers(r["peers"])
            return
        if "loop" in r:
            self._print_loop(r["loop"])
            return
        if "model_calls" in r:
            mc = r["model_calls"]
            w(
                f"model call overhead (no-op model; model queue polling {mc['model_queue_poll_s']} s):"
            )
            for label in ("plain", "limited", "limited_poll_0.1s"):
                f = mc[label]
                w(
                    f"  {label:<16} {f['median_ms']:>7.1f} ms median {f['p95_ms']:>7.1f} ms p95"
                    f"   run checkpoints/call {f['run_checkpoints_per_call']}"
                    f"   child checkpoints/call {f['child_checkpoints_per_call']}"
                    f"   child workflows/call {f['child_workflows_per_call']}"
                )
            return
        if "inbound" in r:
            self._print_inbound(r["inbound"])
            return
        floor = r["floor_insert_commit_ms"]

        def x(ms: float | None) -> str:
            return "—" if ms is None else f"{ms / floor:.1f}x floor"

        w(f"floor: INSERT + COMMIT                  {floor:.3f} ms")
        w(
            f"bare DBOS step                          {r['bare_dbos_step_ms']:.3f} ms   {x(r['bare_dbos_step_ms'])}"
        )
        w(
            f"agent step (DBOSRuntime.step)           {r['agent_step_ms']:.3f} ms   {x(r['agent_step_ms'])}"
            f"   {r['step_overhead_ratio']}x the bare step"
        )
        w(
            f"NW-2: {r['nw2_dbos_steps']} DBOS operations for {r['nw2_step_rows']} step-log rows"
            f" = {r['dbos_steps_per_agent_step']} per row; wall {r['nw2_wall_ms']} ms"
        )
        w(
            f"idle worker CPU {r['idle_worker_cpu_pct']}% of a core; enqueue → first step p50"
            f" {r['enqueue_to_first_step_p50_ms']} ms, p95 {r['enqueue_to_first_step_p95_ms']} ms"
        )
        w(
            f"throughput, in-process: direct {r['runs_per_s_direct']}/s, queued"
            f" {r['runs_per_s_queue']}/s ({r['queue_over_direct']}x)"
        )
        w(
            f"API over a real web process ({r['api_samples']} each): help-desk webhook → ticket"
            f" stored p50 {r['webhook_to_ticket_stored_p50_ms']} ms, p95"
            f" {r['webhook_to_ticket_stored_p95_ms']} ms; POST /api/v1/runs → first step p50"
            f" {r['api_run_to_first_step_p50_ms']} ms, p95 {r['api_run_to_first_step_p95_ms']} ms"
        )
        for p in r["parked_series"]:
            w(
                f"parked {p['parked']:>6}: {p['threads']} threads, {p['rss_mb']} MB, idle"
                f" {p['idle_cpu_pct']}% CPU, {p['idle_commits_per_s']} commits/s, wake p50"
                f" {p['wake_p50_ms']} ms p95 {p['wake_p95_ms']} ms (parked at {p['park_rate_per_s']}/s;"
                f" collector {p['idle_gc_s']} s of the window"
                + ("" if p["settled"] else "; never settled")
                + ")"
            )
        for p in r.get("customer_parked_series", []):
            w(
                f"parked on customers {p['parked']:>6}: {p['threads']} threads, {p['rss_mb']} MB,"
                f" idle {p['idle_cpu_pct']}% CPU, {p['idle_commits_per_s']} commits/s; answer"
                f" stored → next step p50 {p['next_step_p50_ms']} ms p95 {p['next_step_p95_ms']} ms"
                f" (→ recv returned p95 {p['wake_p95_ms']} ms; parked at {p['park_rate_per_s']}/s"
                + ("" if p["settled"] else "; never settled")
                + ")"
            )
        if r.get("customer_over_approval_cpu"):
            w(
                "idle CPU, parked on customers ÷ parked on approvals, level by level:"
                f" {r['customer_over_approval_cpu']}"
            )
        if r.get("runs_per_s_1_worker") is not None:
            w(
                f"workers: 1 → {r['runs_per_s_1_worker']}/s, 2 → {r['runs_per_s_2_workers']}/s"
                f" ({r['two_workers_over_one']}x); CPU cores used: workers {r['workers_cpu_cores_1']}"
                f" → {r['workers_cpu_cores_2']}, Postgres {r['postgres_cpu_cores_1']} → {r['postgres_cpu_cores_2']}"
            )
            w(
                f"restart holding {r['restart_parked_runs']} parked runs: ready in"
                f" {r['restart_ready_s']} s; decisions sent while down took effect"
                f" {r['restart_decision_s']} s after ready; all handed back after"
                f" {r['restart_all_handed_back_s']} s"
            )
            w(
                f"worker holding {r['worker_parked_runs']} parked: {r['worker_parked_threads']}"
                f" threads, {r['worker_parked_rss_mb']} MB, idle {r['worker_parked_idle_cpu_pct']}%"
                f" CPU, {r['worker_parked_idle_commits_per_s']} commits/s"
                + ("" if r["worker_parked_settled"] else " (never settled: replay still running)")
            )
            w(
                f"SIGKILL → resumed after restart {r['kill_to_resume_s']} s (restart to ready"
                f" {r['restart_to_ready_s']} s); takeover of a dead worker {r['takeover_s']} s"
                f" (grace {r['takeover_grace_s']} s)"
            )
        w("figures from one run on a shared machine; rerun before comparing")
