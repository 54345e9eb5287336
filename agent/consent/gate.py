"""The approval gate as the run sees it: two durable steps around the wait.

``gate_request`` (``gate.request``) asks the ledger, opens the approval and says where the
decision stands; ``gate_settle`` (``gate.resume``) reads it after each wake. The run waits
between them on the approval's DBOS topic, but a message only wakes it: authority is the
decision row in the database, re-read here and checked against this run, this call and this
exact argument hash before anything executes.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from agent.consent.policy import policy_match
from agent.conversation.live import DENIAL_TEXT  # noqa: F401 - the words a denial is sent as
from agent.customer.news import REPLY_TOOL, reply_precheck
from agent.ledger import lineage
from agent.ledger.answers import log_effect_answer
from agent.models import Run, RunStatus, Step, payloads
from agent.models.payloads import StepKind
from agent.record.steplog import log_step
from agent.run.bounds import refund_precheck
from agent.steps import ApprovalPayload, Opened, ToolPayload, Verdict
from agent.tools import args_hash, get_tool
from agent.tools.narrowing import changes_text
from agent.tools.order_facts import refund_facts
from approvals.models import Approval, ApprovalStatus
from approvals.notifications import NotificationEvent, notify_approval
from approvals.services import approval_decide_by_policy, approval_expire
from deskhand.domain.desk.rows import row_by_pk
from deskhand.infra import events

# The calls a pre-check may refuse before anyone is asked.
PRECHECKED = ("issue_refund", REPLY_TOOL)


def gate_request(run_id: str, seq: int, call: dict[str, Any]) -> Opened:
    """Open (or find) the approval for this call and park the run on it.

    The ledger's answer first: ``done`` when the lineage already made this effect
    (``lineage.performed``: nobody is asked and nothing is written). Otherwise the approval,
    whose ``status`` is the decision as it stands (a merchant's rule may already have made
    it), so the run reads it without a step of its own.

    One approval per (run, tool call id), ever: a step re-executed after a
    crash, or a recovery after the approval expired, finds the same row and
    never opens a fresh one. If that row was opened for different arguments
    (a re-derived trajectory), it is returned unchanged and ``mismatch`` says
    so; ``gate_resume`` will refuse it whatever a person decides.

    On a run that is no longer active (being cancelled, or ended) nobody is
    asked and nothing is written: it returns ``closed`` (the run's status) and the
    loop ends quietly.
    """
    name, call_id, args = call["name"], call["id"], call["input"]
    tool = get_tool(name)
    digest = args_hash(name, args)
    with transaction.atomic():
        # The ticket too: the refund pre-check and the notifications name it.
        run = row_by_pk(Run, run_id, related=("merchant", "ticket"), lock=True)
        if not run.is_active:
            return Opened(closed=run.status)
        done = lineage.performed(run, call)
        if done is not None:
            return Opened(done=done)
        if name in PRECHECKED and not _asked(run_id, call_id):
            # Nobody is asked to approve money that cannot move, nor a reply with nothing in
            # it for the customer: the model reads why instead, and so does the run's story.
            why = (
                refund_precheck(run_id, args, run=run)
                if name == "issue_refund"
                else reply_precheck(run, call_id)
            )
            if why:
                log_effect_answer(
                    run_id=run_id,
                    seq=seq,
                    tool=name,
                    call_id=call_id,
                    arguments=args,
                    result=ToolPayload(text=why),
                    ok=False,
                )
                return Opened(refused=why)
        now = timezone.now()
        facts = _facts(run, tool, args)
        approval, created = Approval.objects.get_or_create(
            run=run,
            tool_call_id=call_id,
            defaults={
                "merchant": run.merchant,  # the instance: the notifications read it, not again
                "tool": name,
                "arguments": args,
                "args_hash": digest,
                "preview": tool.preview(args, facts.get("currency", "USD"))
                if tool.preview
                else name,
                # What was already done to this order or customer, frozen at request time.
                "prior_effects": lineage.prior_effects(run, name, args),
                # The order's money as the person is shown it: the effect reads it again.
                "facts": facts,
                "requested_at": now,
                "expires_at": now + dt.timedelta(seconds=run.merchant.approval_ttl_seconds),
            },
        )
        if created:
            # The merchant's rules first (under its row lock, in this transaction); a call no
            # rule covers waits for a person, and the people who may decide it are told.
            matched = policy_match(merchant_id=run.merchant_id, name=name, args=args, now=now)
            if matched is not None:
                approval_decide_by_policy(approval, policy=matched[0], rule=matched[1])
            else:
                notify_approval(approval, NotificationEvent.REQUESTED)
        differences = [] if created else _differences(approval, run_id, call_id, name, args, digest)
        if approval.status == ApprovalStatus.PENDING and run.status == RunStatus.RUNNING:
            run.status = RunStatus.AWAITING_APPROVAL
            run.save(update_fields=["status", "updated_at"])
        if differences and Step.objects.filter(run_id=run_id, seq=seq).exists():
            # This very step re-executed (a crash between its commit and its checkpoint) and the
            # call now differs from its first execution's: a rewritten checkpoint. Its row keeps
            # what the person was asked; the refusal goes into the run's closing row, never
            # over the request (the step log would refuse that anyway).
            return _requested(approval, differences)
        log_step(
            run_id=run_id,
            seq=seq,
            kind=StepKind.APPROVAL,
            tool=name,
            tool_call_id=call_id,
            risk=tool.risk.value,
            arguments=args,
            result=ApprovalPayload(
                event="requested",
                approval_id=str(approval.id),
                status=approval.status,
                preview=approval.preview,
                args_hash=approval.args_hash,
                expires_at=approval.expires_at.isoformat(),
                reused=not created,
                prior_effects=tuple(p["what"] for p in approval.prior_effects),
                facts=approval.facts,
                policy=approval.decided_by_label if approval.policy_id else "",
                mismatch="; ".join(differences),
            ),
            locked_status=run.status,  # locked above
        )
        if created:
            events.emit(
                "approval.requested",
                run_id=run_id,
                approval_id=approval.id,
                merchant_id=run.merchant_id,
                tool=name,
                amount_cents=args.get("amount_cents"),
            )
    return _requested(approval, differences)


def _facts(run: Run, tool: Any, args: dict[str, Any]) -> dict[str, Any]:
    """What the approver is shown of the order a call moves money on (``{}`` for any other
    call): its total, refunded total and what is left, in the order's currency."""
    if not tool.money_field:
        return {}
    facts = refund_facts(merchant_id=run.merchant_id, reference=args.get("order_reference"))
    return facts.to_json() if facts is not None else {}


def _asked(run_id: str, call_id: str) -> bool:
    """Whether this call's approval was opened already (a re-executed request): its
    pre-check was passed then, and is not asked again."""
    with connection.cursor() as cur:  # no query compiled for it on every gated call
        cur.execute(
            "SELECT EXISTS (SELECT 1 FROM approvals_approval"
            " WHERE run_id = %s AND tool_call_id = %s)",
            [run_id, call_id],
        )
        return bool(cur.fetchone()[0])


def _requested(approval: Approval, differences: list[str]) -> Opened:
    """``gate.request``'s output when the run waits on (or reads) the decision."""
    return Opened(
        approval_id=str(approval.id),
        status=approval.status,
        expires_at=approval.expires_at.isoformat(),
        topic=approval.topic,
        mismatch="; ".join(differences),
    )


def gate_settle(run_id: str, seq: int, call: dict[str, Any], approval_id: str) -> Verdict:
    """``gate.resume``: the decision read, and the resume once there is one (or the approval
    has expired), in one step.

    ``pending`` (with ``expires_at``) while nobody has decided and the approval has not
    expired: a message that woke the run was not a decision, and the run waits again
    (writing nothing). Otherwise ``gate_resume``'s verdict; the time handed back is counted
    from the approval's ``requested_at``, so no clock reading of the loop's is needed.
    """
    a = row_by_pk(Approval, approval_id)
    if a.status == ApprovalStatus.PENDING and timezone.now() < a.expires_at:
        return Verdict("pending", expires_at=a.expires_at.isoformat())
    return gate_resume(run_id, seq, call, approval_id, 0.0)


def gate_resume(
    run_id: str, seq: int, call: dict[str, Any], approval_id: str, waited_seconds: float
) -> Verdict:
    """Settle the wait: hand the waiting time back, then check the decision against the call.

    ``waited_seconds`` is the loop's own measure of the wait; the larger of it and the
    time since the approval was requested is handed back.

    The decision row is the only authority: it must be approved, and be for
    this run, this tool call, this tool and this exact argument hash. A run
    that stops waiting while the approval is still pending expires it, so no
    later decision can land on a call the run has given up on.

    Returns ``approved``, ``denied`` (with its ``reason``), ``expired`` or ``mismatch``
    (with its ``detail``) — or, on a run that is no longer active (a cancel took its row
    lock first, withdrawing the approval; or it ended), ``closed`` with the run's
    ``status`` and nothing written: the run is closed by whoever closed it, and its step
    log keeps their line.
    """
    name, call_id, args = call["name"], call["id"], call["input"]
    digest = args_hash(name, args)
    with transaction.atomic():
        run = row_by_pk(Run, run_id, lock=True)
        if not run.is_active:
            return Verdict("closed", status=run.status)
        approval = row_by_pk(Approval, approval_id, related=("decided_by", "policy"), lock=True)
        # Time waiting for a person is handed back to the working deadline. It is counted from
        # the approval's own ``requested_at`` (not only the loop's measured wait), so a worker
        # killed between opening the approval and its first clock reading loses none of it.
        waited = max(0.0, waited_seconds, (timezone.now() - approval.requested_at).total_seconds())
        # Handed back once per approval: a resume step re-executed after a crash before its
        # checkpoint finds the step row it wrote, and so does a second resume of the same approval.
        already = Step.objects.filter(
            payloads.approval_settled(approval_id), run_id=run_id
        ).exists()
        if not already:
            run.waited_seconds += waited
        if run.status == RunStatus.AWAITING_APPROVAL:
            run.status = RunStatus.RUNNING
        run.save(update_fields=["waited_seconds", "status", "updated_at"])
        if approval.status == ApprovalStatus.PENDING:
            approval_expire(approval, why="nobody decided before it expired")
        differences = _differences(approval, run_id, call_id, name, args, digest)
        if approval.status == ApprovalStatus.APPROVED and differences:
            verdict = Verdict("mismatch", detail="; ".join(differences))
        elif approval.status == ApprovalStatus.APPROVED:
            changed = (
                changes_text(name, args, approval.executes, approval.currency)
                if approval.changed
                else ""
            )
            verdict = Verdict("approved", decided_by=approval.decided_by_id, changed=changed)
        elif approval.status == ApprovalStatus.DENIED:
            verdict = Verdict("denied", reason=approval.reason)
        else:
            verdict = Verdict("expired")
        amended = approval.changed and verdict.verdict == "approved"
        log_step(
            run_id=run_id,
            seq=seq,
            kind=StepKind.APPROVAL,
            tool=name,
            tool_call_id=call_id,
            arguments=args,
            result=ApprovalPayload(
                event=verdict.verdict,
                approval_id=approval_id,
                waited_seconds=round(waited, 3),
                decided_by=approval.decided_by.email if approval.decided_by else None,
                policy=approval.decided_by_label if approval.policy_id else "",
                decided_at=approval.decided_at.isoformat() if approval.decided_at else None,
                channel=approval.channel,
                reason=approval.reason or "",
                approved_hash=approval.args_hash,
                call_hash=digest,
                escalated_at=approval.escalated_at.isoformat() if approval.escalated_at else None,
                detail=verdict.detail if verdict.verdict == "mismatch" else "",
                changed=verdict.changed if amended else "",
                executes_hash=approval.approved_hash if amended else "",
            ),
            ok=verdict.verdict in ("approved", "denied"),
            locked_status=run.status,  # locked above
        )
    return verdict


def _differences(
    approval: Approval, run_id: str, call_id: str, name: str, args: dict[str, Any], digest: str
) -> list[str]:
    """What differs between the approval on record and the call about to run, in words."""
    out = []
    if str(approval.run_id) != run_id:
        out.append(f"the approval belongs to run {approval.run_id}, not {run_id}")
    if approval.tool_call_id != call_id:
        out.append(f"the approval is for call {approval.tool_call_id}, not {call_id}")
    if approval.tool != name:
        out.append(f"the approval is for {approval.tool}, not {name}")
    if approval.args_hash != digest:
        approved = approval.arguments if isinstance(approval.arguments, dict) else {}
        changed = [
            f"{key} approved {approved.get(key, '(absent)')!r}, now {args.get(key, '(absent)')!r}"
            for key in sorted(set(approved) | set(args))
            if approved.get(key, _ABSENT) != args.get(key, _ABSENT)
        ]
        out.append(
            f"the arguments changed after approval ({'; '.join(changed) or 'same values, different hash'}): "
            f"approved hash {approval.args_hash[:12]}, call hash {digest[:12]}"
        )
    return out


_ABSENT = object()
