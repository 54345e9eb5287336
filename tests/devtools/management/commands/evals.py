"""``python manage.py evals [--invariant NAME] [--scenario NAME]``: the trajectory evals.

They run in a scratch database created for the purpose on the same server
(``deskhand_evals_<random>``), migrated, seeded afresh for every scenario and
dropped at the end — the live database is never touched — with DBOS executing
in this process. The last line is ``N passed, M failed``; the exit status is 1
if anything failed.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from tests.devtools.evals.runner import (
    InProcessExecutor,
    Result,
    quiet_logs,
    run_all,
    scratch_database,
)
from tests.devtools.evals.scenarios import INVARIANTS, SCENARIOS, by_invariant

BAR = 30


def progress(i: int, total: int, result: Result, tty: bool) -> str:
    done = BAR * i // total
    bar = "#" * done + "." * (BAR - done)
    mark = "pass" if result.ok else "FAIL"
    line = f"[{bar}] {i:>3}/{total} {mark} {result.scenario.invariant}/{result.scenario.name} ({result.seconds:.1f}s)"
    return ("\r\x1b[2K" + line) if tty else line


def table(results: list[Result]) -> list[str]:
    width = max(len(r.scenario.name) for r in results)
    lines = [f"{'invariant':<15} {'scenario':<{width}}  result  seconds", "-" * (width + 34)]
    for r in results:
        lines.append(
            f"{r.scenario.invariant:<15} {r.scenario.name:<{width}}  {'pass' if r.ok else 'FAIL':<6}  {r.seconds:>7.1f}"
        )
    lines.append("-" * (width + 34))
    for invariant in INVARIANTS:
        mine = [r for r in results if r.scenario.invariant == invariant]
        if mine:
            passed = sum(r.ok for r in mine)
            lines.append(f"{invariant:<15} {passed}/{len(mine)} passed")
    return lines


class Command(BaseCommand):
    help = "Run the trajectory evals in a scratch database (created, then dropped)."
    # The configured database may not even exist; this command never touches it.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--invariant", choices=INVARIANTS, help="Only the scenarios attacking this invariant."
        )
        parser.add_argument("--scenario", help="Only the scenario with this name.")

    def handle(self, *args: Any, **opts: Any) -> None:
        scenarios = by_invariant(opts["invariant"])
        if opts["scenario"]:
            scenarios = [s for s in scenarios if s.name == opts["scenario"]]
            if not scenarios:
                raise CommandError(
                    f"no scenario named {opts['scenario']!r}; there are {len(SCENARIOS)}."
                )
        tty = self.stdout.isatty()
        started = time.monotonic()
        results: list[Result] = []

        def report(i: int, result: Result) -> None:
            self.stdout.write(progress(i, len(scenarios), result, tty), ending="" if tty else "\n")
            self.stdout.flush()
            if not result.ok:
                self.stdout.write(
                    ("\n" if tty else "") + "    " + result.message.replace("\n", "\n    ")
                )

        with quiet_logs(), scratch_database() as name:
            self.stdout.write(f"{len(scenarios)} scenarios in scratch database {name}")
            executor = InProcessExecutor(f"evals-{name.rsplit('_', 1)[-1]}", log_level="CRITICAL")
            executor.start()
            try:
                results = run_all(scenarios, executor, report)
            finally:
                executor.stop()
        if tty:
            self.stdout.write("")
        self.stdout.write("")
        for line in table(results):
            self.stdout.write(line)
        failed = [r for r in results if not r.ok]
        self.stdout.write(f"({time.monotonic() - started:.0f}s)")
        self.stdout.write(f"{len(results) - len(failed)} passed, {len(failed)} failed")
        self.stdout.flush()
        if failed:
            sys.exit(1)
