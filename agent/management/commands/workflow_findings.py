"""``python manage.py workflow_findings [--json] [--all] [--resolve ID --note TEXT --by EMAIL]``.

Lists what was done to runs' workflows with DBOS's own tools and what Deskhand did about
it (a fork adopted as a run or refused, a resumed workflow of a closed run stopped again,
an open run whose workflow ended): the open findings, or with ``--all`` the recent ones
too. ``--resolve`` records that a person looked at one and what they did; nothing else
changes. See docs/operations.md, "Using DBOS's own tools".
"""

from __future__ import annotations

import json
from typing import Any

from agent.models import WorkflowFinding
from agent.run.workflow_findings import (
    FindingRefused,
    finding_resolve,
    finding_row,
    open_workflow_findings,
)
from deskhand.domain.cli import CliError, DeskhandCommand


class Command(DeskhandCommand):
    help = "List or settle what was done to runs' workflows with DBOS's own tools."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--json", action="store_true", help="Print JSON.")
        parser.add_argument("--all", action="store_true", help="The 100 latest, settled too.")
        parser.add_argument("--resolve", type=int, metavar="ID", help="Settle this finding.")
        parser.add_argument("--note", default="", help="What was done (with --resolve).")
        parser.add_argument("--by", default="", help="Who settled it (with --resolve).")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["resolve"] is not None:
            note, by = opts["note"].strip(), opts["by"].strip()
            if not note or not by:
                raise CliError(
                    "--resolve needs --note (what was done) and --by (who).", code="usage"
                )
            try:
                finding = finding_resolve(pk=opts["resolve"], by=by, note=note)
            except FindingRefused as exc:
                code = "not_found" if "there is no" in str(exc) else "refused"
                raise CliError(str(exc), code=code) from None
            if opts["json"]:
                self.stdout.write(json.dumps(finding_row(finding)))
            else:
                self.stdout.write(f"Workflow finding {finding.pk} settled by {by}: {note}")
            return
        findings = (
            list(
                WorkflowFinding.objects.select_related("merchant").order_by("-found_at", "-pk")[
                    :100
                ]
            )
            if opts["all"]
            else open_workflow_findings()
        )
        rows = [finding_row(f) for f in findings]
        if opts["json"]:
            self.stdout.write(json.dumps({"findings": rows}, indent=2))
            return
        if not rows:
            self.stdout.write("No open workflow findings." if not opts["all"] else "None.")
        for r in rows:
            settled = (
                f" [settled by {r['resolved_by']}: {r['resolution']}]" if r["resolved_at"] else ""
            )
            self.stdout.write(f"#{r['id']} {r['kind']} {r['workflow_id']}: {r['detail']}{settled}")
