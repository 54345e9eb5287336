"""``python manage.py helpdesk_source MERCHANT SLUG --as OWNER [--reply-url URL] [--json]``:
connect a help desk (its Standard Webhooks secret printed once; run again for a new one)."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.utils.text import slugify

from deskhand.domain.apikeys.helpdesk import source_create
from deskhand.domain.cli import CliError, DeskhandCommand
from deskhand.domain.desk.models import Merchant
from deskhand.domain.desk.permissions import NotAllowed, NotVisible


class Command(DeskhandCommand):
    help = (
        "Connect a help desk to a merchant: it posts tickets and customer messages to "
        "/api/v1/helpdesk/MERCHANT/SLUG, signed with the secret printed once. Owners only."
    )
    not_done = "no help desk was connected"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("merchant")
        parser.add_argument("slug", help="a short name for the desk, e.g. zendesk")
        parser.add_argument("--as", dest="email", required=True)
        parser.add_argument("--reply-url", default="", help="where the agent's replies are posted")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        merchant = Merchant.objects.filter(slug=opts["merchant"]).first()
        user = get_user_model().objects.filter(email__iexact=opts["email"]).first()
        slug = slugify(opts["slug"])[:40]
        if not slug:
            raise CliError(
                "the source needs a short name of letters, digits or dashes.", code="invalid"
            )
        if merchant is None or user is None:
            raise CliError(
                f"no merchant {opts['merchant']!r} with a member {opts['email']!r}.",
                code="not_found",
            )
        try:
            source, secret = source_create(
                merchant=merchant, user=user, slug=slug, reply_url=opts["reply_url"]
            )
        except NotVisible:
            raise CliError(
                f"no merchant {opts['merchant']!r} with a member {opts['email']!r}.",
                code="not_found",
            ) from None
        except NotAllowed as exc:
            raise CommandError(str(exc)) from None
        url = f"/api/v1/helpdesk/{merchant.slug}/{source.slug}"
        if opts["json"]:
            self.stdout.write(
                json.dumps({"url": url, "secret": secret, "reply_url": source.reply_url})
            )
        else:
            self.stdout.write(
                f"{merchant.name} takes {source.slug}'s webhooks at {url}\nsecret (shown once): {secret}"
            )
