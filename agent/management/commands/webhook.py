"""``python manage.py webhook MERCHANT --as OWNER (--url URL | --off) [--json]``: the chat webhook."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError

from agent.management.helpers import user_by_email
from approvals.models import Channel
from approvals.notifications import WebhookRefused, webhook_set
from deskhand.domain.cli import CliError, DeskhandCommand
from deskhand.domain.desk.models import Merchant
from deskhand.domain.desk.permissions import NotAllowed, NotVisible


class Command(DeskhandCommand):
    help = (
        "Point a merchant's approval webhook at a URL with a fresh signing secret (printed once), "
        "or switch it off. Owners only."
    )
    not_done = "the webhook was not changed"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("merchant", help="the merchant's slug, e.g. northwind")
        parser.add_argument("--as", dest="email", required=True)
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--url", help="where to POST signed notification events")
        target.add_argument("--off", action="store_true", help="stop sending webhooks")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        merchant = Merchant.objects.filter(slug=opts["merchant"]).first()
        if merchant is None:
            raise CliError(f"no merchant {opts['merchant']!r}.", code="not_found")
        user = user_by_email(opts["email"])
        try:
            hook, secret = webhook_set(
                merchant=merchant,
                user=user,
                url=None if opts["off"] else opts["url"],
                channel=Channel.CLI,
            )
        except NotVisible:
            raise CliError(f"no merchant {opts['merchant']!r}.", code="not_found") from None
        except (NotAllowed, WebhookRefused) as exc:
            raise CommandError(str(exc)) from None
        if opts["json"]:
            out = {"merchant": merchant.slug, "url": hook.url, "active": hook.active}
            self.stdout.write(json.dumps({**out, **({"secret": secret} if secret else {})}))
        elif secret:
            self.stdout.write(
                f"{merchant.name}'s webhook: {hook.url}\nsigning secret (shown once): {secret}"
            )
        else:
            self.stdout.write(f"{merchant.name}'s webhook is off.")
