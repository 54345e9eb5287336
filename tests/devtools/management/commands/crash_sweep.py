"""``python manage.py crash_sweep [--case nw1|nw3|lu2|nw1-payments|customer|intake] [--boundary POINT:TARGET[:N]]``.

Kills a real worker (SIGKILL) at every boundary of NW-1's refund, NW-3's
denied refund and LU-2's two gates in turn — before and after every durable
step, inside and after every effect's transaction, and while each approval is
pending — and of a customer's conversation by mail (inbound mail → stored → run
woken → reply sent) — restarts it, lets it finish, and checks the world (see
``tests/devtools/crash.py`` and ``tests/devtools/crash_customer.py``). The ``intake`` case
kills the SMTP receiver, the web process or the worker while a burst of mail arrives by SMTP
or through Mailgun's webhook, or new tickets through a help desk's, and checks every message
is threaded once and every line opens one run (``tests/devtools/crash_intake.py``;
``--boundary`` takes its schedules' names, e.g. ``gives-up/after_store:inbound:5``,
``mailgun/after_enqueue:inbound:5``, ``helpdesk/after_store:customer_line:2`` or
``helpdesk/after_commit:customer.route:2``).
Works in a scratch database it creates and drops.
The last line is ``N passed, M failed``; the exit status is 1 if anything failed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Sequence
from typing import Any

from django.core.management.base import BaseCommand

from tests.devtools import crash_customer, crash_intake
from tests.devtools.crash import CASES, Boundary, Outcome, reference, sweep
from tests.devtools.evals.runner import quiet_logs, scratch_database


class Command(BaseCommand):
    help = (
        "Kill a worker at every boundary of NW-1, NW-3, LU-2 and a customer's mail "
        "conversation, and the receiver, the web process or the worker as a burst of mail "
        "and help-desk tickets arrives; check each run finishes once and every message "
        "opens one."
    )
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--case",
            action="append",
            choices=[*sorted(CASES), "customer", "intake"],
            help="Only this case (repeatable).",
        )
        parser.add_argument(
            "--boundary", help="Only this boundary, e.g. after_step:tool.issue_refund:1."
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        names = opts["case"] or ["nw1", "nw3", "lu2", "nw1-payments", "customer", "intake"]
        started = time.monotonic()
        outcomes: list[Outcome] = []
        with quiet_logs(), scratch_database("deskhand_sweep") as db:
            self.stdout.write(f"crash sweep in scratch database {db}")
            for name in names:
                if name == "intake":
                    picked = opts["boundary"]
                    plan = [crash_intake.Schedule.parse(picked)] if picked else None
                    intake = plan or crash_intake.SCHEDULES
                    about = (
                        f"a burst of {crash_intake.BURST} new customers' mail by SMTP, "
                        f"{crash_intake.MAILGUN_BURST} through Mailgun, "
                        f"{crash_intake.HELPDESK_TICKETS} help-desk tickets"
                    )
                    self.stdout.write(f"{name}: {len(intake)} schedules ({about})")
                    self._report(intake, crash_intake.sweep(intake), outcomes)
                    continue
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
                self._report(points, schedules, outcomes)
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

    def _report(
        self, points: Sequence[object], schedules: Iterable[Outcome], outcomes: list[Outcome]
    ) -> None:
        """Each schedule's line as it finishes, and its problems under it."""
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
