"""``python manage.py health [--json]``: is the fleet well, and if not, what to look at.

Exit 0 when healthy; 1 when the database answers but something needs a person (no
live worker, stuck runs, runs waiting on a version no worker serves, open effect or
workflow findings); 2 when the
database does not answer. With ``--json`` the report is one JSON object on stdout.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any

from agent.ops.health import Report, health_report
from deskhand.domain.cli import DeskhandCommand


class Command(DeskhandCommand):
    help = "Database, workers and their versions, queue depth, oldest waiting approval, stuck runs."
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
        parser.add_argument(
            "--stuck-after",
            type=float,
            default=15.0,
            metavar="MIN",
            help="minutes without progress before an open run counts as stuck (default 15)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["stuck_after"] <= 0:
            from deskhand.domain.cli import UsageError

            raise UsageError("--stuck-after must be a positive number of minutes.")
        report = health_report(dt.timedelta(minutes=opts["stuck_after"]))
        if opts["json"]:
            self.stdout.write(json.dumps(report.as_dict(), default=str))
        else:
            self._print(report)
        code = 0 if report.ok else (1 if report.database else 2)
        if code:
            sys.exit(code)

    def _print(self, r: Report) -> None:
        w = self.stdout.write
        if not r.database:
            w(f"database: NOT reachable ({r.error})")
            return
        w(f"{'ok' if r.ok else 'NEEDS ATTENTION'} · this code runs version {r.app_version}")
        w(f"database: reachable ({r.database_ms} ms)")
        alive = r.alive
        for slug, store in r.shopify.items():
            if store.get("error"):
                w(f"shopify {slug} ({store['shop']}): could not be asked: {store['error']}")
            elif store["missing"]:
                w(
                    f"shopify {slug} ({store['shop']}): webhook subscriptions missing: "
                    f"{', '.join(store['missing'])} — reconnect the store on the settings page"
                )
            else:
                w(f"shopify {slug} ({store['shop']}): webhook subscriptions in place")
        w(f"workers: {len(alive)} alive of {len(r.workers)} registered")
        for x in r.workers:
            state = "alive" if x.alive else "dead"
            extra = (
                f", taken over by {x.taken_over_by} ({x.runs_taken_over} runs)"
                if x.taken_over_by
                else ""
            )
            seen = f", last seen {x.last_seen_s:.0f} s ago" if x.last_seen_s is not None else ""
            w(
                f"  {x.executor_id:<20} {state:<5} {x.app_version or '-':<18} pid {x.pid or '-'}"
                f" on {x.host or '-'}{seen}, {x.pending_runs} runs held{extra}"
            )
        w(
            f"queue: {r.queue_depth} waiting to start, {r.executing} executing, {r.parked} parked for a person"
        )
        if r.oldest_waiting_approval:
            a = r.oldest_waiting_approval
            w(
                f"oldest waiting approval: {a['approval_id']} (run {a['run_id']}),"
                f" {a['age_s']:.0f} s old, expires in {a['expires_in_s']:.0f} s"
            )
        else:
            w("oldest waiting approval: none waiting")
        if r.unserved_versions:
            for version, n in r.unserved_versions.items():
                w(
                    f"runs waiting on version {version or '(none)'}: {n}, and no live worker serves it"
                    f" — start a {version} worker to drain them, or: manage.py move_runs --from {version}"
                )
        w(f"stuck runs: {len(r.stuck_runs)}")
        for s in r.stuck_runs[:20]:
            w(f"  {s['run_id']} {s['status']}: {s['why']} for {s['for_s']} s")
        fx = r.effects
        if fx:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(fx["by_kind"].items()))
            w(
                f"effect findings open: {fx['open']}{f' ({kinds})' if kinds else ''};"
                f" claims pending at a provider: {fx['pending_claims']}"
                + (" — settle with manage.py effects_findings" if fx["open"] else "")
            )
        wf = r.workflows
        if wf:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(wf["by_kind"].items()))
            w(
                f"done with DBOS's own tools, open: {wf['open']}{f' ({kinds})' if kinds else ''}"
                + (" — settle with manage.py workflow_findings" if wf["open"] else "")
            )
            for f in wf["findings"]:
                w(f"  #{f['id']} {f['kind']}: {f['detail']}")
            for f in wf["recent"]:
                if f["resolved_at"]:
                    w(f"  recent, settled: {f['kind']}: {f['detail']}")
