"""What each kind of step row records (``agent.steps``'s ``Row`` types), read at one boundary.

Why this exists: ``Step.result`` is a JSON column, and later code decides
things from it — replay rebuilds the conversation, a fork refuses some
starting points, the gate asks whether an approval was already settled, the
console and the replay command describe each step. With free JSON, a renamed
or misspelt key fails silently (``.get`` returns ``None``). So each kind has one
frozen, versioned type, of the same family as the step outputs the loop's
checkpoints hold (``agent.steps``):

* ``agent.record.steplog.log_step`` is the only writer: it takes the kind's payload and
  stores its ``to_json()``; the one rewrite of a finished run's rows is
  ``agent.privacy.redaction`` (erasure, retention), which stores the same types with their
  words removed;
* ``read(step)`` (also ``Step.payload``) is the only reader. Rows written before
  payloads were versioned have no ``version`` key: they are version 1
  (``LEGACY``), carry the same keys, and parse the same way — a missing key
  takes the field's default.

Database queries that look inside the column use the ``Q`` helpers below, so
the JSON paths are spelled in this file only.
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
