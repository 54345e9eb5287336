from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from agent.management.helpers import print_outcome, user_by_email, wait_for_rest
from agent.tools.narrowing import NarrowingRefused, approval_approve_with_changes, changes_text
from approvals.models import Channel
from approvals.selectors import approval_for_user
from approvals.services import DecisionRefused, approval_decide
from deskhand.domain.cli import CliError, DeskhandCommand
from deskhand.domain.desk.permissions import NotAllowed, NotVisible


class Command(DeskhandCommand):
    help = (
        "Approve or deny a pending approval, as a named user (owner or agent of its merchant); "
        "approve with changes with --amount-cents (a smaller refund) or --body-file (an edited email)."
    )
    not_done = "no decision was recorded"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("approval_id")
        parser.add_argument("decision", choices=["approve", "deny"])
        parser.add_argument("--as", dest="email", required=True)
        parser.add_argument("--reason", default="", help="why (required to deny)")
        parser.add_argument(
            "--amount-cents",
            type=int,
            help="approve with changes: a smaller refund on the same order, in cents",
        )
        parser.add_argument(
            "--body-file",
            help="approve with changes: the email's edited body, read from this file (UTF-8)",
        )
        parser.add_argument(
            "--wait", action="store_true", help="then wait for the run and print its outcome"
        )
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--timeout", type=float, default=120.0)

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            uuid.UUID(opts["approval_id"])
        except ValueError:
            raise CliError(
                f"{opts['approval_id']!r} is not an approval id (expected a UUID).", code="invalid"
            ) from None
        changes = _changes(opts)
        if changes and opts["decision"] != "approve":
            raise CliError(
                "--amount-cents and --body-file change what is approved; a denial approves nothing.",
                code="usage",
                returncode=2,
            )
        if opts["decision"] == "deny" and not opts["reason"].strip():
            raise CliError(
                "deny needs --reason: the agent reads it, and the audit trail keeps it.",
                code="usage",
                returncode=2,
            )
        user = user_by_email(opts["email"])
        try:
            # Another merchant's approval and an unknown id look the same: "no approval".
            approval = approval_for_user(user=user, approval_id=opts["approval_id"])
            if changes:
                approval = approval_approve_with_changes(
                    approval=approval,
                    user=user,
                    changes=changes,
                    reason=opts["reason"],
                    channel=Channel.CLI,
                )
            else:
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
        except NarrowingRefused as exc:
            raise CliError(str(exc), code="refused") from None
        self.not_done = (
            f"the decision was recorded ({approval.status}) but the run's outcome was not read"
        )
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
                        "args_hash": approval.args_hash,
                        "approved_hash": approval.approved_hash or None,
                        "approved_arguments": approval.approved_arguments,
                        "changed": approval.changed,
                    }
                )
            )
        else:
            changed = (
                f" with changes ({changes_text(approval.tool, approval.arguments, approval.executes, approval.currency)})"
                if approval.changed
                else ""
            )
            self.stdout.write(
                f"{approval.status}{changed}: {approval.preview.splitlines()[0]} (run {approval.run_id})"
            )


def _changes(opts: dict[str, Any]) -> dict[str, Any]:
    """The narrowing asked for on the command line, as tool arguments."""
    changes: dict[str, Any] = {}
    if opts.get("amount_cents") is not None:
        changes["amount_cents"] = opts["amount_cents"]
    if opts.get("body_file"):
        try:
            changes["body"] = Path(opts["body_file"]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not UTF-8 text"
            raise CliError(
                f"cannot read --body-file {opts['body_file']}: {reason}.", code="invalid"
            ) from None
    return changes
