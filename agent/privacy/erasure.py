"""Erasing a customer: their personal data goes from everywhere, the merchant's accounts stay whole.

``erasure_for`` finds the customer (by address, at a merchant the acting owner
owns) and refuses, with a sentence, what cannot be erased now: a customer with a
run in flight (cancel it first). ``Erasure.counts`` says what would change (the
``--dry-run``); ``customer_erase`` does it:

1. under a lock on the customer's tickets (a run cannot start on them meanwhile),
   DBOS's history of every run on those tickets is deleted (``dbos_client``) —
   first, and on its own connection: if what follows fails, the run rows are
   intact and the erasure can simply be run again, whereas the other order could
   leave checkpoints behind with no way left to find them by the address;
2. each run is redacted (``agent.privacy.redaction``, marker ``[erased]``), its ledger's
   words included — amounts, orders, keys, hashes and approvers stay;
3. the mail they sent loses its bytes, addresses and attachments
   (``deskhand.domain.mail.erasure``; first, while their address still finds the held rows),
   then the desk's rows are pseudonymised (``deskhand.domain.desk.customer_data``);
4. one audit event records who erased which customer (by id) and the counts,
   never the data.

Steps 2-4 are one transaction.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from django.db import transaction
from django.utils import timezone

from agent.models import OPEN_STATUSES, Run, Step
from agent.models.ledger import LedgerEntry
from agent.models.privacy import RedactionReason
from agent.privacy.redaction import ERASED, redact_json, run_redact
from approvals.audit import audit_record
from approvals.models import Approval, AuditEvent, Channel, StaffNote
from deskhand.domain.apikeys.erasure import StoredResponseRows
from deskhand.domain.desk.customer_data import CustomerRows, customers_by_email
from deskhand.domain.desk.models import Customer, Membership, Role, Ticket
from deskhand.domain.desk.permissions import NotAllowed, NotVisible, require_actor
from deskhand.domain.mail.erasure import InboundRows
from deskhand.infra.dbos import client as dbos_client


class ErasureRefused(Exception):
    """The customer cannot be erased now, or not by this person; the message says why."""


@dataclasses.dataclass
class Erasure:
    customer: Customer
    runs: list[Run]

    @property
    def rows(self) -> CustomerRows:
        return CustomerRows(self.customer)

    def counts(self) -> dict[str, int]:
        """What the erasure changes, row by row, as ``customer_erase`` reports it."""
        ids = [r.pk for r in self.runs]
        audit = sum(
            1
            for detail in AuditEvent.objects.filter(run_id__in=ids).values_list("detail", flat=True)
            if redact_json(detail, ERASED) != detail
        )
        return {
            **self.rows.counts(),
            **InboundRows(self.customer).counts(),
            **StoredResponseRows(self.customer).counts(),
            "runs": len(ids),
            "steps": Step.objects.filter(run_id__in=ids).count(),
            "approvals": Approval.objects.filter(run_id__in=ids).count(),
            "staff_notes": StaffNote.objects.filter(run_id__in=ids).count(),
            "audit_events": audit,
            "ledger_entries": LedgerEntry.objects.filter(run_id__in=ids).count(),
            "dbos_workflows": len(dbos_client.workflow_states([str(i) for i in ids])),
        }


def _owner_at(user: Any, customer: Customer) -> None:
    membership = require_actor(user, customer.merchant_id, "erase a customer's data")
    if membership.role != Role.OWNER:
        raise NotAllowed(
            f"{user} is {membership.role} at {customer.merchant.name}; only an owner may erase a "
            "customer's data."
        )


def erasure_for(*, email: str, user: Any, merchant_slug: str | None = None) -> Erasure:
    """The customer with this address at a merchant ``user`` belongs to, checked erasable.

    Raises ``NotVisible`` (no such customer where the user works), ``NotAllowed`` (not
    an owner there, or deactivated) or ``ErasureRefused`` (ambiguous, or a run in flight).
    """
    merchants = Membership.objects.filter(user_id=user.pk)
    if merchant_slug:
        merchants = merchants.filter(merchant__slug=merchant_slug)
    found = list(
        customers_by_email(
            email=email, merchant_ids=list(merchants.values_list("merchant_id", flat=True))
        )
    )
    if not found:
        raise NotVisible(f"no customer with that address at a merchant {user} belongs to")
    if len(found) > 1:
        slugs = ", ".join(c.merchant.slug for c in found)
        raise ErasureRefused(
            f"that address is a customer at several merchants ({slugs}); name one with --merchant."
        )
    customer = found[0]
    _owner_at(user, customer)
    runs = list(Run.objects.filter(ticket__customer=customer).order_by("created_at"))
    live = [r for r in runs if r.status in OPEN_STATUSES]
    if live:
        r = live[0]
        raise ErasureRefused(
            f"customer {customer.pk} has a run in flight on {r.ticket.reference} ({r.pk}, {r.status});"
            " cancel it first, then erase."
        )
    return Erasure(customer=customer, runs=runs)


def customer_erase(
    erasure: Erasure,
    *,
    user: Any,
    channel: str = Channel.CLI,
    now: dt.datetime | None = None,
    asked_by: str = "",
) -> dict[str, int]:
    """Erase the customer (see the module); return the counts the audit event records.

    ``user`` ``None`` is the system acting on a platform's request (Shopify's
    ``customers/redact``, ``agent.privacy.platform``): no owner check, the audit event has
    no actor (it reads "the system"), channel ``system``, and ``asked_by`` names the request.
    """
    now = now or timezone.now()
    customer = erasure.customer
    with transaction.atomic():
        # The tickets' row locks: a run being created on one (its foreign key) waits for us,
        # and is then a run over erased words.
        list(Ticket.objects.select_for_update().filter(customer=customer).values_list("pk"))
        if user is not None:
            _owner_at(user, customer)
        runs = list(Run.objects.filter(ticket__customer=customer).order_by("created_at"))
        live = [r for r in runs if r.status in OPEN_STATUSES]
        if live:
            raise ErasureRefused(
                f"customer {customer.pk} has a run in flight ({live[0].pk}, {live[0].status});"
                " cancel it first, then erase."
            )
        ids = [str(r.pk) for r in runs]
        still = [w for w, s in dbos_client.workflow_states(ids).items() if s.active]
        if still:
            raise ErasureRefused(
                f"run {still[0]}'s workflow has not finished yet; try again in a minute."
            )
        deleted = set(dbos_client.delete_finished_workflows(ids))
        counts: dict[str, int] = {
            "runs": len(runs),
            "steps": 0,
            "approvals": 0,
            "staff_notes": 0,
            "audit_events": 0,
            "ledger_entries": 0,
            "dbos_workflows": len(deleted),
        }
        for run in runs:
            what = run_redact(
                run,
                reason=RedactionReason.ERASURE,
                now=now,
                ledger=True,
                dbos_deleted=str(run.pk) in deleted,
            ).what
            for key in ("steps", "approvals", "staff_notes", "audit_events", "ledger_entries"):
                counts[key] += int(what[key])
        inbound = {**InboundRows(customer).erase(now=now), **StoredResponseRows(customer).erase()}
        counts = {**erasure.rows.erase(marker=ERASED, now=now), **inbound, **counts}
        audit_record(
            merchant_id=customer.merchant_id,
            actor=user,
            action="customer.erase",
            channel=channel,
            detail={"customer": customer.pk, "counts": counts}
            | ({"asked_by": asked_by} if asked_by else {}),
        )
    return counts
