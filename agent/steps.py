"""What a run's steps record: one small frozen type per step output and per step-log row.

DBOS checkpoints a step's output as JSON: the runtime records ``to_json()`` and hands the
loop ``from_json(recorded)`` (``agent.runtime.recorded``), fresh or replayed alike; its ``v``
must match (a shape change ships under a new application version, docs/deploys.md). The
step log's rows (``Step.result``) are the ``Row`` types, of the same family: ``log_step``
writes their ``to_json()``, ``agent.models.payloads.read`` reads them for replay, forks and
the console; a row of an older ``version`` still reads (a missing key takes its default).
``tests/integrity/test_persisted_names.py`` pins every type's fields and version.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Self

JSON = dict[str, Any]


_AS_IS = (str, int, float, list, dict, type(None))  # bool is an int


def _plain(value: Any) -> Any:
    if isinstance(value, _AS_IS):
        return value
    if isinstance(value, Recorded):
        return value.to_json()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return value


def _one(kind: Any, value: Any) -> Any:
    if issubclass(kind, Recorded):
        return kind.from_json(value)
    names = {f.name for f in dataclasses.fields(kind)}
    return kind(**{k: v for k, v in value.items() if k in names})


def _fields(cls: type[Recorded], data: JSON) -> JSON:
    """``cls``'s fields found in ``data``: nested types read back, a list into a tuple where
    the field is one, and JSON null read as the field's default where that is not null (an
    approval with no reason, say)."""
    out: JSON = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            continue
        value, kind = data[f.name], cls.NESTED.get(f.name)
        if value is None:
            if f.default_factory is not dataclasses.MISSING:
                value = f.default_factory()
            elif f.default is not dataclasses.MISSING:
                value = f.default
        elif kind is not None:
            many = isinstance(value, list)
            value = tuple(_one(kind, v) for v in value) if many else _one(kind, value)
        elif str(f.type).startswith("tuple"):
            value = tuple(value)
        out[f.name] = value
    return out


@dataclasses.dataclass(frozen=True)
class Recorded:
    """A step's output; its JSON form is what DBOS keeps."""

    VERSION: ClassVar[int] = 1
    # Fields holding another recorded type (or a tuple of them), read back through it.
    NESTED: ClassVar[dict[str, type]] = {}

    def to_json(self) -> JSON:
        return {"v": self.VERSION} | {
            f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)
        }

    @classmethod
    def from_json(cls, data: JSON) -> Self:
        if data.get("v") != cls.VERSION:
            raise ValueError(f"{cls.__name__} v{cls.VERSION} cannot read a v{data.get('v')} output")
        return cls(**_fields(cls, data))


@dataclasses.dataclass(frozen=True)
class Note:
    """A staff note as the model reads it: in a turn's output and in its NOTE row."""

    author: str
    body: str


@dataclasses.dataclass(frozen=True)
class Begun(Recorded):
    """``run.begin``: the run's status and, on a run that goes on, what the loop starts from."""

    status: str
    prompt: str = ""
    ticket: str = ""
    fence_token: str = ""
    next_seq: int = 1


@dataclasses.dataclass(frozen=True)
class Bounds(Recorded):
    """The bounds check inside a turn: a bound hit (``reason``), else the steps left."""

    reason: str = ""
    detail: str = ""
    steps_left: int | None = None


@dataclasses.dataclass(frozen=True)
class Wait(Recorded):
    """A wait the provider's API named: slept durably, then the turn is asked again."""

    seconds: float
    reason: str = ""
    until: str = ""
    attempts: int = 0
    waited: float = 0.0


@dataclasses.dataclass(frozen=True)
class Reply(Recorded):
    """The model call's outcome: the reply, the provider's error, or a wait to sleep first."""

    NESTED: ClassVar[dict[str, type]] = {"wait": Wait}

    content: list[JSON] = dataclasses.field(default_factory=list)
    stop_reason: str = ""
    provider_error: str = ""
    kind: str = ""
    transient: bool = False
    attempts: int = 0
    wait: Wait | None = None

    @property
    def wrote_row(self) -> bool:
        """Whether the call wrote a step row (a reply did; an error or a wait did not)."""
        return not self.provider_error and self.wait is None


@dataclasses.dataclass(frozen=True)
class Turn(Recorded):
    """``model``: the notes the turn took, where the next row goes, the bounds and the reply
    (``None`` when a bound was hit before any call)."""

    NESTED: ClassVar[dict[str, type]] = {"notes": Note, "bounds": Bounds, "reply": Reply}

    notes: tuple[Note, ...]
    next_seq: int
    bounds: Bounds
    reply: Reply | None = None


@dataclasses.dataclass(frozen=True)
class Done(Recorded):
    """``tool.<name>``: what the model reads, or ``stop`` when the run must end instead
    (``cancelled`` / ``closed`` quietly, with ``status``; anything else fails it)."""

    text: str = ""
    ok: bool = False
    replayed: bool = False
    stop: str = ""
    status: str = ""
    detail: str = ""

    @property
    def closed(self) -> bool:
        return self.stop in ("cancelled", "closed")


@dataclasses.dataclass(frozen=True)
class Opened(Recorded):
    """``gate.request``: nobody asked (``done``, ``closed``, ``refused``, ``mismatch``) or the
    approval the run waits on, with the decision as it stands."""

    NESTED: ClassVar[dict[str, type]] = {"done": Done}

    done: Done | None = None
    closed: str = ""
    refused: str = ""
    mismatch: str = ""
    approval_id: str = ""
    status: str = ""
    expires_at: str = ""
    topic: str = ""


@dataclasses.dataclass(frozen=True)
class Verdict(Recorded):
    """``gate.resume``: ``pending`` (wait again, until ``expires_at``), ``approved``,
    ``denied``, ``expired``, ``mismatch`` or ``closed`` (with the run's ``status``)."""

    verdict: str
    status: str = ""
    reason: str = ""
    detail: str = ""
    expires_at: str = ""
    changed: str = ""
    decided_by: int | None = None


@dataclasses.dataclass(frozen=True)
class Parked(Recorded):
    """``customer.park``: where and until when the run waits for the customer's answer
    (``remind_at`` when the merchant wants one reminder), or ``closed``."""

    closed: str = ""
    topic: str = ""
    until: str = ""
    after: int = 0
    asked_at: str = ""
    call_id: str = ""
    remind_at: str | None = None


@dataclasses.dataclass(frozen=True)
class Seen(Recorded):
    """``customer.read``: the answer's lines, whether the window passed, whether to remind."""

    answered: list[int] = dataclasses.field(default_factory=list)
    passed: bool = False
    remind: bool = False


@dataclasses.dataclass(frozen=True)
class Reparked(Recorded):
    """``customer.repark``: the same window again, or ``closed``."""

    closed: str = ""
    until: str = ""


@dataclasses.dataclass(frozen=True)
class Answered(Recorded):
    """``customer.resume``: ``answered`` (with the ``text`` the model reads), ``no_reply``
    or ``closed``."""

    verdict: str
    text: str = ""
    detail: str = ""
    status: str = ""


@dataclasses.dataclass(frozen=True)
class Finished(Recorded):
    """``run.finish`` (and the workflow's output): how the run ended."""

    status: str
    stop_reason: str = ""


# --- the step log's rows -------------------------------------------------------------------

LEGACY = 1  # rows written before rows carried a version


@dataclasses.dataclass(frozen=True, kw_only=True)
class Row(Recorded):
    """A step row's payload (``Step.result``): its ``version`` is a field, and a row of an
    older version reads (rows are not drained as checkpoints are; module docstring)."""

    VERSION: ClassVar[int] = 2

    version: int = VERSION
    # Written by a step that finished after its run was closed from outside (e.g. a model call
    # in flight while a person cancelled): appended past the closing row so its cost still counts.
    late: bool = False

    def to_json(self) -> JSON:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, data: JSON) -> Self:
        return cls(**(_fields(cls, data) | {"version": data.get("version", LEGACY)}))


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelPayload(Row):
    """A model call's row: the ``Reply`` it answered (content, stop reason) and what it was sent."""

    content: list[JSON] = dataclasses.field(default_factory=list)
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
    def calls(self) -> list[JSON]:
        return [b for b in self.content if isinstance(b, dict) and b.get("type") == "tool_use"]

    @property
    def text(self) -> str:
        return " ".join(
            str(b.get("text", ""))
            for b in self.content
            if isinstance(b, dict) and b.get("type") == "text"
        )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ToolPayload(Row):
    """A tool call's row: the ``Done``'s text the model read (its ``ok`` is the row's)."""

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
class ApprovalPayload(Row):
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


@dataclasses.dataclass(frozen=True, kw_only=True)
class NotePayload(Row):
    """The notes a turn took (``Turn.notes``)."""

    NESTED: ClassVar[dict[str, type]] = {"notes": Note}

    notes: tuple[Note, ...] = ()


@dataclasses.dataclass(frozen=True, kw_only=True)
class EndPayload(Row):
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
class UndoPayload(Row):
    undid_seq: int | None = None
    text: str = ""
    by: str = ""


StepPayload = ModelPayload | ToolPayload | ApprovalPayload | NotePayload | EndPayload | UndoPayload
