"""Fork a run from step N: a new run that replays the original up to N, then works on its own.

The fork is a new ``Run`` row (``forked_from``, ``fork_step``, the same ticket,
merchant, prompt and provider, bounds snapshotted now) and a DBOS fork of the
original's workflow whose workflow id is the fork's run id. DBOS copies every
checkpoint before the start step, so the loop replays the original's steps up
to N from their recorded outputs — nothing before N runs again, no effect
repeats — and runs step N and everything after it for real, in the fork's own
run. Its step log therefore starts at N; the steps before N stay the parent's
(``agent.replay`` joins them).

Effects after N are matched against the whole lineage's ledger by business
identity (``agent.ledger.lineage``): an irreversible call the fork re-derives as the
same effect (same identity and content, whatever its call id and wording) is answered
with the recorded result (no approval asked, nothing paid again); a different
one is put to a person, whose card shows what the lineage already did.

Where a fork may start:

* a model step — the model is asked again from the same conversation;
* a read or reversible tool step — the tool runs again, in the fork;
* an approval request — the fork starts at the ``ledger.lookup`` just before
  it, so a call the original has since performed is answered from the ledger
  and a person is asked again only if it was never performed.

Not from an approval's decision or an irreversible tool step (the copied gate
checkpoints name the original's approval, which can never cover the fork's
run), not from a staff note (the guidance was a message the original
consumed), and not from the step that ended the run.

Starting a fork is two writes to two systems, like starting a run: the row is
created ``queued``; if the DBOS fork raises, the run ends
``failed``/``enqueue_failed`` at once; if the process dies in between, the
reconciler ends it ``failed``/``enqueue_lost``. The one-open-run-per-ticket
rule applies.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from agent.models import OPEN_STATUSES, Run, RunStatus, Step, StopReason
from agent.privacy.redaction import replay_refusal
from agent.replay.timeline import effective_steps
from agent.run import payloads
from agent.run.payloads import StepKind
from agent.run.services import RunRefused, bounds_snapshot, run_mark_failed
from agent.tools import Risk, risk_of
from approvals.models import AuditEvent, Channel
from deskhand.dbos.client import fork_run_workflow, workflow_steps
from deskhand.dbos.names import LIMITED_CALL_WORKFLOW
from deskhand.desk.permissions import require_actor

log = logging.getLogger(__name__)


def _open_run_sentence(run: Run) -> str:
    open_run = Run.objects.filter(ticket_id=run.ticket_id, status__in=OPEN_STATUSES).first()
    return (
        f"ticket {run.ticket.reference} already has an open run"
        + (f" ({open_run.id}, {open_run.status})" if open_run else "")
        + "; cancel it or wait for it to finish before forking."
    )


def open_run_refusal(run: Run) -> str | None:
    """Why no fork of ``run`` may start now (its ticket has an open run), or ``None``."""
    if Run.objects.filter(ticket_id=run.ticket_id, status__in=OPEN_STATUSES).exists():
        return _open_run_sentence(run)
    return None


def fork_point(run: Run, seq: int) -> Step:
    """The step a fork of ``run`` may start at, or ``RunRefused`` saying why not."""
    steps = effective_steps(run)
    step = next((s for s in steps if s.seq == seq), None)
    if step is None:
        last = steps[-1].seq if steps else 0
        raise RunRefused(
            f"run {run.id} has no step {seq}"
            + (f"; its steps are 1 to {last}." if last else "; it has no steps yet.")
        )
    where = f"step {seq} ({step.tool or step.kind})"
    if step.function_id is None:
        raise RunRefused(
            f"{where} was not written by the workflow, so there is no checkpoint to fork from."
        )
    if step.kind == StepKind.NOTE:
        raise RunRefused(
            f"{where} is staff guidance the original run consumed as a message; fork from the model step after it."
        )
    if step.kind in (StepKind.FINAL, StepKind.BOUND, StepKind.ERROR, StepKind.UNDO):
        raise RunRefused(f"{where} is where the run ended; fork from an earlier step.")
    payload = payloads.read(step)
    if payload.late:
        raise RunRefused(
            f"{where} finished after the run was closed; no step of the run came after it to fork from."
        )
    if isinstance(payload, payloads.ApprovalPayload) and payload.event != "requested":
        raise RunRefused(
            f"{where} settles an approval that belongs to the original run; fork from the approval "
            "request or from the model step that made the call."
        )
    if step.kind == StepKind.TOOL and risk_of(step.tool) is Risk.IRREVERSIBLE:
        raise RunRefused(
            f"{where} is an approved irreversible effect of the original run; fork from its approval "
            "request or from the model step that made the call."
        )
    return step


def _start_function_id(run: Run, step: Step) -> int:
    """The DBOS function id the fork starts at, checked against the workflow's own checkpoints."""
    assert step.function_id is not None
    checkpoints = {s["function_id"]: s["function_name"] for s in workflow_steps(str(run.pk))}
    if not checkpoints:
        raise RunRefused(
            f"run {run.id} has no DBOS history (it was cleared, e.g. by seed --reset), so it cannot be forked."
        )
    name = checkpoints.get(step.function_id)
    if step.kind == StepKind.MODEL:
        # A rate-limited call (deskhand.dbos.engine.workflow) is the run's start of its child workflow.
        expected = LIMITED_CALL_WORKFLOW if name == LIMITED_CALL_WORKFLOW else "model"
    elif step.kind == StepKind.APPROVAL:
        expected = "gate.request"
    else:
        expected = f"tool.{step.tool}"
    if name != expected:
        raise RunRefused(
            f"step {step.seq} says it is DBOS step {step.function_id} ({expected}), but the workflow "
            f"recorded {name or 'nothing'} there; the run cannot be forked from it."
        )
    if step.kind == StepKind.APPROVAL:
        # Start at the ledger lookup just before the request: a call performed since is not asked again.
        lookups = [
            fid
            for fid, fname in checkpoints.items()
            if fname == "ledger.lookup" and fid < step.function_id
        ]
        if lookups:
            return max(lookups)
    return step.function_id


def fork_run(
    *, run: Run, seq: int, user: Any, channel: str = Channel.CLI, fork_id: uuid.UUID | None = None
) -> Run:
    """Fork ``run`` from its step ``seq`` and hand the fork to DBOS. Raises ``RunRefused`` with a sentence."""
    require_actor(user, run.merchant_id, "start runs")
    refusal = replay_refusal(run)
    if refusal:
        raise RunRefused(refusal)
    busy = open_run_refusal(run)
    if busy:
        raise RunRefused(busy)
    step = fork_point(run, seq)
    start_step = _start_function_id(run, step)
    try:
        with transaction.atomic():
            fork = Run.objects.create(
                id=fork_id or uuid.uuid4(),
                merchant_id=run.merchant_id,
                ticket_id=run.ticket_id,
                started_by=user,
                provider=run.provider,
                model=run.model,
                prompt=run.prompt,
                **bounds_snapshot(run.merchant),
                forked_from=run,
                fork_step=seq,
            )
            AuditEvent.objects.create(
                merchant_id=run.merchant_id,
                actor=user,
                action="run.fork",
                run=fork,
                channel=channel,
                detail={
                    "forked_from": str(run.pk),
                    "fork_step": seq,
                    "dbos_start_step": start_step,
                    "ticket": run.ticket.reference,
                },
            )
    except IntegrityError:
        raise RunRefused(_open_run_sentence(run)) from None
    try:
        with transaction.atomic():
            # Hold the fork's row while DBOS forks: a worker that picks the fork up at once
            # waits for this commit before its first write, so it never sees it queued.
            locked = Run.objects.select_for_update().get(pk=fork.pk)
            fork_run_workflow(
                source_run_id=str(run.pk),
                start_step=start_step,
                fork_run_id=str(fork.pk),
                partition_key=run.merchant.slug,
            )
            # The fork replays the original's run.begin from its checkpoint, so nothing else
            # marks it running.
            locked.status, locked.started_at = RunStatus.RUNNING, timezone.now()
            locked.save(update_fields=["status", "started_at", "updated_at"])
    except Exception as exc:  # the fork must end truthfully, never stay queued
        log.exception("fork of run %s at step %s failed", run.pk, seq)
        run_mark_failed(
            run_id=str(fork.pk),
            reason=StopReason.ENQUEUE_FAILED,
            detail=f"could not fork: {type(exc).__name__}: {exc}",
        )
    fork.refresh_from_db()
    return fork
