"""``python manage.py steer RUN_ID --as EMAIL "text"``: a note from staff to a live run."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError

from agent.management.helpers import run_by_id, user_by_email
from agent.run.steering import SteerRefused, run_steer
from approvals.models import Channel
from deskhand.domain.cli import DeskhandCommand
from deskhand.domain.desk.permissions import NotAllowed, NotVisible


class Command(DeskhandCommand):
    not_done = "the note was not sent"
    help = "Send a note to a running or waiting run; the agent reads it at its next turn as staff guidance."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("run_id")
        parser.add_argument("text")
        parser.add_argument("--as", dest="email", required=True)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        run = run_by_id(opts["run_id"])
        user = user_by_email(opts["email"])
        try:
            note = run_steer(run=run, user=user, body=opts["text"], channel=Channel.CLI)
        except NotVisible:
            raise CommandError(f"no run {opts['run_id']}.") from None
        except (NotAllowed, SteerRefused) as exc:
            raise CommandError(str(exc)) from None
        if opts["json"]:
            self.stdout.write(
                json.dumps({"note_id": note.pk, "run_id": str(run.id), "status": run.status})
            )
        else:
            self.stdout.write(
                f"note {note.pk} sent to run {run.id} ({run.status}); the agent reads it at its next turn."
            )
