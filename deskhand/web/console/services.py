"""Console writes that are not already a domain or approvals service: undo.

Undo applies the inverse a reversible tool recorded on its step, records the
undo as a new step of the same run (so the audit trail and the live page both
show it), links the original to it and writes the human-action audit — all in
one transaction, so a refused inverse leaves nothing behind.

Only a finished run can be undone from: a live run numbers its own steps from
its checkpointed history, and a step inserted under it would be overwritten
by the run's next one.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Max

from agent.models import Run, Step
from agent.models.payloads import StepKind
from agent.record.steplog import log_step
from agent.steps import UndoPayload
from approvals.audit import audit_record
from approvals.models import Channel
from deskhand.domain.desk.permissions import require_actor
from deskhand.domain.desk.services import DomainError, inverse_apply


class UndoRefused(Exception):
    """This step cannot be undone (now); the message says why."""


def step_undo(*, run: Run, seq: int, user: Any, channel: str = Channel.WEB) -> Step:
    """Undo step ``seq`` of ``run``; return the new ``undo`` step."""
    require_actor(user, run.merchant_id, "undo the agent's actions")
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.is_open:
            raise UndoRefused(
                f"run {run.id} is still {locked.status}; undo is available once it has finished."
            )
        step = Step.objects.select_for_update().filter(run=locked, seq=seq).first()
        if step is None:
            raise UndoRefused(f"run {run.id} has no step {seq}.")
        if step.kind != StepKind.TOOL or not step.inverse:
            raise UndoRefused(
                f"step {seq} ({step.tool or step.kind}) recorded no inverse; it cannot be undone."
            )
        if step.undone_by_id is not None:
            raise UndoRefused(f"step {seq} was already undone.")
        try:
            text = inverse_apply(merchant_id=locked.merchant_id, inverse=step.inverse)
        except DomainError as exc:
            raise UndoRefused(f"step {seq} could not be undone: {exc}") from None
        next_seq = (Step.objects.filter(run=locked).aggregate(m=Max("seq"))["m"] or 0) + 1
        undo = log_step(
            run_id=str(locked.pk),
            seq=next_seq,
            kind=StepKind.UNDO,
            tool=step.tool,
            arguments={"undid_seq": seq, "inverse": step.inverse},
            result=UndoPayload(undid_seq=seq, text=text, by=user.email or str(user)),
        )
        step.undone_by = undo
        step.save(update_fields=["undone_by"])
        audit_record(
            merchant_id=locked.merchant_id,
            actor=user,
            action="step.undo",
            run_id=locked.pk,
            channel=channel,
            detail={
                "seq": seq,
                "tool": step.tool,
                "inverse": step.inverse,
                "undo_seq": next_seq,
                "text": text,
            },
        )
    return undo
