"""``python manage.py merchant create --name … --slug … --owner <email> [--timezone …]``,
``merchant list`` and ``merchant limits <slug> [--daily-spend-cap …] [--inbound-per-sender …]
[--inbound-per-address …] [--retention-days …] [--refund-adapter …] [--mail-adapter …]``.

The deployment's operator makes a merchant (the Django admin stays a read-only audit desk):
one transaction makes the merchant and invites its first owner, whose invitation goes out
through the notifications outbox (the worker sends it). ``merchant list`` shows what exists.
The owner then sets up the rest — team, addresses, settings — in the console.
"""

from __future__ import annotations

import json
from typing import Any

from approvals.merchant_settings import limits_change
from approvals.team import TeamRefused, merchant_create
from deskhand.domain.cli import CliError, DeskhandCommand
from deskhand.domain.desk.models import MailAdapter, Merchant, RefundAdapter
from deskhand.domain.desk.money import AmountRefused, parse_amount

# A run's words are kept at least this long: long enough to look into a complaint about it.
RETENTION_FLOOR_DAYS = 7


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
        limits = sub.add_parser("limits", help="the operator's limits of one merchant")
        limits.add_argument("slug")
        limits.add_argument("--daily-spend-cap", metavar="DOLLARS", help="model spend per day")
        limits.add_argument("--inbound-per-sender", type=int, metavar="N", help="mails an hour")
        limits.add_argument("--inbound-per-address", type=int, metavar="N", help="mails an hour")
        limits.add_argument("--retention-days", type=int, metavar="N", help="a run's words kept")
        limits.add_argument("--refund-adapter", choices=RefundAdapter.values)
        limits.add_argument("--mail-adapter", choices=MailAdapter.values)
        limits.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["action"] == "list":
            self._list(opts["json"])
            return
        if opts["action"] == "limits":
            self._limits(opts)
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
            " owner: a worker mails the link, which works once."
        )

    def _limits(self, opts: dict[str, Any]) -> None:
        merchant = Merchant.objects.filter(slug=opts["slug"]).first()
        if merchant is None:
            raise CliError(f"no merchant with the slug {opts['slug']!r}.", code="not_found")
        values: dict[str, Any] = {}
        if opts["daily_spend_cap"] is not None:
            try:
                values["daily_spend_cap_micros"] = parse_amount(opts["daily_spend_cap"]) * 10_000
            except AmountRefused as exc:
                raise CliError(f"--daily-spend-cap: {exc}", code="usage") from None
        for option, field, low in (
            ("inbound_per_sender", "inbound_per_sender_per_hour", 1),
            ("inbound_per_address", "inbound_per_address_per_hour", 1),
            ("retention_days", "retention_days", RETENTION_FLOOR_DAYS),
        ):
            if opts[option] is not None:
                if opts[option] < low:
                    flag = "--" + option.replace("_", "-")
                    raise CliError(f"{flag} must be at least {low}.", code="usage")
                values[field] = opts[option]
        for option in ("refund_adapter", "mail_adapter"):
            if opts[option] is not None:
                values[option] = opts[option]
        changed = limits_change(merchant=merchant, values=values)
        if opts["json"]:
            self.stdout.write(json.dumps({"merchant": merchant.slug, "changed": changed}))
            return
        said = "; ".join(f"{k}: {a} → {b}" for k, (a, b) in changed.items()) or "nothing changed"
        self.stdout.write(f"{merchant.name}: {said}.")

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
