"""A run's timeline: its steps as the loop lived them, read once from the step log.

Everything in ``agent.replay`` is read from here; no model is called to *show* a run,
and nothing is ever executed or written. A fork's steps before its ``fork_step`` are its
parent's (DBOS copied their checkpoints; the fork wrote no rows for them), so a fork's
timeline is the parent's prefix followed by its own steps.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from agent.conversation import fence
from agent.ledger import lineage
from agent.models import PromptVersion, Run, Step, payloads
from agent.models.ledger import LedgerEntry
from agent.models.payloads import StepKind
from agent.replay import compat
from agent.steps import ModelPayload


@dataclasses.dataclass(frozen=True)
class LedgerFact:
    args_hash: str
    ok: bool
    text: str
    run_id: str


# --- loading -----------------------------------------------------------------


@dataclasses.dataclass
class Timeline:
    """A run's steps as the loop lived them (a fork's inherited prefix included), read once."""

    run: Run
    root_id: str
    token: str
    steps: list[Step]
    # The lineage's ledger (every run sharing the root), oldest first.
    entries: list[LedgerEntry]
    # The prompt versions its model steps were sent, by hash (``agent.conversation.prompt_versions``).
    versions: dict[str, PromptVersion] = dataclasses.field(default_factory=dict)

    def ledger_answer(self, call: dict[str, Any]) -> LedgerFact | None:
        """How the loop's ``ledger.lookup`` answered ``call`` (``agent.ledger.lineage``'s rule), if it did."""
        found = lineage.matching_effect(self.entries, call)
        if found is not None:
            return LedgerFact(
                found.args_hash, found.ok, lineage.answer_text(found), str(found.run_id)
            )
        old = compat.answer_without_identity(self.entries, call)
        return LedgerFact(old.args_hash, old.ok, old.result, str(old.run_id)) if old else None

    def step_at(self, seq: int) -> Step | None:
        return next((s for s in self.steps if s.seq == seq), None)

    @property
    def last_seq(self) -> int:
        return self.steps[-1].seq if self.steps else 0


def effective_steps(run: Run) -> list[Step]:
    """The run's step log, preceded for a fork by its parent's steps before ``fork_step``."""
    own = list(Step.objects.filter(run=run).order_by("seq"))
    if run.forked_from_id is None or not run.fork_step:
        return own
    parent = Run.objects.get(pk=run.forked_from_id)
    prefix = [s for s in effective_steps(parent) if s.seq < run.fork_step]
    return prefix + [s for s in own if s.seq >= run.fork_step]


def load(run: Run) -> Timeline:
    root = run.root()
    entries = LedgerEntry.objects.filter(root_run=root).order_by("pk")
    steps = effective_steps(run)
    named = {
        payloads.read_as(s, ModelPayload).prompt_version for s in steps if s.kind == StepKind.MODEL
    } - {""}
    return Timeline(
        run=run,
        root_id=str(root.pk),
        token=fence.token_for(str(root.pk)),
        steps=steps,
        entries=list(entries),
        versions={v.sha256: v for v in PromptVersion.objects.filter(pk__in=named)},
    )
