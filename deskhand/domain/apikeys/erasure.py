"""The API's share of erasing a customer: the answers kept for retried writes about them, and
the agent's replies relayed to a help desk.

A stored answer carries what the request returned (a ticket's subject, a thread, the
customer's address). Its body is replaced by a problem that says it was erased, so a
retry with the same ``Idempotency-Key`` still does not repeat the write, and learns
nothing of the customer.
"""

from __future__ import annotations

import dataclasses

from django.db.models import F, QuerySet

from deskhand.domain.apikeys.models import HelpdeskReply, StoredResponse
from deskhand.domain.desk.models import Customer

ERASED_BODY = {
    "type": "urn:deskhand:problem:erased",
    "title": "Erased",
    "status": 410,
    "detail": "The answer to this request was erased with the customer it was about.",
}


@dataclasses.dataclass(frozen=True)
class StoredResponseRows:
    customer: Customer

    def responses(self) -> QuerySet[StoredResponse]:
        return StoredResponse.objects.filter(customer_id=self.customer.pk).exclude(status_code=410)

    def replies(self) -> QuerySet[HelpdeskReply]:
        """Replies relayed to a help desk carry the agent's words to the customer."""
        return HelpdeskReply.objects.filter(message__ticket__customer=self.customer).exclude(
            payload={"erased": True}
        )

    def counts(self) -> dict[str, int]:
        return {
            "api_stored_responses": self.responses().count(),
            "helpdesk_replies": self.replies().count(),
        }

    def erase(self) -> dict[str, int]:
        out = self.counts()
        self.responses().update(status_code=410, body=ERASED_BODY)
        # A reply not yet delivered is not sent afterwards: its words are gone.
        self.replies().update(payload={"erased": True}, sent_at=F("created_at"))
        return out
