"""``python manage.py erase_customer EMAIL --as OWNER [--merchant SLUG] [--dry-run] [--json]``.

Erases one customer's personal data everywhere Deskhand keeps it and keeps the
merchant's money facts (``agent.privacy.erasure``; what and why: docs/privacy.md).
``--dry-run`` prints what would change and changes nothing. The output names the
customer by id, never by the address it was given.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandError

from agent.management.helpers import user_by_email
from agent.privacy.erasure import ErasureRefused, customer_erase, erasure_for
from approvals.models import Channel
from deskhand.domain.cli import DeskhandCommand
from deskhand.domain.desk.permissions import NotAllowed, NotVisible

LABELS = {
    "customer": "customer record (pseudonymised)",
    "tickets": "tickets (subjects)",
    "ticket_messages": "ticket messages",
    "emails": "emails sent to them",
    "inbound_emails": "emails they sent (bytes and addresses)",
    "inbound_attachments": "attachments they sent",
    "order_reasons": "order cancellation reasons",
    "refund_reasons": "refund reasons",
    "runs": "runs",
    "steps": "step payloads",
    "approvals": "approvals (wording)",
    "staff_notes": "staff notes",
    "audit_events": "audit details",
    "ledger_entries": "ledger entries (wording; amounts kept)",
    "dbos_workflows": "DBOS workflow histories (deleted)",
}


class Command(DeskhandCommand):
    help = (
        "Erase a customer's personal data (their record, tickets, emails, runs' words, DBOS "
        "history), keeping amounts, orders, times, approvers and argument hashes. Owners only; "
        "refused while one of their runs is in flight."
    )
    not_done = "nothing was erased"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("email", help="the customer's email address")
        parser.add_argument("--as", dest="as_email", required=True, help="an owner's email")
        parser.add_argument("--merchant", help="the merchant's slug, if the owner has several")
        parser.add_argument("--dry-run", action="store_true", help="say what would change")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **opts: Any) -> None:
        user = user_by_email(opts["as_email"])
        try:
            erasure = erasure_for(email=opts["email"], user=user, merchant_slug=opts["merchant"])
            counts = (
                erasure.counts()
                if opts["dry_run"]
                else customer_erase(erasure, user=user, channel=Channel.CLI)
            )
        except NotVisible as exc:
            raise CommandError(f"{exc}.") from None
        except (NotAllowed, ErasureRefused) as exc:
            raise CommandError(str(exc)) from None
        customer = erasure.customer
        if opts["json"]:
            self.stdout.write(
                json.dumps(
                    {
                        "customer": customer.pk,
                        "merchant": customer.merchant.slug,
                        "dry_run": opts["dry_run"],
                        "counts": counts,
                    },
                    sort_keys=True,
                )
            )
            return
        head = "would erase" if opts["dry_run"] else "erased"
        self.stdout.write(f"{head} customer {customer.pk} at {customer.merchant.name}:")
        for key, label in LABELS.items():
            self.stdout.write(f"  {counts.get(key, 0):>6}  {label}")
        if opts["dry_run"]:
            self.stdout.write("nothing was changed (--dry-run).")
        else:
            self.stdout.write(
                "kept: order references, totals, refund and ledger amounts, times, approvers, "
                "argument hashes."
            )
