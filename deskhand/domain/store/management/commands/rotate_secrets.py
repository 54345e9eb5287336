"""``python manage.py rotate_secrets [--json]``: reseal every stored credential under the first
key of ``DESKHAND_SECRET_KEYS``.

Rotation (``deskhand/infra/sealed.py``): put the new key first, keep the old ones after it,
deploy, run this, then drop the old keys. Each connection is resealed under its row lock in
its own transaction, so a run reading a token meanwhile reads either seal, both of which
open. A secret no configured key opens stops the command with a sentence naming the shop
(never the secret), and what was resealed before it stays resealed.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import transaction

from deskhand.domain.cli import CliError, DeskhandCommand
from deskhand.domain.store.models import ShopifyConnection
from deskhand.infra.sealed import SealBroken


class Command(DeskhandCommand):
    help = "Reseal every stored store credential under the first key of DESKHAND_SECRET_KEYS."
    not_done = "no secret was resealed"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        resealed = 0
        for pk in ShopifyConnection.objects.order_by("pk").values_list("pk", flat=True):
            with transaction.atomic():
                connection = ShopifyConnection.objects.select_for_update().get(pk=pk)
                try:
                    connection.reseal()
                except SealBroken:
                    raise CliError(
                        f"The secrets of {connection.shop_domain} open with no key in "
                        f"DESKHAND_SECRET_KEYS; {resealed} connection(s) were resealed before it.",
                        code="refused",
                    ) from None
                connection.save(update_fields=["access_token_sealed", "webhook_secret_sealed"])
            resealed += 1
            self.not_done = f"the connections after the first {resealed} were not resealed"
        if opts["json"]:
            self.stdout.write(json.dumps({"resealed": resealed}))
        else:
            self.stdout.write(f"Resealed {resealed} store connection(s) under the first key.")
