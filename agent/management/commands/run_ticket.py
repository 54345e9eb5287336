from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from agent.cli import print_outcome, user_by_email, wait_for_rest
from agent.runs import RunRefused, run_start
from approvals.models import Channel
from deskhand.desk.models import Membership, Role, Ticket
from deskhand.desk.permissions import NotAllowed, NotVisible


class Command(BaseCommand):
    help = "Start an agent run on a ticket (e.g. NW-1)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("ticket", help="ticket reference, e.g. NW-1")
        parser.add_argument(
            "--as", dest="email", help="act as this user (default: the merchant's owner)"
        )
        parser.add_argument(
            "--wait",
            action="store_true",
            help="wait until the run is terminal or waiting for a person",
        )
        parser.add_argument(
            "--json", action="store_true", help="print the outcome as one line of JSON"
        )
        parser.add_argument("--timeout", type=float, default=120.0)

    def handle(self, *args: Any, **opts: Any) -> None:
        tickets = list(Ticket.objects.select_related("merchant").filter(reference=opts["ticket"]))
        if not tickets:
            raise CommandError(f"no ticket {opts['ticket']!r}.")
        if opts["email"]:
            user = user_by_email(opts["email"])
            mine = [
                t
                for t in tickets
                if Membership.objects.filter(user=user, merchant=t.merchant).exists()
            ]
            if not mine:
                raise CommandError(
                    f"{opts['email']} has no role at the merchant of ticket {opts['ticket']}."
                )
            ticket = mine[0]
        else:
            ticket = tickets[0]
            owner = (
                Membership.objects.filter(merchant=ticket.merchant, role=Role.OWNER)
                .select_related("user")
                .first()
            )
            if owner is None:
                raise CommandError(
                    f"{ticket.merchant.name} has no owner to act as; pass --as EMAIL."
                )
            user = owner.user
        try:
            run = run_start(ticket=ticket, user=user, channel=Channel.CLI)
        except (RunRefused, NotAllowed, NotVisible) as exc:
            raise CommandError(str(exc)) from None
        if opts["wait"]:
            run = wait_for_rest(run, opts["timeout"])
        print_outcome(self, run, opts["json"])
