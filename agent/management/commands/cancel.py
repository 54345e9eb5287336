from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from agent.management.helpers import print_outcome, run_by_id, user_by_email
from agent.models import RunStatus
from agent.run.services import RunRefused, run_cancel
from approvals.models import Channel
from deskhand.domain.cli import DeskhandCommand
from deskhand.domain.desk.permissions import NotAllowed, NotVisible


class Command(DeskhandCommand):
    help = (
        "Cancel a run: it stops acting and its pending approvals are withdrawn first, then its "
        "workflow is cancelled. A run already cancelled is refused (exit 1)."
    )
    not_done = "the run was not cancelled"

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
        if run.status == RunStatus.CANCELLING:
            self.stderr.write(
                f"run {run.id} is cancelling: nothing more will happen for it, and the worker's "
                "reconciler marks it cancelled once DBOS confirms its workflow has stopped."
            )
