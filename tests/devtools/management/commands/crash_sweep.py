"""``python manage.py crash_sweep [--case nw1|nw3|lu2|nw1-payments|customer] [--boundary POINT:TARGET[:N]]``.

Kills a real worker (SIGKILL) at every boundary of NW-1's refund, NW-3's
denied refund and LU-2's two gates in turn — before and after every durable
step, inside and after every effect's transaction, and while each approval is
pending — and of a customer's conversation by mail (inbound mail → stored → run
woken → reply sent) — restarts it, lets it finish, and checks the world (see
``tests/devtools/crash.py`` and ``tests/devtools/crash_customer.py``). Works in a scratch database it creates and drops.
The last line is ``N passed, M failed``; the exit status is 1 if anything failed.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from django.core.management.base import BaseCommand

from tests.devtools import crash_customer
from tests.devtools.crash import CASES, Boundary, Outcome, reference, sweep
from tests.devtools.evals.runner import quiet_logs, scratch_database


class Command(BaseCommand):
    help = (
        "Kill a worker at every boundary of NW-1, NW-3, LU-2 and a customer's mail "
        "conversation; check each run finishes once."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--case",
            action="append",
            choices=[*sorted(CASES), "customer"],
            help="Only this case (repeatable).",
        )
        parser.add_argument(
            "--boundary", help="Only this boundary, e.g. after_step:tool.issue_refund:1."
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        names = opts["case"] or ["nw1", "nw3", "lu2", "nw1-payments", "customer"]
        started = time.monotonic()
        outcomes: list[Outcome] = []
        with quiet_logs(), scratch_database("deskhand_sweep") as db:
            self.stdout.write(f"crash sweep in scratch database {db}")
            for name in names:
                one = [Boundary.parse(opts["boundary"])] if opts["boundary"] else None
                if name == "customer":
                    points = one or list(crash_customer.BOUNDARIES)
                    schedules = crash_customer.sweep(points)
                    about = "a mail from Omar, his answer, the reply"
                else:
                    case = CASES[name]
                    points = one or reference(case)
                    schedules = sweep(case, points)
                    about = f"{case.ticket}, {case.provider}"
                self.stdout.write(f"{name}: {len(points)} boundaries ({about})")
                for i, outcome in enumerate(schedules, 1):
                    outcomes.append(outcome)
                    mark = "pass" if outcome.ok else "FAIL"
                    vacuous = "" if outcome.fired else "  (never reached: no crash happened)"
                    self.stdout.write(
                        f"  [{i:>3}/{len(points)}] {mark} {outcome.boundary:<40} {outcome.seconds:5.1f}s{vacuous}"
                    )
                    for problem in outcome.problems:
                        self.stdout.write(f"        {problem}")
                    self.stdout.flush()
        self.stdout.write("")
        self.stdout.write(
            f"{'case':<12} {'schedules':>9} {'killed':>7} {'passed':>7} {'failed':>7}"
        )
        for name in names:
            mine = [o for o in outcomes if o.case == name]
            self.stdout.write(
                f"{name:<12} {len(mine):>9} {sum(o.fired for o in mine):>7} "
                f"{sum(o.ok for o in mine):>7} {sum(not o.ok for o in mine):>7}"
            )
        failed = sum(not o.ok for o in outcomes)
        self.stdout.write(f"({time.monotonic() - started:.0f}s)")
        self.stdout.write(f"{len(outcomes) - failed} passed, {failed} failed")
        if failed:
            sys.exit(1)
