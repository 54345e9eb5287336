from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError

from agent.management.helpers import print_outcome, user_by_email, wait_for_rest
from agent.run.selectors import rerun_needs_confirming, ticket_done
from agent.run.services import RunRefused, run_start
from approvals.models import Channel
from deskhand.domain.cli import CliError, DeskhandCommand
from deskhand.domain.desk.models import Membership, Role, Ticket
from deskhand.domain.desk.money import display_cents
from deskhand.domain.desk.permissions import NotAllowed, NotVisible


class Command(DeskhandCommand):
    help = "Start an agent run on a ticket (e.g. NW-1; any case: nw-1 is the same ticket)."
    not_done = "no run was started"

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
        tickets = list(
            Ticket.objects.select_related("merchant")
            .filter(reference__iexact=opts["ticket"].strip())
            .order_by("merchant_id", "id")
        )
        if not tickets:
            raise CliError(f"no ticket {opts['ticket']!r}.", code="not_found")
        if opts["email"]:
            user = user_by_email(opts["email"])
            mine = [
                t
                for t in tickets
                if Membership.objects.filter(user=user, merchant=t.merchant).exists()
            ]
            if not mine:
                raise CliError(
                    code="not_allowed",
                    message=f"{opts['email']} has no role at the merchant of ticket {opts['ticket']}.",
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
        self._warn_if_rerun(ticket)
        try:
            run = run_start(ticket=ticket, user=user, channel=Channel.CLI)
        except (RunRefused, NotAllowed, NotVisible) as exc:
            raise CommandError(str(exc)) from None
        self.not_done = f"run {run.id} was started but its outcome was not read"
        if opts["wait"]:
            run = wait_for_rest(run, opts["timeout"])
        print_outcome(self, run, opts["json"])

    def _warn_if_rerun(self, ticket: Ticket) -> None:
        """Say what earlier runs already did before starting another (the console asks instead).

        The warning goes to stderr, so ``--json`` keeps one object on stdout; the run still
        starts, as scripts that re-run tickets on purpose expect.
        """
        done = ticket_done(ticket=ticket)
        if not rerun_needs_confirming(ticket=ticket, done=done):
            return
        said = [
            (
                f"a refund of {display_cents(d.amount_cents, d.currency)} on {d.detail} is in"
                " flight (not yet confirmed by the payment provider)"
                if d.in_flight
                else f"refunded {display_cents(d.amount_cents, d.currency)} on {d.detail}"
            )
            if d.what == "refund" and d.amount_cents is not None
            else f"emailed the customer ({d.detail!r})"
            for d in done
        ]
        already = "; ".join(said) if said else "nothing was refunded or emailed"
        self.stderr.write(
            f"warning: ticket {ticket.reference} is {ticket.status} and earlier runs already did this: {already}."
        )
