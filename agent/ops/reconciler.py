"""The reconciler: make every Run row tell the truth about its workflow.

Runs in the worker every few seconds, on the clock it is given (``now``). It
finishes cancels DBOS could not confirm at the time (runs left ``cancelling``:
cancel the workflow again, then mark them cancelled), stops any workflow still
active behind a run recorded ``cancelled``, maps DBOS terminal
states (error, cancelled, recovery attempts exceeded) onto runs still marked
open, fails runs whose workflow never came to exist (the web process died
between creating the row and enqueueing), and re-sends recorded decisions and
staff notes whose send never happened (same idempotency keys, so each is
delivered once; a note that was delivered is marked and never sent again).
What an operator does with DBOS's own tools ends truthfully here too: a fork of a run
made with ``dbos workflow fork`` becomes a run or is refused (``agent.replay.fork``), and
what the runs and DBOS disagree on is repaired where it can be and written up
(``agent.run.workflow_findings``).
It also sends the notification outbox (``approvals.outbox``): people told that
an approval waits for them, at least once, retried with backoff.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid

from django.utils import timezone

from agent.customer.intake import intake_sweep
from agent.customer.sweep import customer_waits_sweep
from agent.models import (
    ACTIVE_STATUSES,
    OPEN_STATUSES,
    TERMINAL_STATUSES,
    Run,
    RunStatus,
    StopReason,
    WorkflowFinding,
    WorkflowFindingKind,
)
from agent.replay.fork import OUTSIDE, run_of, workflow_adopt
from agent.run.services import (
    run_amend_summary,
    run_cancel_confirm,
    run_mark_cancelled,
    run_mark_failed,
    run_take_workflow_end,
)
from agent.run.steering import note_send
from agent.run.workflow_findings import finding_record
from approvals.models import Approval, ApprovalStatus, StaffNote
from approvals.notifications import notify_expiring_due, notify_refunds_due
from approvals.outbox import outbox_send_due
from approvals.services import approval_send
from deskhand.domain.apikeys.relay import replies_relay
from deskhand.domain.desk.models import Routing, TicketMessage
from deskhand.infra.dbos import client as dbos_client

log = logging.getLogger(__name__)

ENQUEUE_GRACE = dt.timedelta(seconds=30)
# A run's last step closes it a moment before DBOS records its workflow's end: a resumed
# workflow still active this long after its run closed is not that run's own ending.
REVIVAL_GRACE = dt.timedelta(seconds=30)
# How far back the reconciler looks for workflows that ran again after their run closed and
# have ended since (DBOS's index on completed_at keeps it to recent endings).
REVIVAL_LOOKBACK = dt.timedelta(minutes=15)
# A decision or note younger than this may still have its own send in flight.
SEND_GRACE = dt.timedelta(seconds=2)


def reconcile(now: dt.datetime | None = None) -> dict[str, int]:
    now = now or timezone.now()
    counts = {
        "enqueue_lost": 0,
        "line_runs_enqueued": 0,
        "error": 0,
        "cancelled": 0,
        "recovery_exhausted": 0,
        "resent": 0,
        "notes_resent": 0,
        "workflows_stopped": 0,
        "workflows_ended": 0,
        "revived_ended": 0,
    }
    counts.update(forks_made_outside())
    # Only the runs that need something: thousands parked at the gate are fine and are
    # never read into this process (one query each, in Postgres; docs/scaling.md).
    table = Run._meta.db_table
    for pk in Run.objects.filter(status=RunStatus.CANCELLING).values_list("pk", flat=True):
        # A cancel DBOS did not confirm at the time: ask again; mark cancelled once it holds.
        if run_cancel_confirm(run_id=str(pk), by="the reconciler"):
            counts["cancelled"] += 1
    for run_id in dbos_client.runs_without_workflow(
        run_table=table, status=str(RunStatus.QUEUED), created_before=now - ENQUEUE_GRACE
    ):
        if opened_by_a_line(run_id):
            # A customer's line opened it: started late, never failed for a lost hand-on.
            slug = Run.objects.filter(pk=run_id).values_list("merchant__slug", flat=True).first()
            if slug is not None:
                dbos_client.enqueue_run(run_id=run_id, partition_key=slug)
                counts["line_runs_enqueued"] += 1
            continue
        if run_mark_failed(
            run_id=run_id,
            reason=StopReason.ENQUEUE_LOST,
            detail="the run was created but never handed to a worker",
        ):
            counts["enqueue_lost"] += 1
    troubled = dbos_client.troubled_run_workflows(
        run_table=table,
        run_statuses=[str(s) for s in OPEN_STATUSES if s != RunStatus.CANCELLING],
    )
    for run_id, wf in troubled.items():
        was = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
        if wf.status == "SUCCESS":
            ended = run_take_workflow_end(run_id=run_id, output=dbos_client.workflow_output(run_id))
            if ended is not None:
                counts["workflows_ended"] += 1
                _report_ended(run_id, was or "", "SUCCESS", f"the run took its end: {ended}")
        elif wf.status == "ERROR":
            if run_mark_failed(
                run_id=run_id, reason=StopReason.ERROR, detail=f"workflow failed: {wf.error}"[:2000]
            ):
                counts["error"] += 1
        elif wf.status == "MAX_RECOVERY_ATTEMPTS_EXCEEDED":
            if run_mark_failed(
                run_id=run_id,
                reason=StopReason.RECOVERY_EXHAUSTED,
                detail="the workflow crashed too many times",
            ):
                counts["recovery_exhausted"] += 1
        elif wf.status == "CANCELLED" and run_mark_cancelled(
            run_id=run_id, by="DBOS (the workflow was cancelled outside Deskhand)"
        ):
            counts["cancelled"] += 1
            _report_ended(
                run_id,
                was or "",
                "CANCELLED",
                "the run was recorded cancelled, its pending approvals withdrawn and its summary "
                "written from the ledger",
            )
    counts["workflows_stopped"] = stop_workflows_of_closed_runs(now)
    counts["revived_ended"] = report_workflows_ended_after_close(now)
    counts["resent"] = resend_undelivered(now)
    counts["notes_resent"] = resend_undelivered_notes(now)
    counts.update(notifications_sweep(now))
    counts.update(helpdesk_sweep(now))
    counts.update(intake_sweep_safe(now))
    counts["customers_woken"] = customer_waits_sweep()
    return counts


def intake_sweep_safe(now: dt.datetime) -> dict[str, int]:
    """Re-drive stored mail and customer lines left waiting (``agent.customer.intake``); a
    failure never stops the rest, and the next pass tries again."""
    try:
        return intake_sweep(now)
    except Exception:
        log.exception("the intake sweep failed; the next pass retries")
        return {"inbound_redriven": 0, "lines_redriven": 0, "intake_stuck": 0}


def opened_by_a_line(run_id: str) -> bool:
    """Whether a customer's line opened this run (``agent.customer.route``).

    Such a run is enqueued by the line's routing step after its commit. Nobody waits on the
    other side of that hand-on (the customer was answered when the mail was stored), so a
    hand-on lost to a crash is made here, late, instead of failing the run as "never handed
    to a worker": the automatic run the line should have opened exists, once, and runs.
    """
    return TicketMessage.objects.filter(
        routed_run_id=uuid.UUID(run_id), routing=Routing.OPENED
    ).exists()


def forks_made_outside() -> dict[str, int]:
    """Forks of runs made with DBOS's own tools that are no run's yet: each is adopted as a run
    or refused (``agent.replay.fork.workflow_adopt``), or, if it already ended, reported.

    A queued fork is decided here, before any worker runs it (it may wait on a version no
    worker serves). One that is running decides for itself as it starts. One that ended
    without a run (a worker on an older release ran it, and it failed for want of a run)
    is written up: it did nothing in our tables.
    """
    out = {"forks_adopted": 0, "forks_refused": 0, "forks_failed": 0}
    for origin in dbos_client.forks_without_run(
        run_table=Run._meta.db_table, finding_table=WorkflowFinding._meta.db_table
    ):
        if origin.status in ("ENQUEUED", "DELAYED"):
            try:
                adopted = workflow_adopt(origin.workflow_id)
            except Exception:
                log.exception("deciding DBOS fork %s failed", origin.workflow_id)
                continue
            out["forks_adopted" if adopted.run is not None else "forks_refused"] += 1
        elif not origin.active:
            parent = run_of(origin.forked_from or "")
            finding_record(
                workflow_id=origin.workflow_id,
                kind=WorkflowFindingKind.FORK_FAILED,
                forked_from=parent,
                dbos_status=origin.status,
                detail=(
                    f"DBOS fork {origin.workflow_id} of run {origin.forked_from} (made by "
                    f"{OUTSIDE}) ended {origin.status} before Deskhand adopted it"
                    + (f" ({origin.error})" if origin.error else "")
                    + ". It never had a run, so it wrote nothing in Deskhand's tables. To fork "
                    "the run, use `manage.py replay <run> --fork-from <step>`."
                ),
            )
            out["forks_failed"] += 1
    return out


def helpdesk_sweep(now: dt.datetime) -> dict[str, int]:
    """Relay the agent's replies on help-desk tickets to their desks (``deskhand.domain.apikeys.relay``);
    like the outbox, a failure never stops the rest and the next pass retries."""
    try:
        return replies_relay(now=now)
    except Exception:
        log.exception("the help-desk relay failed; the next pass retries")
        return {"helpdesk_replies_sent": 0, "helpdesk_replies_failed": 0}


def notifications_sweep(now: dt.datetime) -> dict[str, int]:
    """Tell people they are needed: write due expiry warnings and the stores' ``refund.created``
    (refunds made on orders they pushed), then send the outbox.

    A failure here never stops the rest of the reconciler; the rows stay and the next
    pass tries again.
    """
    try:
        warned = notify_expiring_due(now=now)
        notify_refunds_due()
        sent = outbox_send_due(now=now)
    except Exception:
        log.exception("the notification sweep failed; the next pass retries")
        return {"expiry_warnings": 0, "notifications_sent": 0, "notifications_failed": 0}
    return {
        "expiry_warnings": warned,
        "notifications_sent": sent["sent"],
        "notifications_failed": sent["failed"],
    }


def _report_ended(run_id: str, was: str, status: str, what: str) -> None:
    """An open run whose workflow DBOS ended outside Deskhand: say so where people look."""
    finding_record(
        workflow_id=run_id,
        kind=WorkflowFindingKind.WORKFLOW_ENDED,
        run=Run.objects.get(pk=run_id),
        dbos_status=status,
        detail=(
            f"DBOS ended the workflow of run {run_id} ({status}) while the run was {was}, "
            "outside Deskhand"
            + (" (e.g. `dbos workflow cancel`)" if status == "CANCELLED" else "")
            + f": {what}."
        ),
    )


def _report_revived(run_id: str, how: str, status: str) -> None:
    """A closed run whose workflow DBOS ran again: a finding, and a line on the run itself."""
    run = Run.objects.get(pk=run_id)
    line = (
        f"DBOS had this run's workflow running again after the run was closed ({run.status}): "
        "resumed outside Deskhand (e.g. `dbos workflow resume`), or left running by an older "
        "release. A closed run is never revived — no step acts for it and the model is not "
        f"called — {how}."
    )
    finding_record(
        workflow_id=run_id,
        kind=WorkflowFindingKind.WORKFLOW_REVIVED,
        run=run,
        dbos_status=status,
        detail=(
            f"Run {run_id}: {line} To work ticket {run.ticket.reference} again, start a new run, "
            f"or fork this one: `manage.py replay {run_id} --fork-from <step>`."
        ),
    )
    run_amend_summary(run_id=run_id, line=line)


def stop_workflows_of_closed_runs(now: dt.datetime) -> int:
    """Cancel any workflow DBOS holds active for a closed run, and say so.

    A run is closed only once its workflow can no longer act (a cancel waits for DBOS's
    confirmation; a run's own last step closes it). A workflow active behind a cancelled run
    was run again from outside — ``dbos workflow resume`` — or left by an older release whose
    cancel call failed: stopped at once. Behind another closed run, only a resumed one (on
    DBOS's internal queue) closed ``REVIVAL_GRACE`` ago: a run's own workflow, or one
    recovered after a crash, is ending on its own and is left to end.
    """
    table = Run._meta.db_table
    closed = {
        **dbos_client.runs_with_active_workflow(
            run_table=table, statuses=[str(RunStatus.CANCELLED)]
        ),
        **dbos_client.runs_with_active_workflow(
            run_table=table,
            statuses=[str(RunStatus.SUCCEEDED), str(RunStatus.FAILED), str(RunStatus.EXHAUSTED)],
            finished_before=now - REVIVAL_GRACE,
            resumed_only=True,
        ),
    }
    stopped = 0
    for run_id, wf in closed.items():
        try:
            state = dbos_client.cancel_run_workflow(run_id)
        except Exception:
            log.exception("cancelling the workflow of closed run %s failed", run_id)
            continue
        if state is None or not state.active:
            stopped += 1
            _report_revived(
                run_id,
                f"so Deskhand cancelled the workflow again (it was {wf.status})",
                "CANCELLED",
            )
    return stopped


def report_workflows_ended_after_close(now: dt.datetime) -> int:
    """Closed runs whose workflow ran again and ended before a pass saw it active: reported,
    and the run's summary says it did nothing more. Only recent endings are read."""
    ended = dbos_client.runs_whose_workflow_ended_later(
        run_table=Run._meta.db_table,
        statuses=[str(s) for s in TERMINAL_STATUSES],
        since=now - REVIVAL_LOOKBACK,
        finding_table=WorkflowFinding._meta.db_table,
        finding_kind=str(WorkflowFindingKind.WORKFLOW_REVIVED),
    )
    for run_id, wf in ended.items():
        _report_revived(
            run_id, f"and the workflow ended {wf.status} having done nothing more", wf.status
        )
    return len(ended)


def resend_undelivered(now: dt.datetime | None = None) -> int:
    """Re-send decisions recorded at least ``SEND_GRACE`` before ``now`` that never reached their run."""
    now = now or timezone.now()
    sent = 0
    for approval in Approval.objects.filter(
        delivered_at__isnull=True,
        decided_at__lt=now - SEND_GRACE,
        run__status__in=ACTIVE_STATUSES,
        status__in=[ApprovalStatus.APPROVED, ApprovalStatus.DENIED, ApprovalStatus.EXPIRED],
    )[:500]:
        try:
            approval_send(approval)
            sent += 1
        except Exception:
            log.exception("re-sending decision for approval %s failed", approval.id)
    return sent


def resend_undelivered_notes(now: dt.datetime | None = None) -> int:
    """Re-send staff notes that never reached their live run (keyed ``note:<id>``); each is
    marked ``delivered_at`` once DBOS accepts it, and never sent again."""
    now = now or timezone.now()
    sent = 0
    for note in StaffNote.objects.filter(
        delivered_at__isnull=True,
        run__status__in=ACTIVE_STATUSES,
        created_at__lt=now - SEND_GRACE,
    ).order_by("created_at")[:500]:
        try:
            note_send(note)
            sent += 1
        except Exception:
            log.exception("re-sending staff note %s failed", note.pk)
    return sent
