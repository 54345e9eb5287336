from __future__ import annotations

import json
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agent.cli import print_outcome, user_by_email, wait_for_rest
from approvals.models import Channel
from approvals.selectors import approval_for_user
from approvals.services import DecisionRefused, approval_decide
from deskhand.desk.permissions import NotAllowed, NotVisible


class Command(BaseCommand):
    help = "Approve or deny a pending approval, as a named user (owner or agent of its merchant)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("approval_id")
        parser.add_argument("decision", choices=["approve", "deny"])
        parser.add_argument("--as", dest="email", required=True)
        parser.add_argument("--reason", default="")
        parser.add_argument(
            "--wait", action="store_true", help="then wait for the run and print its outcome"
        )
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--timeout", type=float, default=120.0)

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            uuid.UUID(opts["approval_id"])
        except ValueError:
            raise CommandError(
                f"{opts['approval_id']!r} is not an approval id (expected a UUID)."
            ) from None
        user = user_by_email(opts["email"])
        try:
            # Another merchant's approval and an unknown id look the same: "no approval".
            approval = approval_for_user(user=user, approval_id=opts["approval_id"])
            approval = approval_decide(
                approval=approval,
                user=user,
                approve=opts["decision"] == "approve",
                reason=opts["reason"],
                channel=Channel.CLI,
            )
        except NotVisible:
            raise CommandError(f"no approval {opts['approval_id']}.") from None
        except (NotAllowed, DecisionRefused) as exc:
            raise CommandError(str(exc)) from None
        if opts["wait"]:
            run = wait_for_rest(approval.run, opts["timeout"])
            print_outcome(self, run, opts["json"])
        elif opts["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "approval_id": str(approval.id),
                        "status": approval.status,
                        "run_id": str(approval.run_id),
                    }
                )
            )
        else:
            self.stdout.write(
                f"{approval.status}: {approval.preview.splitlines()[0]} (run {approval.run_id})"
            )
