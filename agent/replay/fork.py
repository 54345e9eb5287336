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
* an approval request — its ``gate.request`` asks the ledger first, so a call the
  original has since performed is answered from the ledger and a person is asked
  again only if it was never performed.

Not from an approval's decision or an irreversible tool step (the copied gate
checkpoints name the original's approval, which can never cover the fork's
run), not from a staff note (the guidance was a message the original
consumed), and not from the step that ended the run.

Starting a fork is two writes to two systems, like starting a run: the row is
created ``queued``; if the DBOS fork raises, the run ends
``failed``/``enqueue_failed`` at once; if the process dies in between, the
reconciler ends it ``failed``/``enqueue_lost``. The one-open-run-per-ticket
rule applies.

Over 400 lines because a fork made with DBOS's own tools (``dbos workflow fork``) ends here
too: adopting it as a run, or refusing it, must apply exactly the rules above, and two
copies of those rules would drift.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from agent.models import (
    OPEN_STATUSES,
    Run,
    RunStatus,
    Step,
    StopReason,
    WorkflowFindingKind,
    payloads,
)
from agent.models.payloads import StepKind
from agent.privacy.redaction import replay_refusal
from agent.replay.timeline import effective_steps
from agent.run.services import RunRefused, bounds_snapshot, run_mark_failed
from agent.run.workflow_findings import finding_record
from agent.runtime import StepName
from agent.steps import ApprovalPayload
from agent.tools import Risk, risk_of
from approvals.audit import audit_record
from approvals.models import Channel
from deskhand.domain.desk.permissions import require_actor
from deskhand.infra.dbos import client as dbos_client
from deskhand.infra.dbos.client import WorkflowOrigin, fork_run_workflow, workflow_steps
from deskhand.infra.dbos.names import LIMITED_CALL_WORKFLOW

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
    if isinstance(payload, ApprovalPayload) and payload.event != "requested":
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


def _checkpoints(run: Run) -> dict[int, str]:
    """The run workflow's checkpoints: DBOS function id -> recorded name."""
    return {s["function_id"]: s["function_name"] for s in workflow_steps(str(run.pk))}


def _start_function_id(run: Run, step: Step, checkpoints: dict[int, str] | None = None) -> int:
    """The DBOS function id the fork starts at, checked against the workflow's own checkpoints."""
    assert step.function_id is not None
    if checkpoints is None:
        checkpoints = _checkpoints(run)
    if not checkpoints:
        raise RunRefused(
            f"run {run.id} has no DBOS history (it was cleared, e.g. by seed --reset), so it cannot be forked."
        )
    name = checkpoints.get(step.function_id)
    if step.kind == StepKind.MODEL:
        # A rate-limited call (deskhand.engine.workflow) is the run's start of its child workflow.
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
            audit_record(
                merchant_id=run.merchant_id,
                actor=user,
                action="run.fork",
                run_id=fork.pk,
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


# --- forks made with DBOS's own tools ------------------------------------------------

OUTSIDE = "DBOS, outside Deskhand (`dbos workflow fork` or a DBOS client)"


@dataclasses.dataclass(frozen=True)
class Adoption:
    """What a run workflow works on: its run (``refusal`` empty), or why it may not run at all."""

    run: Run | None
    refusal: str = ""


def run_of(workflow_id: str) -> Run | None:
    """The run whose workflow this is (a run's id is its workflow's), if any; any text is asked."""
    try:
        pk = uuid.UUID(workflow_id)
    except ValueError:
        return None
    return Run.objects.filter(pk=pk).select_related("merchant", "ticket").first()


def workflow_adopt(workflow_id: str) -> Adoption:
    """The run of the run workflow ``workflow_id``, adopting a fork made with DBOS's own tools.

    Asked by the workflow before its first step (``deskhand.engine.workflow``) and by
    the reconciler for forks still queued, so a fork gets its answer whichever comes first;
    the parent run's row lock makes them take turns. A workflow with a run is simply that
    run's. One without is a fork an operator made (``dbos workflow fork <run> --step N``):
    it becomes a run exactly as ``replay --fork-from`` makes one — ``forked_from``,
    ``fork_step`` (the step-log step its DBOS start step is), the same ticket, merchant,
    prompt and provider, bounds snapshotted now, its effects answered from the lineage's
    ledger — when ``replay --fork-from`` would allow that fork. Otherwise it is refused: a
    finding says why (the attention queue, ``health --json``) and DBOS cancels it, so it
    does nothing. Either way a finding records what became of it.
    """
    run = run_of(workflow_id)
    if run is not None:
        return Adoption(run)
    origin = dbos_client.workflow_origin(workflow_id)
    if origin is None:
        return Adoption(None, f"DBOS has no workflow {workflow_id}.")
    if origin.forked_from is None:
        return _refuse(
            origin,
            None,
            WorkflowFindingKind.UNKNOWN_WORKFLOW,
            f"DBOS started workflow {workflow_id} as a Deskhand run, but no run has that id and "
            "it is no fork of one (enqueued by hand?). Runs are started with `manage.py "
            "run_ticket` or the console.",
        )
    parent = run_of(origin.forked_from)
    what = (
        f"DBOS fork {workflow_id} of run {origin.forked_from} from DBOS step {origin.start_step}"
        f" (made by {OUTSIDE})"
    )
    if parent is None:
        return _refuse(
            origin,
            None,
            WorkflowFindingKind.FORK_REFUSED,
            f"{what}: workflow {origin.forked_from} is no Deskhand run, so the fork has no ticket "
            "to work.",
        )
    try:
        uuid.UUID(workflow_id)
    except ValueError:
        return _refuse(
            origin,
            parent,
            WorkflowFindingKind.FORK_REFUSED,
            f"{what}: its id is not a run id (a UUID), so it cannot be a run. Fork again without "
            "--forked-workflow-id, or use `manage.py replay <run> --fork-from <step>`.",
        )
    try:
        with transaction.atomic():
            # One adopter at a time per parent (the workflow itself, the reconciler).
            Run.objects.select_for_update().get(pk=parent.pk)
            again = run_of(workflow_id)
            if again is not None:
                return Adoption(again)
            step = _fork_point_at(parent, origin.start_step)
            refusal = replay_refusal(parent) or open_run_refusal(parent)
            if refusal:
                raise RunRefused(refusal)
            try:
                with transaction.atomic():
                    fork = Run.objects.create(
                        id=uuid.UUID(workflow_id),
                        merchant_id=parent.merchant_id,
                        ticket_id=parent.ticket_id,
                        started_by=None,
                        provider=parent.provider,
                        model=parent.model,
                        prompt=parent.prompt,
                        **bounds_snapshot(parent.merchant),
                        forked_from=parent,
                        fork_step=step.seq,
                        # DBOS replays the parent's run.begin: nothing else marks it running.
                        status=RunStatus.RUNNING,
                        started_at=timezone.now(),
                    )
            except IntegrityError:
                raise RunRefused(_open_run_sentence(parent)) from None
            audit_record(
                merchant_id=parent.merchant_id,
                actor=None,
                action="run.fork",
                run_id=fork.pk,
                channel=Channel.SYSTEM,
                detail={
                    "forked_from": str(parent.pk),
                    "fork_step": step.seq,
                    "dbos_start_step": origin.start_step,
                    "ticket": parent.ticket.reference,
                    "by": OUTSIDE,
                },
            )
    except RunRefused as exc:
        return _refuse(
            origin, parent, WorkflowFindingKind.FORK_REFUSED, f"{what}: {str(exc).rstrip('.')}."
        )
    finding_record(
        workflow_id=workflow_id,
        kind=WorkflowFindingKind.FORK_ADOPTED,
        run=fork,
        forked_from=parent,
        dbos_status=origin.status,
        detail=(
            f"{what} became run {fork.pk}: forked from run {parent.pk} at its step {step.seq} "
            f"({step.tool or step.kind}), on ticket {parent.ticket.reference}. Effects the "
            "lineage already made are answered from the ledger, never repeated."
        ),
        settled=f"adopted as run {fork.pk}",
    )
    log.info("adopted DBOS fork %s of run %s at step %s", workflow_id, parent.pk, step.seq)
    return Adoption(fork)


def _fork_point_at(parent: Run, start_step: int) -> Step:
    """The step of ``parent`` a DBOS fork starting at DBOS step ``start_step`` begins with, when
    ``replay --fork-from`` would start a fork there; else ``RunRefused`` saying why and where
    a fork may start."""
    checkpoints = _checkpoints(parent)
    if not checkpoints:
        raise RunRefused(f"run {parent.pk} has no DBOS history, so nothing can be forked from it")
    steps = [s for s in effective_steps(parent) if s.function_id is not None]
    starts: dict[int, Step] = {}
    allowed: list[str] = []
    for s in steps:
        try:
            fork_point(parent, s.seq)
            start = _start_function_id(parent, s, checkpoints)
        except RunRefused:
            continue
        starts.setdefault(start, s)
        allowed.append(f"{start} (step {s.seq}, {s.tool or s.kind})")
    if start_step in starts:
        return starts[start_step]
    name = checkpoints.get(start_step, "")
    where = f"DBOS step {start_step}" + (f" ({name})" if name else "")
    own = next((s for s in steps if s.function_id == start_step), None)
    if start_step > max(checkpoints):
        why = f"{where} is past the end of the run's workflow (its last step is {max(checkpoints)})"
    elif name == StepName.BEGIN or start_step < min(starts, default=start_step + 1):
        why = (
            f"{where} is the run's beginning: that is a new run, started with `manage.py "
            f"run_ticket {parent.ticket.reference}`"
        )
    elif own is not None:
        try:
            fork_point(parent, own.seq)
            why = f"{where} is not where a fork of step {own.seq} starts"
        except RunRefused as exc:
            why = str(exc).rstrip(".")
    else:
        why = (
            f"{where} is no step of the run's step log (a part of the approval gate, or DBOS's "
            "own bookkeeping)"
        )
    shown = "; ".join(allowed[:12]) + ("; …" if len(allowed) > 12 else "")
    raise RunRefused(
        f"{why}. Forks of run {parent.pk} may start at DBOS steps "
        + (shown or "none")
        + f" — or use `manage.py replay {parent.pk} --fork-from <step>`"
    )


def _refuse(
    origin: WorkflowOrigin, parent: Run | None, kind: WorkflowFindingKind, why: str
) -> Adoption:
    """Cancel the workflow at DBOS, so it does nothing, and record why it was refused."""
    try:
        state = dbos_client.cancel_run_workflow(origin.workflow_id)
        status = state.status if state is not None else origin.status
        done = "Deskhand refused it and DBOS cancelled it, so it did nothing."
    except Exception:  # the workflow refuses again when it starts, and cancels itself then
        log.exception("cancelling refused workflow %s failed", origin.workflow_id)
        status = origin.status
        done = "Deskhand refused it; it does nothing when it starts."
    detail = f"{why.rstrip('.')}. {done}"
    finding_record(
        workflow_id=origin.workflow_id,
        kind=kind,
        forked_from=parent,
        dbos_status=status,
        detail=detail,
    )
    log.warning("refused DBOS workflow %s: %s", origin.workflow_id, detail)
    return Adoption(None, detail)


def limited_call_refuse(workflow_id: str, run_id: str) -> str:
    """Refuse a rate-limited model call's workflow that its run never started (a DBOS fork of
    one): it would call the model again, add the cost to a step that already has its reply,
    and send the reply to nobody. Cancelled at DBOS, recorded; returns the sentence."""
    origin = dbos_client.workflow_origin(workflow_id) or WorkflowOrigin(
        workflow_id, LIMITED_CALL_WORKFLOW, "", None, None, 1
    )
    return _refuse(
        origin,
        run_of(run_id),
        WorkflowFindingKind.FORK_REFUSED,
        f"DBOS workflow {workflow_id} is a model call of run {run_id} ({LIMITED_CALL_WORKFLOW}) "
        f"that the run never made (a fork of one, made by {OUTSIDE}): it would call the model "
        "again and its answer would reach no one. To redo a turn, fork the run from its model "
        f"step: `manage.py replay {run_id} --fork-from <step>`",
    ).refusal
