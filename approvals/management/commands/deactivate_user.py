"""``python manage.py deactivate_user EMAIL [--delete] [--json]``: a staff member leaves.

An operator's command (like ``createsuperuser``): an account is global, so it is
not a merchant owner's to switch off. Deactivating is immediate — the account can
no longer sign in, its open sessions stop carrying it, and it can no longer decide,
steer, cancel or start runs from the console or the command line. ``--delete`` then
removes the account; every audit event, approval and staff note it left keeps
naming it (``actor_ref``/``actor_name``, ``decided_by_name``, ``author_name``).
Each merchant the person belonged to gets one audit event saying so.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction

from approvals.audit import audit_record
from approvals.models import Channel, person_name
from deskhand.domain.cli import CliError, DeskhandCommand
from deskhand.domain.desk.models import Membership


class Command(DeskhandCommand):
    help = (
        "Deactivate a staff account (no more sign-in or actions; its records stay), and with "
        "--delete remove it: its audit trail keeps naming it."
    )
    not_done = "the account was not changed"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("email")
        parser.add_argument("--delete", action="store_true", help="then delete the account")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        user = get_user_model().objects.filter(email__iexact=opts["email"].strip()).first()
        if user is None:
            raise CliError(f"no user with email {opts['email']!r}.", code="not_found")
        name, ref = person_name(user), user.pk
        action = "staff.deleted" if opts["delete"] else "staff.deactivated"
        with transaction.atomic():
            merchants = list(
                Membership.objects.filter(user=user).values_list("merchant_id", flat=True)
            )
            user.is_active = False
            user.save(update_fields=["is_active"])
            for merchant_id in merchants:
                audit_record(
                    merchant_id=merchant_id,
                    actor=None,  # an operator's act, not a merchant member's
                    action=action,
                    channel=Channel.CLI,
                    detail={"user": ref, "name": name},
                )
            if opts["delete"]:
                user.delete()
        if opts["json"]:
            self.stdout.write(json.dumps({"user": ref, "name": name, "action": action}))
        else:
            done = "deleted" if opts["delete"] else "deactivated"
            self.stdout.write(f"{name} (user {ref}) is {done}; their past acts still name them.")
