"""``python manage.py api_key MERCHANT --as OWNER (--create NAME --scope S… | --revoke PREFIX |
--list) [--json]``: a merchant's API keys, as the console's keys page manages them."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from deskhand.domain.apikeys.models import ApiKey, Scope
from deskhand.domain.apikeys.services import KeyRefused, key_create, key_revoke
from deskhand.domain.cli import CliError, DeskhandCommand
from deskhand.domain.desk.models import Merchant
from deskhand.domain.desk.permissions import NotAllowed, NotVisible, require_owner


def _row(key: ApiKey) -> dict[str, Any]:
    return {
        "prefix": key.prefix,
        "name": key.name,
        "scopes": key.scopes,
        "created_by": key.created_by_name,
        "created_at": key.created_at.isoformat(),
        "last_used_at": key.last_used_at.isoformat() if key.last_used_at else None,
        "revoked_at": key.revoked_at.isoformat() if key.revoked_at else None,
    }


class Command(DeskhandCommand):
    help = "Create (the key is printed once), revoke or list a merchant's API keys. Owners only."
    not_done = "no key was changed"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("merchant", help="the merchant's slug, e.g. northwind")
        parser.add_argument("--as", dest="email", required=True)
        what = parser.add_mutually_exclusive_group(required=True)
        what.add_argument("--create", metavar="NAME", help="a new key with this name")
        what.add_argument("--revoke", metavar="PREFIX", help="revoke the key with this prefix")
        what.add_argument("--list", action="store_true")
        parser.add_argument(
            "--scope", action="append", choices=Scope.values, default=[], help="repeatable"
        )
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        merchant = Merchant.objects.filter(slug=opts["merchant"]).first()
        user = get_user_model().objects.filter(email__iexact=opts["email"]).first()
        if merchant is None or user is None:
            raise CliError(
                f"no merchant {opts['merchant']!r} with a member {opts['email']!r}.",
                code="not_found",
            )
        try:
            require_owner(user, merchant, "manage API keys")
            if opts["list"]:
                rows = [_row(k) for k in ApiKey.objects.filter(merchant=merchant)]
                if opts["json"]:
                    self.stdout.write(json.dumps({"keys": rows}))
                for r in [] if opts["json"] else rows:
                    state = (
                        "revoked"
                        if r["revoked_at"]
                        else f"last used {r['last_used_at'] or 'never'}"
                    )
                    self.stdout.write(
                        f"{r['prefix']}  {r['name']}  {','.join(r['scopes'])}  {state}"
                    )
                return
            if opts["revoke"]:
                key = ApiKey.objects.filter(merchant=merchant, prefix=opts["revoke"]).first()
                if key is None:
                    raise CliError(
                        f"{merchant.name} has no key {opts['revoke']!r}.", code="not_found"
                    )
                key = key_revoke(key=key, user=user)
                self.stdout.write(
                    json.dumps(_row(key)) if opts["json"] else f"Revoked key {key.label}."
                )
                return
            key, token = key_create(
                merchant=merchant, user=user, name=opts["create"], scopes=opts["scope"]
            )
        except NotVisible:
            raise CliError(
                f"no merchant {opts['merchant']!r} with a member {opts['email']!r}.",
                code="not_found",
            ) from None
        except (NotAllowed, KeyRefused) as exc:
            raise CommandError(str(exc)) from None
        if opts["json"]:
            self.stdout.write(json.dumps({**_row(key), "token": token}))
        else:
            self.stdout.write(f"Key {key.label} ({', '.join(key.scopes)}), shown once:\n{token}")
