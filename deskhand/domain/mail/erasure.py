"""Inbound mail's share of erasing a customer: the messages as they arrived.

Every row this customer's mail left — threaded under them, on their tickets, or held
(quarantined, ignored) from their address at that merchant — loses its raw bytes, its
attachments, its addresses, subject and Message-ID text. The row itself stays, with its
status, times and the keyed hash of its Message-ID: the merchant's record of how much
mail came in still adds up, and the same message delivered again is still a duplicate,
so nothing erased comes back. Call it before the customer's address is pseudonymised
(``agent.privacy.erasure`` does): the held rows are found by that address.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

from django.db import transaction
from django.db.models import Q, QuerySet

from deskhand.domain.desk.models import Customer
from deskhand.domain.mail.models import InboundAttachment, InboundEmail


@dataclasses.dataclass(frozen=True)
class InboundRows:
    customer: Customer

    def emails(self) -> QuerySet[InboundEmail]:
        c = self.customer
        return InboundEmail.objects.filter(
            merchant_id=c.merchant_id, erased_at__isnull=True
        ).filter(Q(customer=c) | Q(ticket__customer=c) | Q(from_address=c.email.strip().lower()))

    def attachments(self) -> QuerySet[InboundAttachment]:
        return InboundAttachment.objects.filter(inbound__in=self.emails())

    def counts(self) -> dict[str, int]:
        return {
            "inbound_emails": self.emails().count(),
            "inbound_attachments": self.attachments().count(),
        }

    def erase(self, *, now: dt.datetime) -> dict[str, int]:
        with transaction.atomic():
            out = self.counts()
            ids = list(self.emails().values_list("pk", flat=True))
            InboundAttachment.objects.filter(inbound_id__in=ids).delete()
            InboundEmail.objects.filter(pk__in=ids).update(
                raw=b"",
                recipient="",
                envelope_sender=None,
                envelope_recipients=[],
                from_address="",
                subject="",
                message_id="",
                erased_at=now,
            )
        return out
