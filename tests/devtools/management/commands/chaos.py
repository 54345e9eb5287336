"""``python manage.py chaos [--runs N] [--workers K] [--seconds S] [--seed R] [--json]``.

N runs across both merchants on K workers, on a private Postgres cluster (never the one
``DATABASE_URL`` names), with an auto-approver/denier, random SIGKILLs of workers and one
Postgres restart half-way; then the fleet drains and the invariants are checked: every run
terminal, no duplicate effect, every effect with its matching approval, refunds within
ceilings, step-log totals equal to run totals. Exit 1 on any violation. See
``tests/devtools/chaos.py`` and docs/scaling.md ("Chaos").
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from deskhand.domain.cli import DeskhandCommand, UsageError
from tests.devtools.chaos import Chaos, Cluster, check, point_django_at, restore_django


class Command(DeskhandCommand):
    help = "Runs on several workers while workers are SIGKILLed and Postgres restarts; check invariants."
    requires_system_checks: list[str] = []
    not_done = "the chaos run did not finish"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--runs", type=int, default=100)
        parser.add_argument("--workers", type=int, default=3)
        parser.add_argument("--seconds", type=float, default=60.0, help="how long the chaos lasts")
        parser.add_argument("--seed", type=int, default=13)
        parser.add_argument("--grace", type=float, default=5.0, help="the workers' takeover grace")
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--keep", action="store_true", help="keep the cluster's folder")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["runs"] < 1 or opts["workers"] < 1 or opts["seconds"] <= 0 or opts["grace"] <= 1:
            raise UsageError(
                "--runs and --workers must be at least 1, --seconds positive, --grace over 1."
            )
        for name in ("dbos", "deskhand.events"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
        t0 = time.monotonic()
        cluster = Cluster()
        saved = point_django_at(cluster)
        chaos = Chaos(
            runs=opts["runs"],
            workers=opts["workers"],
            seconds=opts["seconds"],
            seed=opts["seed"],
            grace=opts["grace"],
            say=self.stdout.write,
        )
        try:
            self.stdout.write(
                f"chaos: {opts['runs']} runs, {opts['workers']} workers, {opts['seconds']:g} s,"
                f" private Postgres in {cluster.root}"
            )
            tickets = chaos.prepare(cluster)
            chaos.run(cluster, tickets)
            result = check(chaos.all_runs())
        finally:
            chaos.close()
            from deskhand.infra.dbos.client import close_clients

            close_clients()
            restore_django(saved)
            if opts["keep"]:
                cluster.server.stop()  # the folder stays for a look; the server does not run on
                self.stdout.write(f"kept {cluster.root} (start it with pg_ctl -D …/pgdata start)")
            else:
                cluster.delete()
        t = chaos.tally
        result.update(
            started=t.started,
            start_errors=t.start_errors,
            approved=t.approved,
            denied=t.denied,
            kills=t.kills,
            restarts=t.restarts,
            pg_restarts=t.pg_restarts,
            seconds=round(time.monotonic() - t0, 1),
        )
        for line in t.events:
            self.stdout.write(f"  {line}")
        self.stdout.write(
            f"{result['runs']} runs {result['statuses']}; {result['refunds']} refunds;"
            f" {t.approved} approved, {t.denied} denied; {t.kills} SIGKILLs,"
            f" {t.pg_restarts} Postgres restart; {result['seconds']} s"
        )
        for name, items in result["violations"].items():
            self.stdout.write(f"  {name}: {len(items)}" + (f" e.g. {items[:3]}" if items else ""))
        self.stdout.write(
            f"{result['violation_count']} invariant violations"
            if result["violation_count"]
            else "0 invariant violations"
        )
        if opts["json"]:
            self.stdout.write(json.dumps(result, default=str))
        if result["violation_count"]:
            raise SystemExit(1)
