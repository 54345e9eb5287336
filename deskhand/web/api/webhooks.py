"""The webhooks' shapes, for the OpenAPI document: a help desk's deliveries in, and the events
Deskhand sends out (the document's ``webhooks``).

Neither is parsed through these models. A delivery in is checked field by field by
``deskhand.domain.apikeys.helpdesk.deliver`` after its signature, and the events out are written by
``approvals.notifications`` and ``deskhand.domain.apikeys.relay``; these models say the same rules
for an integrator, and ``tests/api/test_webhooks_out.py`` and ``test_helpdesk.py`` hold
real payloads to them (the events' ``extra="forbid"``: a field added on one side and not
the other fails there).
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# Not blank and no NUL, as ``deliver``'s ``_text`` asks: spaces, then the first other one.
_TEXT = r"^\s*[^\s\x00][^\x00]*$"
_NO_NUL = r"^[^\x00]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- in: a help desk's delivery ---------------------------------------------------


class HelpdeskCustomer(BaseModel):
    email: str = Field(max_length=254, pattern=r"^[^\x00]*@[^\x00]*$")
    name: str = Field(default="", max_length=200, pattern=_NO_NUL)


class HelpdeskTicketCreated(BaseModel):
    """A new ticket at the desk: its first customer line. A second one for the same
    ``external_id`` lands on the same ticket."""

    type: Literal["ticket.created"]
    external_id: str = Field(min_length=1, max_length=120, pattern=_TEXT)
    customer: HelpdeskCustomer
    subject: str = Field(default="", max_length=300, pattern=_NO_NUL)
    body: str = Field(min_length=1, max_length=20000, pattern=_TEXT)


class HelpdeskMessageCreated(BaseModel):
    """The customer wrote again on a ticket the desk sent before (404 if it did not)."""

    type: Literal["message.created"]
    external_id: str = Field(min_length=1, max_length=120, pattern=_TEXT)
    body: str = Field(min_length=1, max_length=20000, pattern=_TEXT)


class HelpdeskAccepted(BaseModel):
    """201 the first time, 200 (``duplicate``) for a redelivery of the same ``webhook-id``."""

    ticket: str
    external_id: str
    message: int
    event: Literal["ticket.created", "message.created"]
    duplicate: bool


# --- out: the events ------------------------------------------------------------------


class ApprovalFacts(_Strict):
    id: uuid.UUID
    tool: str
    ticket: str
    status: str
    requested_at: dt.datetime
    expires_at: dt.datetime
    escalated_at: dt.datetime | None
    url: str = Field(description="The approval in the console.")


class ApprovalEvent(_Strict):
    """An approval requested, escalated past the merchant's SLA, or about to expire."""

    event: Literal["approval.requested", "approval.escalated", "approval.expiring"]
    merchant: str
    delivery_id: uuid.UUID = Field(description="Equal to webhook-id: deduplicate on it.")
    approval: ApprovalFacts


class RunFacts(_Strict):
    id: uuid.UUID
    ticket: str
    status: str
    stop_reason: str | None
    steps: int
    cost_micros: int
    finished_at: dt.datetime | None
    url: str = Field(description="The run in the console.")


class RunFinishedEvent(_Strict):
    """A run ended, whatever its status. No summary and nothing a customer wrote: read the
    run with ``GET /api/v1/runs/{id}``."""

    event: Literal["run.finished"]
    merchant: str
    delivery_id: uuid.UUID = Field(description="Equal to webhook-id: deduplicate on it.")
    run: RunFacts


class DeskReplyMessage(_Strict):
    id: int
    subject: str
    body: str
    created_at: dt.datetime


class DeskReply(_Strict):
    """The agent's line on a ticket that came from a help desk, sent to the source's
    ``reply_url`` under the source's secret (``webhook-id`` is ``reply_<message id>``)."""

    type: Literal["message.created"]
    external_id: str
    ticket: str
    message: DeskReplyMessage


class RefundFacts(_Strict):
    id: int
    order: str = Field(description="The order's reference, as the store pushed it.")
    order_version: int = Field(description="The order's version Deskhand held when it refunded.")
    amount_cents: int = Field(description="Minor units of the currency.")
    currency: str
    provider_refund_id: str | None = Field(
        description="The refund's id at the payment provider; null for one made in Deskhand's "
        "own database."
    )
    created_at: dt.datetime


class RefundCreatedEvent(_Strict):
    """Money went back on an order the store pushed (``PUT /api/v1/orders/{reference}``):
    the store's own system, which holds the order, records the refund. Sent once the refund
    has moved; at least once, so deduplicate on ``delivery_id``. No reason and nothing a
    customer wrote: the run (``GET /api/v1/runs/{id}``) says why."""

    event: Literal["refund.created"]
    merchant: str
    delivery_id: uuid.UUID = Field(description="Equal to webhook-id: deduplicate on it.")
    refund: RefundFacts
