"""What each of a run's steps returns: one small frozen type per step, the loop reads fields.

DBOS checkpoints a step's output as JSON (the portable serializer). Each type here crosses
that boundary in one place: the runtime records ``to_json()`` and hands the loop back
``from_json(recorded)`` (``agent.runtime.recorded``), so a fresh output and a replayed one
are the same value. The JSON form carries ``v``, the type's version: a shape change bumps
it and ships under a new application version (docs/deploys.md), and
``tests/integrity/test_persisted_names.py`` pins every type's fields and version.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Self

JSON = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Recorded:
    """A step's output; its JSON form is what DBOS keeps."""

    VERSION: ClassVar[int] = 1
    # Fields holding another Recorded type (by name), read back through its own from_json.
    NESTED: ClassVar[dict[str, type[Recorded]]] = {}

    def to_json(self) -> JSON:
        out: JSON = {"v": self.VERSION}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            out[f.name] = value.to_json() if isinstance(value, Recorded) else value
        return out

    @classmethod
    def from_json(cls, data: JSON) -> Self:
        if data.get("v") != cls.VERSION:
            raise ValueError(f"{cls.__name__} v{cls.VERSION} cannot read a v{data.get('v')} output")
        names = {f.name for f in dataclasses.fields(cls)}
        fields = {k: v for k, v in data.items() if k in names}
        for name, kind in cls.NESTED.items():
            if fields.get(name) is not None:
                fields[name] = kind.from_json(fields[name])
        return cls(**fields)


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

    NESTED: ClassVar[dict[str, type[Recorded]]] = {"wait": Wait}

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

    NESTED: ClassVar[dict[str, type[Recorded]]] = {"bounds": Bounds, "reply": Reply}

    notes: list[JSON]
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

    NESTED: ClassVar[dict[str, type[Recorded]]] = {"done": Done}

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
