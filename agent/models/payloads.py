"""Which ``agent.steps`` ``Row`` type each kind of step row records, and the one reader.

``Step.result`` is a JSON column that replay, forks, the gate and the console decide from;
with free JSON a misspelt key fails silently. So ``agent.record.steplog.log_step`` writes
only the kind's ``Row`` (``of_kind``), ``agent.privacy.redaction`` rewrites the same types
without their words, and ``read(step)`` (also ``Step.payload``) is the only reader: a row
from before rows were versioned (no ``version`` key: ``LEGACY``) reads the same way. Queries
that look inside the column use the ``Q`` helpers below, so its JSON paths are spelled here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from django.db import models
from django.db.models import Q

from agent.steps import (
    ApprovalPayload,
    EndPayload,
    ModelPayload,
    NotePayload,
    Row,
    StepPayload,
    ToolPayload,
    UndoPayload,
)


class StepKind(models.TextChoices):
    MODEL = "model"
    TOOL = "tool"
    APPROVAL = "approval"
    NOTE = "note", "staff note"
    BOUND = "bound"
    FINAL = "final"
    ERROR = "error"
    UNDO = "undo"


KINDS: dict[str, type[Row]] = {
    StepKind.MODEL: ModelPayload,
    StepKind.TOOL: ToolPayload,
    StepKind.APPROVAL: ApprovalPayload,
    StepKind.NOTE: NotePayload,
    StepKind.FINAL: EndPayload,
    StepKind.BOUND: EndPayload,
    StepKind.ERROR: EndPayload,
    StepKind.UNDO: UndoPayload,
}


class PayloadError(ValueError):
    """A payload that does not fit its step kind."""


def of_kind(kind: str, payload: Row | None) -> StepPayload:
    """The payload to write for ``kind`` (``None``: the kind's empty one), checked."""
    cls = KINDS.get(kind)
    if cls is None:
        raise PayloadError(f"no payload type for step kind {kind!r}")
    if not isinstance(payload, (cls, type(None))):
        raise PayloadError(f"a {type(payload).__name__} cannot be written as a {kind} step")
    return payload or cls()  # type: ignore[return-value]


class StepRow(Protocol):
    """What ``read`` needs of a step row (``agent.models.Step``, which imports this module)."""

    kind: str
    seq: int
    result: Any
    arguments: Any


def read(step: StepRow) -> StepPayload:
    """A row's payload, typed. Version-1 rows (no ``version`` key) read the same way."""
    cls = KINDS.get(step.kind)
    if cls is None:
        raise PayloadError(f"no payload type for step kind {step.kind!r}")
    data = dict(step.result) if isinstance(step.result, Mapping) else {}
    if cls is ModelPayload and isinstance(step.arguments, Mapping):
        # A version-1 model row kept what the call was sent in its ``arguments`` only.
        sent = {k: step.arguments.get(k) for k in ("message_count", "prompt_sha256")}
        data = {k: v for k, v in sent.items() if v is not None} | data
    return cls.from_json(data)  # type: ignore[return-value]


def read_as[P: Row](step: StepRow, cls: type[P]) -> P:
    """``read(step)``, which must be a ``cls``."""
    payload = read(step)
    if not isinstance(payload, cls):
        raise PayloadError(f"step {step.seq} is a {step.kind} step, not {cls.__name__}")
    return payload


# --- queries that look inside the JSON column ---------------------------------------------


def approval_settled(approval_id: str) -> Q:
    """Approval rows that settled ``approval_id`` (any event but the request)."""
    return Q(kind=StepKind.APPROVAL, result__approval_id=approval_id) & ~Q(
        result__event="requested"
    )


# A declined approval (``result.event == "denied"``) is counted by the loop check in SQL:
# ``agent.run.bounds.repeated_call``.


def late_rows() -> Q:
    return Q(result__late=True)
