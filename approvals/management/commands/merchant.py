"""``python manage.py merchant create --name … --slug … --owner <email> [--timezone …]``.

The deployment's operator makes a merchant (the Django admin stays a read-only audit desk):
one transaction makes the merchant and invites its first owner, whose invitation goes out
through the notifications outbox (the worker sends it). ``merchant list`` shows what exists.
The owner then sets up the rest — team, addresses, settings — in the console.
"""

from __future__ import annotations

import json
from typing import Any

from approvals.team import TeamRefused, invitation_link, merchant_create
from deskhand.cli import CliError, DeskhandCommand
from deskhand.desk.models import Merchant


class Command(DeskhandCommand):
    help = "Create a merchant and invite its first owner (create), or list merchants (list)."
    not_done = "no merchant was created"

    def add_arguments(self, parser: Any) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        create = sub.add_parser("create", help="a new merchant, its owner invited by email")
        create.add_argument("--name", required=True, help="the store's name, as customers see it")
        create.add_argument("--slug", required=True, help="short, unique, lower case: 'northwind'")
        create.add_argument("--owner", required=True, metavar="EMAIL", help="the first owner")
        create.add_argument("--timezone", default="UTC", help="the store's time zone (UTC)")
        create.add_argument("--json", action="store_true")
        listing = sub.add_parser("list", help="every merchant, with its members and addresses")
        listing.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["action"] == "list":
            self._list(opts["json"])
            return
        try:
            invitation = merchant_create(
                name=opts["name"], slug=opts["slug"], owner_email=opts["owner"], tz=opts["timezone"]
            )
        except TeamRefused as exc:
            raise CliError(str(exc), code="refused") from None
        merchant = invitation.merchant
        if opts["json"]:
            out = {"merchant": merchant.slug, "id": merchant.pk, "owner_invited": invitation.email}
            self.stdout.write(json.dumps(out))
            return
        self.stdout.write(
            f"{merchant.name} ({merchant.slug}) is created. {invitation.email} is invited as its"
            f" owner: the worker mails the link (see {invitation_link('…').rsplit('/', 2)[0]}/…)."
        )

    def _list(self, as_json: bool) -> None:
        rows: list[dict[str, Any]] = [
            {
                "slug": m.slug,
                "name": m.name,
                "members": m.memberships.count(),
                "addresses": [a.address for a in m.support_addresses.order_by("address")],
            }
            for m in Merchant.objects.order_by("slug")
        ]
        if as_json:
            self.stdout.write(json.dumps(rows))
            return
        if not rows:
            self.stdout.write("No merchant yet: python manage.py merchant create --help")
        for r in rows:
            self.stdout.write(
                f"{r['slug']:<20} {r['name']:<30} {r['members']} member(s)"
                f"  {', '.join(r['addresses']) or '(no support address)'}"
            )
