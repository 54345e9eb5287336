"""Writes to a run from outside its workflow: start, cancel, and closing a run truthfully.

The workflow's own steps (begin, finish, fail) are in ``agent/run/lifecycle.py``; reading a
run's outcome is ``agent/run/selectors.py``.

Starting a run is two writes to two systems — the Run row, then the DBOS
enqueue — so the gap between them is handled explicitly: an enqueue that
raises ends the run ``failed``/``enqueue_failed`` at once, and a web process
that dies in between leaves a ``queued`` run with no workflow, which the
reconciler fails as ``enqueue_lost``. No run is ever stuck ``queued``.

Cancelling is two writes to two systems too, in the other order. First, under
the run's row lock: the run becomes ``cancelling``, its pending approvals are
withdrawn, the cancellation gets its step-log row and its audit event. An
irreversible effect takes the same row lock before it acts and refuses on a
run that is not active, so from that commit on no effect can happen; one that
committed before it is in the ledger, and the summary (built from the ledger)
says so. Then DBOS is asked to cancel the workflow; once it confirms (or the
workflow never existed) the run becomes ``cancelled``. If DBOS cannot be
reached the run stays ``cancelling`` and the reconciler finishes the job:
a run is never shown ``cancelled`` while its workflow can still act.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from agent.conversation.prompts import opening_prompt
from agent.models import OPEN_STATUSES, TERMINAL_STATUSES, Run, RunStatus, StopReason
from agent.models.payloads import StepKind
from agent.providers import default_provider, pricing
from agent.record.steplog import log_step
from agent.run.selectors import effects_summary
from agent.steps import EndPayload, Finished
from approvals.audit import audit_record
from approvals.models import Approval, ApprovalStatus, Channel
from approvals.notifications import notify_run_finished
from approvals.services import approval_expire, approval_withdraw
from deskhand.domain.desk.models import Ticket
from deskhand.domain.desk.permissions import require_actor
from deskhand.infra import events
from deskhand.infra.dbos import client as dbos_client

log = logging.getLogger(__name__)


class RunRefused(Exception):
    """A run could not be started, cancelled or steered; the message says why."""


def bounds_snapshot(merchant: Any) -> dict[str, Any]:
    """The bounds a new run carries for life: a settings change never widens a run in flight,
    and the deadline is stamped once, so a crash-looping run never earns a fresh clock."""
    bounds = settings.DESKHAND_BOUNDS
    return {
        "application_version": settings.DESKHAND_APP_VERSION,
        "max_steps": bounds["max_steps"],
        "max_tokens": bounds["max_tokens"],
        "max_spend_micros": bounds["max_spend_micros"],
        "deadline_seconds": bounds["deadline_seconds"],
        "max_refund_cents": min(bounds["max_refund_cents"], merchant.run_refund_ceiling_cents),
        "loop_threshold": bounds["loop_threshold"],
        # Where the run reads orders, for life: changing the merchant's source never changes
        # the facts under a run or the approvals it asked for (docs/effects.md).
        "order_source": merchant.order_source,
        "deadline_at": timezone.now() + dt.timedelta(seconds=bounds["deadline_seconds"]),
    }


def run_create(
    *,
    ticket: Ticket,
    user: Any,
    channel: str = Channel.CLI,
    provider: tuple[str, str] | None = None,
    detail: dict[str, Any] | None = None,
    run_id: uuid.UUID | None = None,
) -> Run:
    """Create the Run row (the one open run per ticket is enforced by a partial unique index).

    ``user=None`` is the system starting it on the merchant's own setting (a customer's
    message, ``agent.customer.route``): audited with no actor, ``detail`` saying why;
    ``run_id`` is then derived from the customer's line, so a line opens one run ever.
    """
    if user is not None:
        require_actor(user, ticket.merchant_id, "start runs")
    name, model = provider or default_provider()
    if name == "anthropic":
        # A model we cannot cost is refused here, in one sentence, not inside the first step.
        try:
            pricing.require_priced(model)
        except pricing.UnknownModel as exc:
            raise RunRefused(str(exc)) from None
    try:
        with transaction.atomic():
            run = Run.objects.create(
                id=run_id or uuid.uuid4(),
                merchant_id=ticket.merchant_id,
                ticket=ticket,
                started_by=user,
                provider=name,
                model=model,
                prompt=opening_prompt(ticket.reference),
                **bounds_snapshot(ticket.merchant),
            )
            audit_record(
                merchant_id=ticket.merchant_id,
                actor=user,
                action="run.start",
                run_id=run.pk,
                channel=channel,
                detail={
                    "ticket": ticket.reference,
                    "provider": name,
                    "model": model,
                    **(detail or {}),
                },
            )
    except IntegrityError:
        open_run = Run.objects.filter(ticket=ticket, status__in=OPEN_STATUSES).first()
        raise RunRefused(
            f"ticket {ticket.reference} already has an open run"
            + (f" ({open_run.id}, {open_run.status})" if open_run else "")
            + "; cancel it or wait for it to finish."
        ) from None
    return run


def run_enqueue(run: Run) -> Run:
    """Hand the run to DBOS. The run id is the workflow id; the merchant is the partition key."""
    try:
        dbos_client.enqueue_run(run_id=str(run.id), partition_key=run.merchant.slug)
    except Exception as exc:  # any failure to enqueue must leave a truthful, terminal run
        log.exception("enqueue failed for run %s", run.id)
        run_mark_failed(
            run_id=str(run.id),
            reason=StopReason.ENQUEUE_FAILED,
            detail=f"could not enqueue: {type(exc).__name__}: {exc}",
        )
        run.refresh_from_db()
    return run


def run_start(
    *,
    ticket: Ticket,
    user: Any,
    channel: str = Channel.CLI,
    provider: tuple[str, str] | None = None,
    detail: dict[str, Any] | None = None,
) -> Run:
    return run_enqueue(
        run_create(ticket=ticket, user=user, channel=channel, provider=provider, detail=detail)
    )


def next_seq(run_id: str) -> int:
    with connection.cursor() as cur:  # asked by every run's first step: no query compiled
        cur.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM agent_step WHERE run_id = %s", [run_id])
        return int(cur.fetchone()[0])


def run_close(
    run: Run,
    *,
    status: str,
    reason: str,
    detail: str,
    summary: str,
    seq: int | None,
    kind: str,
    result: EndPayload,
) -> None:
    """Make a locked, open run terminal: status, summary, a step-log line.

    The caller has closed its pending approvals first (``run_close_pending_approvals``),
    so the summary it built names them as they now are. ``seq=None`` writes no
    step-log line (a cancellation already wrote its own).
    """
    run.status, run.stop_reason, run.stop_detail = status, reason, detail[:2000]
    run.summary = summary
    run.finished_at = timezone.now()
    run.waiting_until, run.wait_reason = None, ""  # a closed run waits for nothing
    run.save(
        update_fields=[
            "status",
            "stop_reason",
            "stop_detail",
            "summary",
            "finished_at",
            "waiting_until",
            "wait_reason",
            "updated_at",
        ]
    )
    if seq is not None:
        log_step(
            run_id=str(run.pk),
            seq=seq,
            kind=kind,
            result=result,
            ok=status == RunStatus.SUCCEEDED,
            closing=True,
            locked_status=status,  # the caller holds the run's lock
        )
    events.emit(
        "run.finished",
        run_id=run.pk,
        merchant_id=run.merchant_id,
        status=status,
        reason=reason or None,
        steps=run.steps,
        input_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        cost_micros=run.cost_micros,
    )
    # The merchant's webhook hears it too, from the same transaction (docs/api.md).
    notify_run_finished(run)


def run_close_pending_approvals(
    run: Run, *, ending: str, cancelled_by: Any | None = None, channel: str = Channel.SYSTEM
) -> list[str]:
    """Withdraw (on cancel) or expire the locked run's pending approvals, each audited. Their ids.

    The one way a run's pending approvals close when the run does: withdrawn
    (by the person who cancelled, or the system) when it is cancelled, expired
    otherwise — never a bulk update without an audit event.
    """
    closed = []
    # Re-checked under each row's lock: a decision that committed meanwhile is left alone.
    pending = list(
        Approval.objects.select_for_update(of=("self",))
        .filter(run_id=run.pk, status=ApprovalStatus.PENDING)
        .order_by("id")
    )
    for approval in pending:
        if ending == RunStatus.CANCELLED:
            by = cancelled_by.email if cancelled_by is not None else "the system"
            approval_withdraw(
                approval, user=cancelled_by, channel=channel, why=f"the run was cancelled by {by}"
            )
        else:
            approval_expire(approval, why=f"its run ended ({ending})")
        closed.append(str(approval.pk))
    return closed


def run_mark_failed(*, run_id: str, reason: str, detail: str) -> bool:
    """Fail a run that is not yet terminal (durable record of a failure). Returns whether it changed.

    A run being cancelled is left to the cancel: a person asked for ``cancelled``.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status in TERMINAL_STATUSES or run.status == RunStatus.CANCELLING:
            return False
        run_close_pending_approvals(run, ending=RunStatus.FAILED)
        run_close(
            run,
            status=RunStatus.FAILED,
            reason=reason,
            detail=detail,
            summary=f"Failed: {reason} — {detail[:500]}\n\nEffects:\n{effects_summary(run_id)}",
            seq=next_seq(run_id),
            kind=StepKind.ERROR,
            result=EndPayload(stop_reason=reason, detail=detail[:2000]),
        )
    return True


def run_mark_cancelled(*, run_id: str, by: str) -> bool:
    """Record that a run's workflow can no longer act and the run is cancelled. Returns whether it changed.

    Called once DBOS has confirmed the cancel (by ``run_cancel`` or the
    reconciler), or by the reconciler for a workflow DBOS says was cancelled
    outside Deskhand. The summary is built from the ledger now, so an effect
    that committed before the cancel took the run lock is reported.
    """
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.status in TERMINAL_STATUSES:
            return False
        # A cancel requested through run_cancel wrote its step-log line (and named who) already.
        requested = run.status == RunStatus.CANCELLING
        if requested:
            by = run.stop_detail.removeprefix("cancelled by ") or by
        run_close_pending_approvals(run, ending=RunStatus.CANCELLED)
        run_close(
            run,
            status=RunStatus.CANCELLED,
            reason=StopReason.CANCELLED,
            detail=f"cancelled by {by}",
            summary=f"Cancelled by {by}.\n\nEffects:\n{effects_summary(run_id)}",
            seq=None if requested else next_seq(run_id),
            kind=StepKind.BOUND,
            result=EndPayload(event="cancel", status="cancelled", stop_reason="cancelled", by=by),
        )
    return True


def run_take_workflow_end(*, run_id: str, output: Any) -> str | None:
    """Close an active run whose workflow DBOS says already ended without closing it.

    A run's own last step closes it before its workflow ends, so this is a run whose
    workflow was ended or re-run from outside (DBOS's own tools). The run takes the end the
    workflow's own result names when that is a closed run's status, else ``failed``; its
    summary is built from the ledger, as every closing is. Returns the status it took, or
    ``None`` if the run was no longer active.
    """
    # ``Finished``'s JSON; a workflow of a version before 0.2.0 wrote the same fields, no ``v``.
    said = dict(output) if isinstance(output, dict) and "status" in output else {"status": ""}
    ended = Finished.from_json({**said, "v": Finished.VERSION})
    status, reason = ended.status, ended.stop_reason
    if status not in TERMINAL_STATUSES or reason not in StopReason.values:
        status, reason = RunStatus.FAILED, StopReason.ERROR
    detail = (
        "its workflow ended in DBOS (SUCCESS) without closing the run, so the run took the end "
        "the workflow's result names"
    )
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if not run.is_active:
            return None
        run_close_pending_approvals(run, ending=status)
        run_close(
            run,
            status=status,
            reason=reason,
            detail=detail,
            summary=f"Ended: {detail}.\n\nEffects:\n{effects_summary(run_id)}",
            seq=next_seq(run_id),
            kind=StepKind.BOUND,
            result=EndPayload(stop_reason=reason, detail=detail, status=status),
        )
    return str(status)


def run_amend_summary(*, run_id: str, line: str) -> None:
    """Add a line to a closed run's summary, once: what happened to it after it was closed."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if line in run.summary:
            return
        run.summary = f"{run.summary}\n\nLater: {line}" if run.summary else f"Later: {line}"
        run.save(update_fields=["summary", "updated_at"])


class AlreadyCancelled(RunRefused):
    """A second cancel: refused, and nothing changes."""


def run_cancel(*, run: Run, user: Any, channel: str = Channel.CLI) -> Run:
    """Cancel a run truthfully: stop it acting, withdraw its approvals, then stop its workflow.

    1. Under the run's row lock: refuse a run already cancelled or being cancelled
       (``AlreadyCancelled``; no second audit event) or otherwise ended; else mark
       it ``cancelling``, withdraw its pending approvals (as this user's act), and
       write the cancellation's step-log line (the next number, under the lock)
       and its ``run.cancel`` audit event. Committed before DBOS is asked.
    2. Ask DBOS to cancel the workflow. Once DBOS says it can no longer act (or
       it never existed), the run is ``cancelled`` with a summary from the ledger.
       If DBOS cannot be reached, the run stays ``cancelling`` and the reconciler
       finishes it.
    """
    require_actor(user, run.merchant_id, "cancel runs")
    by = str(user.email or user)
    with transaction.atomic():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.status == RunStatus.CANCELLED:
            raise AlreadyCancelled(
                f"run {run.id} is already cancelled; there is nothing to cancel."
            )
        if locked.status == RunStatus.CANCELLING:
            raise AlreadyCancelled(
                f"run {run.id} is already cancelled; DBOS has not yet confirmed its workflow stopped, "
                "and the reconciler finishes that."
            )
        if locked.status in TERMINAL_STATUSES:
            raise RunRefused(
                f"run {run.id} is already {locked.status}; there is nothing to cancel."
            )
        was = locked.status
        # Locked now, so the list the audit event names is the list withdrawn below.
        pending = [
            str(pk)
            for pk in Approval.objects.select_for_update()
            .filter(run_id=locked.pk, status=ApprovalStatus.PENDING)
            .values_list("pk", flat=True)
        ]
        audit_record(
            merchant_id=locked.merchant_id,
            actor=user,
            action="run.cancel",
            run_id=locked.pk,
            channel=channel,
            detail={"was": was, "withdrawn": pending},
        )
        withdrawn = run_close_pending_approvals(
            locked, ending=RunStatus.CANCELLED, cancelled_by=user, channel=channel
        )
        locked.status = RunStatus.CANCELLING
        locked.stop_detail = f"cancelled by {by}"
        locked.save(update_fields=["status", "stop_detail", "updated_at"])
        log_step(
            run_id=str(locked.pk),
            seq=next_seq(str(locked.pk)),
            kind=StepKind.BOUND,
            result=EndPayload(
                event="cancel",
                # The run ends cancelled (replay reads this: it ended from outside the loop).
                status=RunStatus.CANCELLED,
                stop_reason="cancelled",
                by=by,
                channel=channel,
                was=was,
                withdrawn=tuple(withdrawn),
            ),
            ok=False,
            # This row is the run's closing line (the run is no longer active from here on):
            # written where it says, never flagged as a step that finished late.
            closing=True,
        )
    run_cancel_confirm(run_id=str(run.pk), by=by)
    run.refresh_from_db()
    return run


def run_cancel_confirm(*, run_id: str, by: str) -> bool:
    """Ask DBOS to cancel a ``cancelling`` run's workflow; mark the run ``cancelled`` once it can no
    longer act. Returns whether the run is now cancelled (``False``: DBOS is unreachable or still
    reports it active; the reconciler tries again)."""
    try:
        state = dbos_client.cancel_run_workflow(run_id)
    except Exception as exc:  # the run stays cancelling; the reconciler retries
        log.warning("cancel_workflow(%s) failed; the reconciler will retry: %s", run_id, exc)
        return False
    if state is not None and state.active:
        log.warning(
            "workflow %s is still %s after cancel; the reconciler will retry", run_id, state.status
        )
        return False
    run_mark_cancelled(run_id=run_id, by=by)
    return True
