"""What each kind of step row records, as small typed structures read and written at one boundary.

Why this exists: ``Step.result`` is a JSON column, and later code decides
things from it — replay rebuilds the conversation, a fork refuses some
starting points, the gate asks whether an approval was already settled, the
console and the replay command describe each step. With free JSON, a renamed
or misspelt key fails silently (``.get`` returns ``None``). Here each kind has
one frozen dataclass carrying a ``version``:

* ``agent.record.steplog.log_step`` is the only writer: it takes a payload (or a plain
  dict, which it parses into one) and stores ``to_json(payload)``; the one rewrite
  of a finished run's rows is ``agent.privacy.redaction`` (erasure, retention), which stores
  ``to_json`` of the same payload types with their words removed;
* ``read(step)`` (also ``Step.payload``) is the only reader. Rows written before
  payloads were versioned have no ``version`` key: they are version 1
  (``LEGACY``), carry the same keys, and parse the same way — a missing key
  takes the field's default.

Database queries that look inside the column use the ``Q`` helpers below, so
the JSON paths are spelled in this file only.

Only the *rows* are typed here. What each DBOS step returns (its checkpointed
output) is a separate contract: runs parked before an upgrade replay those
outputs, so their shape only ever gains keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

from django.db import models
from django.db.models import Q


class StepKind(models.TextChoices):
    MODEL = "model"
    TOOL = "tool"
    APPROVAL = "approval"
    NOTE = "note", "staff note"
    BOUND = "bound"
    FINAL = "final"
    ERROR = "error"
    UNDO = "undo"


VERSION = 2
LEGACY = 1  # rows written before payloads carried a version


@dataclasses.dataclass(frozen=True, kw_only=True)
class Payload:
    version: int = VERSION
    # Written by a step that finished after its run was closed from outside (e.g. a model call
    # in flight while a person cancelled): appended past the closing row so its cost still counts.
    late: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelPayload(Payload):
    content: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    stop_reason: str = ""
    provider: str = ""
    model: str = ""
    # What the call was sent (also in the row's ``arguments``, where version-1 rows keep them).
    message_count: int | None = None
    prompt_sha256: str = ""
    # The prompt version it was sent (agent.conversation.prompt_versions); "" before versions were kept.
    prompt_version: str = ""
    # Tool-call ids the model step replaced (agent.conversation.untrusted): {the new id: what the model sent}.
    replaced_ids: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def calls(self) -> list[dict[str, Any]]:
        return [b for b in self.content if isinstance(b, dict) and b.get("type") == "tool_use"]

    @property
    def text(self) -> str:
        return " ".join(
            str(b.get("text", ""))
            for b in self.content
            if isinstance(b, dict) and b.get("type") == "text"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToolPayload(Payload):
    text: str = ""
    ledger_key: str = ""  # irreversible calls: the ledger entry that records the effect
    approval_id: str = ""  # irreversible calls: the approval that allowed it
    # Effects in another system (agent.effects): which adapter, the claim's state after this
    # step (done | failed | pending), the other system's id for it, and how often it was called.
    adapter: str = ""
    effect_state: str = ""
    provider_ref: str = ""
    provider_calls: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class ApprovalPayload(Payload):
    # requested | approved | denied | expired | mismatch
    event: str = ""
    approval_id: str = ""
    # Written when the approval was requested.
    status: str = ""
    preview: str = ""
    args_hash: str = ""
    expires_at: str = ""
    reused: bool = False
    mismatch: str = ""
    # What the lineage and earlier runs on the ticket already did, as shown on the card.
    prior_effects: tuple[str, ...] = ()
    # The order's money as the card showed it (``agent.tools.order_facts.RefundFacts``).
    facts: dict[str, Any] = dataclasses.field(default_factory=dict)
    # Written when the wait was settled.
    waited_seconds: float | None = None
    decided_by: str | None = None
    decided_at: str | None = None
    channel: str = ""
    reason: str = ""
    approved_hash: str = ""
    call_hash: str = ""
    escalated_at: str | None = None
    detail: str = ""
    # Approved with changes: what a person changed, in words, and the hash of the call performed.
    changed: str = ""
    executes_hash: str = ""
    # Decided by a merchant rule: "policy v3 rule 1".
    policy: str = ""


@dataclasses.dataclass(frozen=True)
class Note:
    author: str
    body: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class NotePayload(Payload):
    notes: tuple[Note, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class EndPayload(Payload):
    """How a run ended: ``final`` (succeeded), ``bound`` (a bound, a stop, a cancel), ``error``."""

    status: str = ""
    stop_reason: str = ""
    detail: str = ""
    summary: str = ""
    # The row a cancellation writes: who, through what, what the run was doing, which
    # pending approvals it withdrew.
    event: str = ""  # "cancel"
    by: str = ""
    channel: str = ""
    was: str = ""
    withdrawn: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class UndoPayload(Payload):
    undid_seq: int | None = None
    text: str = ""
    by: str = ""


StepPayload = ModelPayload | ToolPayload | ApprovalPayload | NotePayload | EndPayload | UndoPayload

KINDS: dict[str, type[Payload]] = {
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


def _notes(value: Any) -> tuple[Note, ...]:
    return tuple(
        Note(author=str(n.get("author", "")), body=str(n.get("body", "")))
        for n in value or []
        if isinstance(n, Mapping)
    )


def parse(
    kind: str, result: Mapping[str, Any] | None, arguments: Mapping[str, Any] | None = None
) -> StepPayload:
    """The typed payload of a row of ``kind`` from its JSON (any version, unknown keys ignored)."""
    cls = KINDS.get(kind)
    if cls is None:
        raise PayloadError(f"no payload type for step kind {kind!r}")
    data = dict(result) if isinstance(result, Mapping) else {}
    names = {f.name for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {k: v for k, v in data.items() if k in names}
    values["version"] = data.get("version", LEGACY)
    if cls is NotePayload:
        values["notes"] = _notes(data.get("notes"))
    if cls is ApprovalPayload:
        values["prior_effects"] = tuple(str(x) for x in values.get("prior_effects") or ())
    if cls is EndPayload:
        values["withdrawn"] = tuple(str(x) for x in values.get("withdrawn") or ())
    if cls is ModelPayload:
        args = arguments if isinstance(arguments, Mapping) else {}
        values.setdefault("message_count", args.get("message_count"))
        values.setdefault("prompt_sha256", args.get("prompt_sha256", ""))
        values["content"] = list(values.get("content") or [])
        replaced = values.get("replaced_ids")
        values["replaced_ids"] = dict(replaced) if isinstance(replaced, Mapping) else {}
    # JSON null where a string is expected (e.g. an approval with no reason) reads as empty.
    for f in dataclasses.fields(cls):
        if f.type == "str" and values.get(f.name, "") is None:
            values[f.name] = ""
    return cls(**values)  # type: ignore[return-value]


def to_json(payload: Payload) -> dict[str, Any]:
    """What is stored in ``Step.result``."""
    return dataclasses.asdict(payload)


def of_kind(kind: str, payload: Payload | Mapping[str, Any] | None) -> StepPayload:
    """A payload to write for ``kind``: a typed one is checked; a dict is parsed and stamped current."""
    if isinstance(payload, Payload):
        if not isinstance(payload, KINDS.get(kind, ())):
            raise PayloadError(f"a {type(payload).__name__} cannot be written as a {kind} step")
        return payload  # type: ignore[return-value]
    # Reading ignores keys it does not know (rows from a newer release still read); writing
    # refuses them, so a misspelt or new key fails here instead of vanishing from the log.
    cls = KINDS.get(kind)
    if cls is not None and isinstance(payload, Mapping):
        unknown = set(payload) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise PayloadError(
                f"a {kind} step has no field {', '.join(sorted(unknown))}: add it to {cls.__name__}"
            )
    return dataclasses.replace(parse(kind, payload), version=VERSION)


class StepRow(Protocol):
    """What ``read`` needs of a step row (``agent.models.Step``, which imports this module)."""

    kind: str
    seq: int
    result: Any
    arguments: Any


def read(step: StepRow) -> StepPayload:
    """A row's payload, typed. Version-1 rows (no ``version`` key) read the same way."""
    return parse(step.kind, step.result, step.arguments)


def read_as[P: Payload](step: StepRow, cls: type[P]) -> P:
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
