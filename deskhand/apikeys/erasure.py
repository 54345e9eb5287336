"""The API's share of erasing a customer: the answers kept for retried writes about them.

A stored answer carries what the request returned (a ticket's subject, a thread, the
customer's address). Its body is replaced by a problem that says it was erased, so a
retry with the same ``Idempotency-Key`` still does not repeat the write, and learns
nothing of the customer.
"""

from __future__ import annotations

import dataclasses

from django.db.models import QuerySet

from deskhand.apikeys.models import StoredResponse
from deskhand.desk.models import Customer

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

    def counts(self) -> dict[str, int]:
        return {"api_stored_responses": self.responses().count()}

    def erase(self) -> dict[str, int]:
        out = self.counts()
        self.responses().update(status_code=410, body=ERASED_BODY)
        return out
