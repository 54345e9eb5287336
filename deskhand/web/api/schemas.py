"""The API's typed shapes: what a client sends and what it gets back (the OpenAPI document)."""

from __future__ import annotations

import datetime as dt
import re
import uuid
from typing import Annotated, Any, Literal

from ninja import Schema
from pydantic import AfterValidator, AwareDatetime, Field, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

# NUL and the other C0 controls but tab and newlines, and lone surrogates: Postgres cannot
# store the first, UTF-8 cannot encode the last; refused as input, never a 500.
UNSTORABLE = r"\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff"
_UNSTORABLE = re.compile(f"[{UNSTORABLE}]")

# An email as the API takes one: something, one @, something; no spaces or control characters.
EMAIL = r"^[^@\s\x00-\x1f]+@[^@\s\x00-\x1f]+$"


def _storable(value: str) -> str:
    if _UNSTORABLE.search(value):
        raise ValueError("must not contain control characters or unpaired surrogates")
    return value


class _StorableInDocument:
    """Writes ``_storable``'s rule into the OpenAPI document as a ``pattern``, so a client (or
    schemathesis) never sends, as valid, text the server refuses. Without the surrogates: a
    regex of Unicode text cannot name them (JSON's ``"\\ud800"`` alone is not text), and
    ``_storable`` refuses them all the same."""

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = handler(core_schema)
        schema.setdefault("pattern", r"^[^\x00-\x08\x0b\x0c\x0e-\x1f]*$")
        return schema


Clean = Annotated[str, AfterValidator(_storable), _StorableInDocument()]


# --- in ---------------------------------------------------------------------------

PAGE_MAX = 100
# A page's size, and the opaque cursor this API wrote (base64url, no padding): declared so a
# request the document calls valid is never refused for them (a forged cursor still is: 400).
Limit = Annotated[int, Field(ge=1, le=PAGE_MAX)]
Cursor = Annotated[str, Field(max_length=200, pattern=r"^[A-Za-z0-9_-]*$")] | None
# A ticket's reference as the desk writes it (``NW-12``); anything else names no ticket.
REFERENCE = r"^[A-Za-z0-9-]{1,32}$"


class TicketIn(Schema):
    customer_email: Clean = Field(min_length=3, max_length=254, pattern=EMAIL)
    customer_name: Clean = Field(default="", max_length=200)
    subject: Clean = Field(min_length=1, max_length=300)
    body: Clean = Field(min_length=1, max_length=20000)


class MessageIn(Schema):
    body: Clean = Field(min_length=1, max_length=20000)


class RunIn(Schema):
    ticket: str = Field(
        min_length=1,
        max_length=32,
        pattern=REFERENCE,
        description="The ticket's reference, e.g. NW-1.",
    )


# An order's reference as a store writes it (``1001``, ``SO-2026-0042``).
ORDER_REFERENCE = r"^[A-Za-z0-9-]{1,32}$"


class OrderLineIn(Schema):
    sku: Clean = Field(min_length=1, max_length=40, pattern=r"^\S(.*\S)?$")
    description: Clean = Field(default="", max_length=200)
    quantity: int = Field(ge=1, le=1_000_000)
    unit_price_cents: int = Field(ge=0, le=10**15, description="Minor units of the currency.")


class OrderIn(Schema):
    """The whole order, as the store holds it now. ``version`` is the store's own revision
    number of this order: a push with a version below the stored one is refused (409) and the
    stored, newer order kept; the same version again with the same content changes nothing."""

    version: int = Field(ge=0, le=2**62, description="Raise it with every change of the order.")
    customer_email: Clean = Field(min_length=3, max_length=254, pattern=EMAIL)
    customer_name: Clean = Field(default="", max_length=200)
    status: Literal["placed", "shipped", "delivered", "cancelled"]
    currency: str = Field(pattern=r"^[A-Z]{3}$", description="ISO 4217, like USD.")
    total_cents: int = Field(ge=0, le=10**15, description="Minor units of the currency.")
    placed_at: AwareDatetime
    delivered_at: AwareDatetime | None = None
    payment_reference: Clean = Field(
        default="",
        max_length=100,
        description="The charge at the merchant's payment provider a refund is made against.",
    )
    items: list[OrderLineIn] = Field(default_factory=list, max_length=200)


class OrderOut(Schema):
    reference: str
    version: int
    outcome: Literal["created", "updated", "unchanged"] = Field(
        description="What this push did: stored a new order, replaced an older version, or "
        "nothing (the same version and content again)."
    )
    status: str
    currency: str
    total_cents: int
    refunded_cents: int
    customer_email: str
    placed_at: dt.datetime
    delivered_at: dt.datetime | None
    items: list[OrderLineIn]


class SteerIn(Schema):
    body: Clean = Field(min_length=1, max_length=4000)


class DecideIn(Schema):
    decision: Literal["approve", "deny"]
    member: Clean = Field(
        min_length=3,
        max_length=254,
        pattern=EMAIL,
        description="The email of the person this decision is theirs: an owner or agent "
        "of the key's merchant (anyone else is a 422, unknown-member).",
    )
    reason: Clean = Field(default="", max_length=500, description="Required to deny.")
    changes: dict[Clean, int | Clean] | None = Field(
        default=None,
        description="Approve a narrower call: the fields to change (e.g. a smaller amount_cents).",
    )


# --- out --------------------------------------------------------------------------


class MessageOut(Schema):
    id: int
    kind: str
    channel: str
    direction: str
    subject: str
    body: str
    from_address: str
    created_at: dt.datetime


class RunBrief(Schema):
    id: uuid.UUID
    status: str
    stop_reason: str
    created_at: dt.datetime


class TicketOut(Schema):
    reference: str
    subject: str
    status: str
    priority: str
    tags: list[str]
    customer_name: str
    customer_email: str
    created_at: dt.datetime
    updated_at: dt.datetime


class TicketDetail(TicketOut):
    messages: list[MessageOut]
    runs: list[RunBrief]


class TicketPage(Schema):
    items: list[TicketOut]
    next_cursor: str | None


class MessageCreated(Schema):
    ticket: str
    message: MessageOut


class StepOut(Schema):
    seq: int
    kind: str
    tool: str
    arguments: Any
    result: Any
    ok: bool
    input_tokens: int
    output_tokens: int
    cost_micros: int
    latency_ms: int
    attempts: int
    replayed: bool
    created_at: dt.datetime


class OrderFacts(Schema):
    reference: str
    status: str
    total_cents: int
    currency: str
    refunded_cents: int
    in_flight_cents: int
    placed_at: dt.datetime


class AskedFacts(Schema):
    """The order's money as the request showed it: the approval holds for these facts, and a
    refund is not paid (the run asks again) if the refunded total moved before it."""

    order_reference: str
    currency: str
    total_cents: int
    refunded_cents: int
    remaining_cents: int


class ApprovalOut(Schema):
    id: uuid.UUID
    run_id: uuid.UUID
    ticket: str
    tool: str
    arguments: Any
    args_hash: str
    preview: str
    status: str
    requested_at: dt.datetime
    expires_at: dt.datetime
    decided_by: str
    decided_at: dt.datetime | None
    reason: str
    approved_arguments: Any
    order: OrderFacts | None
    asked_facts: AskedFacts | None = None


class ApprovalPage(Schema):
    items: list[ApprovalOut]


class RunOut(Schema):
    id: uuid.UUID
    ticket: str
    status: str
    stop_reason: str
    provider: str
    model: str
    steps: int
    input_tokens: int
    output_tokens: int
    cost_micros: int
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None


class RunDetail(RunOut):
    stop_detail: str
    summary: str
    waiting_until: dt.datetime | None
    wait_reason: str
    step_log: list[StepOut]
    approvals: list[ApprovalOut]


class RunPage(Schema):
    items: list[RunOut]
    next_cursor: str | None


class UsageDayOut(Schema):
    day: dt.date
    runs: int
    spend_micros: int
    refunds_cents: int
    refund_count: int
    in_flight_cents: int
    spend_pct: int
    refund_pct: int


class UsageOut(Schema):
    merchant: str
    timezone: str
    daily_spend_cap_micros: int
    daily_refund_ceiling_cents: int
    days: list[UsageDayOut]
