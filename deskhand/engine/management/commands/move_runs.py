"""``python manage.py move_runs --from VERSION [--to VERSION] [--run ID ...] [--json]``.

Moves the open runs parked under an old application version onto this code's version
(or ``--to``), so the running workers finish them: see ``deskhand.engine.deploys`` and
docs/deploys.md. Refused while a live worker still serves the old version.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.core.management.base import CommandError

from agent.run.services import RunRefused
from deskhand.domain.cli import DeskhandCommand, UsageError
from deskhand.engine.deploys import runs_move_version


class Command(DeskhandCommand):
    help = "Move runs parked under an old application version onto this one (after a deploy)."
    not_done = "no run was moved"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--from", dest="from_version", required=True, metavar="VERSION")
        parser.add_argument("--to", dest="to_version", default=None, metavar="VERSION")
        parser.add_argument("--run", dest="runs", action="append", metavar="RUN_ID")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        runs = opts["runs"]
        if runs:
            for r in runs:
                try:
                    uuid.UUID(r)
                except ValueError:
                    raise UsageError(f"--run {r!r} is not a run id.") from None
        try:
            moved = runs_move_version(
                from_version=opts["from_version"], to_version=opts["to_version"], run_ids=runs
            )
        except RunRefused as exc:
            raise CommandError(str(exc)) from None
        if opts["json"]:
            self.stdout.write(json.dumps({"moved": moved, "count": len(moved)}))
        else:
            self.stdout.write(
                f"moved {len(moved)} run{'s' if len(moved) != 1 else ''} from version"
                f" {opts['from_version']}; a worker of the new version picks them up now"
            )
            for run_id in moved:
                self.stdout.write(f"  {run_id}")
