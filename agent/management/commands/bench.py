"""``python manage.py bench [--parked N]``: what durability costs, measured in one run.

Works in a scratch database it creates next to the configured one
(``deskhand_bench_<random>`` on the same server), migrates and seeds, and drops
at the end, with an in-process DBOS executor configured as the worker is. It
prints ratios and percentiles, never pass/fail: machines are noisy.

(a) one bare DBOS step (sync, no-op) and one Deskhand-shaped step (async, the
    body in a worker thread, as ``agent.workflow`` runs steps) against one
    single-row INSERT + COMMIT;
(b) NW-2 runs (no approval): wall time against the sum of their step latencies;
(c) N runs parked at the approval gate (a scripted provider asks for a refund at
    once): threads per parked run, RSS per 1,000 parked, Postgres connections,
    idle cost, and wake latency from a person's decision to the run resuming;
(d) step commit → NOTIFY received on ``deskhand_steps`` (what live pages wait on).

The default (500 parked) keeps ``make bench`` short; docs/benchmarks.md shows
runs with 5,000 and 10,000.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections, connections, transaction

BENCH_APP = "deskhand-bench"

TERMINAL = ("succeeded", "failed", "exhausted", "cancelled")

_registered: dict[str, Any] = {}


def _register_workflows() -> dict[str, Any]:
    """The bench's own workflows; registered once, before DBOS launches."""
    if _registered:
        return _registered
    from dbos import DBOS

    def noop() -> None:
        return None

    @DBOS.workflow(name="deskhand.bench.sync_steps")
    def sync_steps(n: int) -> list[float]:
        out = []
        for _ in range(n):
            t = time.perf_counter()
            DBOS.run_step({"name": "bench.noop"}, noop)
            out.append(time.perf_counter() - t)
        return out

    def django_read() -> None:
        # What agent.workflow._in_thread wraps around every step body, with a one-row read.
        close_old_connections()
        try:
            with connections["default"].cursor() as cur:
                cur.execute("SELECT 1")
        finally:
            close_old_connections()

    @DBOS.workflow(name="deskhand.bench.async_steps")
    async def async_steps(n: int, django: bool) -> list[float]:
        fn = django_read if django else noop

        async def body() -> None:
            return await asyncio.to_thread(fn)

        out = []
        for _ in range(n):
            t = time.perf_counter()
            await DBOS.run_step_async({"name": "bench.step"}, body)
            out.append(time.perf_counter() - t)
        return out

    _registered.update(sync_steps=sync_steps, async_steps=async_steps, django_read=django_read)
    return _registered


# --- small measuring tools -------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1))))
    return ordered[k]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


def proc_status(field: str) -> int:
    """A number from /proc/self/status (VmRSS in kB, Threads)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu
            )
    except OSError:
        pass
    mem = ""
    try:
        with open("/proc/meminfo") as fh:
            kb = int(next(ln.split()[1] for ln in fh if ln.startswith("MemTotal")))
            mem = f", {kb / 1024 / 1024:.0f} GB RAM"
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} cores ({cpu}){mem}"


class Listener:
    """LISTEN deskhand_steps on its own connection; remembers when each payload arrived."""

    def __init__(self, conninfo: dict[str, Any]) -> None:
        self.conn = psycopg.connect(**conninfo, autocommit=True, application_name=BENCH_APP)
        self.conn.execute("LISTEN deskhand_steps")
        self.seen: dict[str, float] = {}
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="bench-listen", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            for note in self.conn.notifies(timeout=0.2):
                now = time.perf_counter()
                with self.cond:
                    self.seen.setdefault(note.payload, now)
                    self.cond.notify_all()

    def wait_for(self, payload: str, timeout: float) -> float | None:
        end = time.monotonic() + timeout
        with self.cond:
            while payload not in self.seen:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)
            return self.seen[payload]

    def close(self) -> None:
        self.stop.set()
        self.thread.join(2)
        self.conn.close()


# --- the command ----------------------------------------------------------------------


class Command(BaseCommand):
    help = "Measure durability's costs in a scratch database (step vs commit, run overhead, parked runs, NOTIFY)."
    # Only the server is needed: the configured database itself may not even exist.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--parked",
            type=int,
            default=500,
            help="runs to park at the approval gate (default 500)",
        )
        parser.add_argument(
            "--wake",
            type=int,
            default=50,
            help="parked runs to wake, one at a time, for wake latency (default 50)",
        )
        parser.add_argument("--runs", type=int, default=3, help="NW-2 runs for (b) (default 3)")
        parser.add_argument(
            "--samples", type=int, default=200, help="samples for (a) and (d) (default 200)"
        )
        parser.add_argument(
            "--conn-max-age",
            type=int,
            default=None,
            metavar="S",
            help="run with Django's CONN_MAX_AGE=S (to measure persistent connections)",
        )
        parser.add_argument(
            "--keep", action="store_true", help="do not drop the scratch database (to inspect it)"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if min(opts["parked"], opts["runs"], opts["samples"]) < 1 or opts["wake"] < 0:
            raise CommandError(
                "--parked, --runs and --samples must be at least 1, --wake at least 0."
            )
        self.opts = opts
        self.w = self.stdout.write
        logging.getLogger("dbos").setLevel(logging.WARNING)  # launch chatter would bury the numbers
        base = connections["default"].settings_dict
        self.server: dict[str, Any] = {
            "host": base.get("HOST") or None,
            "port": int(base["PORT"]) if base.get("PORT") else None,
            "user": base.get("USER") or None,
            "password": base.get("PASSWORD") or None,
        }
        self.server = {k: v for k, v in self.server.items() if v is not None}
        original = base["NAME"]
        scratch = f"deskhand_bench_{secrets.token_hex(4)}"
        admin = None
        for dbname in (original, "postgres", "template1"):
            try:
                admin = psycopg.connect(
                    **self.server, dbname=dbname, autocommit=True, application_name=BENCH_APP
                )
                break
            except psycopg.Error as exc:
                error = str(exc).strip().splitlines()[0]
        if admin is None:
            raise CommandError(f"cannot reach the database server: {error}.")
        with admin:
            try:
                admin.execute(f'CREATE DATABASE "{scratch}"')
            except psycopg.Error as exc:
                raise CommandError(
                    f"cannot create a scratch database: {str(exc).strip().splitlines()[0]}."
                ) from None
            try:
                with self._pointed_at(scratch, original):
                    self._bench(scratch)
            finally:
                if opts["keep"]:
                    self.w(f"kept the scratch database {scratch}")
                else:
                    admin.execute(f'DROP DATABASE IF EXISTS "{scratch}" WITH (FORCE)')

    @contextmanager
    def _pointed_at(self, scratch: str, original: str) -> Iterator[None]:
        """Django (every thread's new connections) and DBOS on the scratch database, then back."""
        connections.close_all()
        settings.DATABASES["default"]["NAME"] = scratch
        connections["default"].settings_dict["NAME"] = scratch
        age = settings.DATABASES["default"].get("CONN_MAX_AGE")
        if self.opts["conn_max_age"] is not None:
            settings.DATABASES["default"]["CONN_MAX_AGE"] = self.opts["conn_max_age"]
        launched = False
        try:
            t = time.perf_counter()
            call_command("migrate", verbosity=0, interactive=False)
            call_command("seed", verbosity=0)
            self.setup_seconds = time.perf_counter() - t
            _register_workflows()
            from deskhand.dbos_setup import launch_executor

            launch_executor(f"bench-{scratch[-8:]}", log_level="WARNING")
            launched = True
            yield
        finally:
            from agent.providers import clear_overrides
            from deskhand.dbos_setup import close_clients

            clear_overrides()
            if launched:
                from dbos import DBOS

                # Parked runs are abandoned with the scratch database; DBOS warns for each.
                logging.getLogger("dbos").setLevel(logging.ERROR)
                DBOS.destroy(workflow_completion_timeout_sec=0)
            close_clients()
            connections.close_all()
            settings.DATABASES["default"]["NAME"] = original
            connections["default"].settings_dict["NAME"] = original
            settings.DATABASES["default"]["CONN_MAX_AGE"] = age

    def _bench(self, scratch: str) -> None:
        from deskhand import dbos_setup

        cfg = dbos_setup.config("bench")
        self.w(f"deskhand bench · {machine()} · {self._pg_version()}")
        self.w(
            f"scratch database {scratch} (migrated and seeded in {self.setup_seconds:.1f} s) · "
            f"DBOS in-process: max_executor_threads={cfg.get('max_executor_threads')}, "
            f"sys_db_pool_size={cfg.get('sys_db_pool_size')}, queue poll {settings.DESKHAND_QUEUE_POLL_SEC} s, "
            f"Django CONN_MAX_AGE={settings.DATABASES['default'].get('CONN_MAX_AGE')}"
        )
        self.conninfo: dict[str, Any] = {**self.server, "dbname": scratch}
        self.listener = Listener(self.conninfo)
        try:
            self._step_vs_commit()
            self._nw2()
            self._parked()
        finally:
            self.listener.close()

    def _pg_version(self) -> str:
        with connections["default"].cursor() as cur:
            cur.execute("SHOW server_version")
            return f"Postgres {cur.fetchone()[0]}"

    # (a) -------------------------------------------------------------------------------

    def _step_vs_commit(self) -> None:
        from dbos import DBOS

        with psycopg.connect(**self.conninfo, application_name=BENCH_APP) as conn:
            conn.execute("CREATE TABLE bench_commit (id bigserial PRIMARY KEY, v text NOT NULL)")
            conn.commit()
            commits = []
            for i in range(self.opts["samples"]):
                t = time.perf_counter()
                conn.execute("INSERT INTO bench_commit (v) VALUES (%s)", [f"row {i}"])
                conn.commit()
                commits.append(time.perf_counter() - t)
            conn.execute("DROP TABLE bench_commit")
            conn.commit()
        wf = _register_workflows()
        sync = DBOS.start_workflow(wf["sync_steps"], self.opts["samples"] + 10).get_result()[10:]
        shaped = DBOS.start_workflow(
            wf["async_steps"], self.opts["samples"] + 10, False
        ).get_result()[10:]
        django = DBOS.start_workflow(
            wf["async_steps"], self.opts["samples"] + 10, True
        ).get_result()[10:]
        # The same with persistent connections: what CONN_MAX_AGE > 0 would buy every step.
        db = settings.DATABASES["default"]
        age = db.get("CONN_MAX_AGE")
        db["CONN_MAX_AGE"] = 60
        try:
            kept = DBOS.start_workflow(
                wf["async_steps"], self.opts["samples"] + 10, True
            ).get_result()[10:]
        finally:
            db["CONN_MAX_AGE"] = age
        opens = []
        for _ in range(min(self.opts["samples"], 50)):
            connections["default"].close()
            t = time.perf_counter()
            connections["default"].ensure_connection()
            opens.append(time.perf_counter() - t)
        commit = statistics.median(commits)
        self.w("")
        self.w("(a) one durable step against one INSERT + COMMIT (medians)")
        self.w(
            f"    INSERT + COMMIT (psycopg, one row)       {ms(commit)}   p95 {ms(pct(commits, 95))}"
        )
        self.w(
            f"    bare DBOS step (sync, no-op)             {ms(statistics.median(sync))}   p95 {ms(pct(sync, 95))}   ratio {statistics.median(sync) / commit:.1f}x"
        )
        self.w(
            f"    async step, body in a thread (no-op)     {ms(statistics.median(shaped))}   p95 {ms(pct(shaped, 95))}   ratio {statistics.median(shaped) / commit:.1f}x"
        )
        self.w(
            f"    the same, as agent.workflow runs a step  {ms(statistics.median(django))}   p95 {ms(pct(django, 95))}   ratio {statistics.median(django) / commit:.1f}x"
            "   (close_old_connections around a one-row Django read)"
        )
        self.w(
            f"    the same with CONN_MAX_AGE=60            {ms(statistics.median(kept))}   p95 {ms(pct(kept, 95))}   ratio {statistics.median(kept) / commit:.1f}x"
            f"   (configured: CONN_MAX_AGE={age}"
            + (", so every step opens a connection)" if not age else ")")
        )
        self.w(f"    opening a Django connection alone        {ms(statistics.median(opens))}")

    # (b) -------------------------------------------------------------------------------

    def _nw2(self) -> None:
        from agent.models import Step
        from agent.runs import run_start
        from deskhand.dbos_setup import client
        from deskhand.desk.models import Ticket

        ticket = Ticket.objects.select_related("merchant").get(reference="NW-2")
        owner = ticket.merchant.memberships.get(role="owner").user
        rows: list[dict[str, Any]] = []
        for _ in range(self.opts["runs"]):
            t0 = time.perf_counter()
            run = run_start(ticket=ticket, user=owner)
            done = self._until(partial(self._ended, run.pk), 60)
            observed = time.perf_counter() - t0
            if not done:
                raise CommandError(f"the NW-2 run {run.id} did not finish within 60 s.")
            steps = client().list_workflow_steps(str(run.pk), load_output=False)
            timed = [
                (s["started_at_epoch_ms"], s["completed_at_epoch_ms"])
                for s in steps
                if s["started_at_epoch_ms"] is not None and s["completed_at_epoch_ms"] is not None
            ]
            first = min(a for a, _ in timed)
            last = max(b for _, b in timed)
            by_name: dict[str, list[int]] = {}
            for st in steps:
                if (
                    st["started_at_epoch_ms"] is not None
                    and st["completed_at_epoch_ms"] is not None
                ):
                    kind = (
                        st["function_name"].split(".")[0]
                        if st["function_name"].startswith("tool.")
                        else st["function_name"]
                    )
                    by_name.setdefault(kind, []).append(
                        st["completed_at_epoch_ms"] - st["started_at_epoch_ms"]
                    )
            wf = client().list_workflows(
                workflow_ids=[str(run.pk)], load_input=False, load_output=False
            )[0]
            dbos_sum = sum(b - a for a, b in timed)
            log = list(Step.objects.filter(run=run).values_list("kind", "latency_ms"))
            rows.append(
                {
                    "wall": (last - first) / 1000,
                    "pickup": (first - wf.created_at) / 1000 if wf.created_at else float("nan"),
                    "observed": observed,
                    "dbos_sum": dbos_sum / 1000,
                    "log_sum": sum(lat for _, lat in log) / 1000,
                    "dbos_steps": len(steps),
                    "log_steps": len(log),
                    "by_name": by_name,
                }
            )
        mid = sorted(rows, key=lambda r: r["wall"])[len(rows) // 2]
        self.w("")
        self.w(
            f"(b) one NW-2 run (no approval), the median of {len(rows)}: {mid['log_steps']} step-log rows, {mid['dbos_steps']} DBOS steps"
        )
        self.w(
            f"    wall, first step start → last step end   {ms(mid['wall'])}   (enqueue → first step {ms(mid['pickup'])}; run_start → seen done {ms(mid['observed'])})"
        )
        self.w(
            f"    sum of DBOS step durations               {ms(mid['dbos_sum'])}   wall / sum {mid['wall'] / max(mid['dbos_sum'], 1e-9):.2f}x"
        )
        self.w(
            f"    sum of step-log latencies (model + tools) {ms(mid['log_sum'])}   wall / sum {mid['wall'] / max(mid['log_sum'], 1e-9):.1f}x"
        )
        heavy = sorted(mid["by_name"].items(), key=lambda kv: -sum(kv[1]))
        self.w(
            "    where the DBOS step time goes: "
            + ", ".join(f"{name} {len(d)} x {sum(d) / len(d):.0f} ms" for name, d in heavy[:6])
        )
        self.w(f"    each run, wall: {', '.join(ms(r['wall']) for r in rows)}")

    # (c) and (d) -----------------------------------------------------------------------

    def _bench_world(self, n: int) -> list[Any]:
        """N tickets spread over the two seeded merchants, one bench order per merchant to refund against."""
        from django.utils import timezone

        from deskhand.desk.models import Customer, Merchant, Order, Ticket

        now = timezone.now()
        tickets: list[Ticket] = []
        merchants = list(Merchant.objects.order_by("pk"))
        with transaction.atomic():
            per: dict[int, Customer] = {}
            for m in merchants:
                per[m.pk] = Customer.objects.create(
                    merchant=m, name="Bench Customer", email=f"bench@{m.slug}.test"
                )
                Order.objects.create(
                    merchant=m,
                    customer=per[m.pk],
                    reference="BENCH-1",
                    status="delivered",
                    total_cents=10_000_000,
                    placed_at=now,
                    delivered_at=now,
                )
            for i in range(n):
                m = merchants[i % len(merchants)]
                tickets.append(
                    Ticket(
                        merchant=m,
                        customer=per[m.pk],
                        reference=f"BENCH-{i + 1}",
                        subject=f"Bench ticket {i + 1}",
                    )
                )
            Ticket.objects.bulk_create(tickets, batch_size=1000)
        return list(
            Ticket.objects.filter(reference__startswith="BENCH-").select_related("merchant")
        )

    def _connections(self) -> tuple[int, dict[str, int]]:
        with psycopg.connect(**self.conninfo, autocommit=True, application_name=BENCH_APP) as conn:
            rows = conn.execute(
                "SELECT coalesce(nullif(application_name, ''), 'django'), count(*) FROM pg_stat_activity"
                " WHERE datname = %s AND application_name <> %s GROUP BY 1 ORDER BY 1",
                [self.conninfo["dbname"], BENCH_APP],
            ).fetchall()
        by = {name: int(count) for name, count in rows}
        return sum(by.values()), by

    def _commits(self) -> int:
        with psycopg.connect(**self.conninfo, autocommit=True, application_name=BENCH_APP) as conn:
            row = conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                [self.conninfo["dbname"]],
            ).fetchone()
        return int(row[0]) if row else 0

    def _idle(self, window: float) -> tuple[float, float]:
        """(share of a core this process used, database commits per second) over ``window``."""
        cpu0, commits0 = cpu_seconds(), self._commits()
        time.sleep(window)
        return (cpu_seconds() - cpu0) / window, (self._commits() - commits0 - 2) / window

    @staticmethod
    def _ended(run_id: Any) -> bool:
        from agent.models import Run

        return Run.objects.filter(pk=run_id, status__in=TERMINAL).exists()

    def _until(self, predicate: Callable[[], bool], timeout: float, every: float = 0.01) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if predicate():
                return True
            time.sleep(every)
        return False

    def _parked(self) -> None:
        from agent.models import Run, Step
        from agent.providers import install_override
        from agent.providers.scripted import ScriptedProvider, call, say
        from agent.runs import run_start
        from approvals.models import Approval
        from approvals.services import approval_decide
        from deskhand.dbos_setup import client
        from deskhand.desk.models import Membership

        n = self.opts["parked"]
        tickets = self._bench_world(n)
        owners = {
            m.merchant_id: m.user
            for m in Membership.objects.filter(role="owner").select_related("user")
        }
        install_override(
            "*",
            ScriptedProvider(
                [
                    [
                        call(
                            "issue_refund",
                            order_reference="BENCH-1",
                            amount_cents=100,
                            reason="bench: park at the gate",
                        )
                    ],
                    [say("done")],
                ]
            ),
        )
        close_old_connections()
        window = 1.0 if n < 100 else 3.0 if n < 1000 else 10.0
        time.sleep(window)
        threads0, rss0, os_threads0 = (
            threading.active_count(),
            proc_status("VmRSS"),
            proc_status("Threads"),
        )
        conns0, _ = self._connections()
        base_cpu, base_commits = self._idle(window)

        t0 = time.perf_counter()
        ids = []
        for ticket in tickets:
            ids.append(run_start(ticket=ticket, user=owners[ticket.merchant_id]).pk)
        enqueued = time.perf_counter() - t0

        def parked_count() -> int:
            return Approval.objects.filter(
                status="pending",
                run__status="awaiting_approval",
                run__ticket__reference__startswith="BENCH-",
            ).count()

        progress = {"at": time.monotonic()}

        def all_parked() -> bool:
            count = parked_count()
            if time.monotonic() - progress["at"] > 15:
                progress["at"] = time.monotonic()
                self.stderr.write(f"  … {count}/{n} parked after {time.perf_counter() - t0:.0f} s")
            return count == n

        if not self._until(all_parked, max(120.0, n * 0.5), every=0.5):
            raise CommandError(f"only {parked_count()} of {n} runs parked at the gate in time.")
        parked_in = time.perf_counter() - t0
        failed = Run.objects.filter(
            pk__in=ids, status__in=("failed", "exhausted", "cancelled")
        ).count()

        time.sleep(window)  # let the burst's threads and connections settle
        threads1, rss1, os_threads1 = (
            threading.active_count(),
            proc_status("VmRSS"),
            proc_status("Threads"),
        )
        conns1, by_app = self._connections()
        idle_cpu, idle_commits = self._idle(window)

        self.w("")
        self.w(
            f"(c) {n} runs parked at the approval gate (async workflows waiting in DBOS.recv_async)"
        )
        self.w(
            f"    started {n} runs in {enqueued:.1f} s ({n / enqueued:.0f}/s); all parked after {parked_in:.1f} s ({n / parked_in:.0f}/s); {failed} ended instead"
        )
        self.w(
            f"    threads: {threads0} → {threads1} Python ({os_threads0} → {os_threads1} OS)   per parked run {(os_threads1 - os_threads0) / n:.4f}"
        )
        self.w(
            f"    RSS: {rss0 / 1024:.0f} → {rss1 / 1024:.0f} MB   per 1000 parked {(rss1 - rss0) / 1024 / n * 1000:.1f} MB"
        )
        self.w(
            f"    Postgres connections (this executor): {conns0} before, {conns1} parked   ({', '.join(f'{k} {v}' for k, v in by_app.items())})"
        )
        self.w(
            f"    idle: {base_cpu * 100:.1f}% of a core and {base_commits:.0f} commits/s with nothing parked; "
            f"{idle_cpu * 100:.1f}% and {idle_commits:.0f}/s with {n} parked (over {window:.0f} s)"
        )

        # Wake latency: decide → the run's recv returned (DBOS's own step clock), and → its
        # gate.resume step committed (its NOTIFY received): the run is working again.
        sample = ids[: min(self.opts["wake"], n)]
        decide_s, recv_s, wake_s, missed = [], [], [], 0
        for run_id in sample:
            approval = Approval.objects.get(run_id=run_id, status="pending")
            requested = Step.objects.get(
                run_id=run_id, kind="approval", tool_call_id=approval.tool_call_id
            ).seq
            epoch, t = time.time(), time.perf_counter()
            approval_decide(
                approval=approval, user=owners[approval.merchant_id], approve=True, reason="bench"
            )
            decide_s.append(time.perf_counter() - t)
            seen = self.listener.wait_for(f"{run_id}:{requested + 1}", 30)
            if seen is None:
                missed += 1
                continue
            wake_s.append(seen - t)
            # Let it finish before the next sample, so each wake is measured on a quiet executor.
            self._until(partial(self._ended, run_id), 30, every=0.005)
            # (after it finished: the gate.resume NOTIFY precedes that step's checkpoint)
            steps = client().list_workflow_steps(str(run_id), load_output=False)
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
                recv_s.append(recvs[-1]["completed_at_epoch_ms"] / 1000 - epoch)
        if sample:
            self.w(
                f"    wake latency, {len(wake_s)} of {len(sample)} parked runs woken one at a time:"
            )
            self.w(
                f"      decide → the run's DBOS.recv returned      p50 {ms(pct(recv_s, 50))}   p95 {ms(pct(recv_s, 95))}   ({len(recv_s)} read from DBOS's step clock)"
            )
            self.w(
                f"      decide → gate.resume committed (resumed)   p50 {ms(pct(wake_s, 50))}   p95 {ms(pct(wake_s, 95))}   max {ms(max(wake_s, default=float('nan')))}"
            )
            self.w(
                f"      the decide call itself (record + send)     p50 {ms(pct(decide_s, 50))}"
                + (f"   {missed} never woke within 30 s" if missed else "")
            )

        # (d) step commit → NOTIFY received, with the rest still parked.
        lat = []
        for i in range(self.opts["samples"]):
            payload = f"bench-{i}"
            with transaction.atomic(), connections["default"].cursor() as cur:
                cur.execute("SELECT pg_notify('deskhand_steps', %s)", [payload])
                t = time.perf_counter()  # the block's exit is the COMMIT that delivers it
            seen = self.listener.wait_for(payload, 5)
            if seen is not None:
                lat.append(seen - t)
        self.w("")
        self.w(
            f"(d) step commit → NOTIFY received on deskhand_steps ({len(lat)} commits, {n - len(sample)} runs still parked)"
        )
        self.w(
            f"    p50 {ms(pct(lat, 50))}   p95 {ms(pct(lat, 95))}   max {ms(max(lat, default=float('nan')))}"
        )
        self.w("")
        self.w("ratios and percentiles from one run on a shared machine; rerun before comparing")
