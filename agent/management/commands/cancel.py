from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agent.cli import print_outcome, run_by_id, user_by_email
from agent.runs import RunRefused, run_cancel
from approvals.models import Channel
from deskhand.desk.permissions import NotAllowed, NotVisible


class Command(BaseCommand):
    help = "Cancel a run: its approvals expire first, then the workflow is cancelled."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("run_id")
        parser.add_argument("--as", dest="email", required=True)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        run = run_by_id(opts["run_id"])
        user = user_by_email(opts["email"])
        try:
            run = run_cancel(run=run, user=user, channel=Channel.CLI)
        except NotVisible:
            raise CommandError(f"no run {opts['run_id']}.") from None
        except (RunRefused, NotAllowed) as exc:
            raise CommandError(str(exc)) from None
        print_outcome(self, run, opts["json"])
