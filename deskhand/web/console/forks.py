"""What the console reads about a run's replay and lineage: its forks, and what a fork would meet.

Reads only. The fork itself is ``agent.replay.fork.fork_run`` (the same function the CLI's
``replay --fork-from`` calls), and what the model saw is ``agent.conversation`` through
``runpage.model_view`` (the same rebuild ``replay --at`` prints).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agent.models import Run, Step
from agent.models.payloads import StepKind
from agent.privacy.redaction import replay_refusal
from agent.replay.fork import fork_point
from agent.replay.timeline import effective_steps
from agent.run.services import RunRefused
from agent.tools import Risk, risk_of
from deskhand.domain.desk.models import Membership


def fork_links(run: Run, membership: Membership) -> dict[str, Any]:
    """For the run page: the runs forked from this one, and whether this person may replay it."""
    return {
        "forks": list(
            Run.objects.filter(forked_from=run).order_by("created_at").values("id", "fork_step")
        ),
        "may_replay": membership.is_owner and replay_refusal(run) is None,
    }


@dataclasses.dataclass(frozen=True)
class StepLine:
    """One step of a run's timeline (a fork's inherited prefix included), for the step picker."""

    seq: int
    kind: str
    tool: str
    irreversible: bool
    inherited: bool  # a fork's step before its fork step: its parent's row

    @property
    def label(self) -> str:
        return f"{self.kind} {self.tool}".strip()


def step_lines(run: Run) -> list[StepLine]:
    return [
        StepLine(
            seq=s.seq,
            kind=s.kind,
            tool=s.tool,
            irreversible=risk_of(s.tool) is Risk.IRREVERSIBLE,
            inherited=s.run_id != run.pk,
        )
        for s in effective_steps(run)
    ]


def irreversible_from(run: Run, seq: int) -> list[Step]:
    """The irreversible steps at or after ``seq``: what the original did that a fork may meet again.

    Approval requests and the effects performed (tool steps); a fork's model may propose each
    again, and the ledger answers the same effect or a person is asked for a different one.
    """
    return [
        s
        for s in effective_steps(run)
        if s.seq >= seq
        and s.kind in (StepKind.TOOL, StepKind.APPROVAL)
        and risk_of(s.tool) is Risk.IRREVERSIBLE
        and (s.kind == StepKind.TOOL or (s.result or {}).get("event") == "requested")
    ]


def fork_refusal(run: Run, seq: int) -> str | None:
    """Why a fork cannot start at step ``seq`` of ``run`` (a sentence), or ``None`` if it can."""
    gone = replay_refusal(run)
    if gone:
        return gone
    try:
        fork_point(run, seq)
    except RunRefused as exc:
        return str(exc)
    return None
