"""Reading a run: its outcome as the CLI and console show it, and what it did to the world.

The effects are read from the ledger and the approvals, never from the model's words.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

from django.db.models import Sum

from agent.ledger.lineage import CUSTOMER_MAIL, currency_of, describe, inherited_effects
from agent.models import Run
from agent.models.ledger import LedgerEntry, LedgerState
from agent.tools.narrowing import changes_text
from approvals.models import Approval, ApprovalStatus
from deskhand.domain.desk.models import OutboundEmail, Refund, RefundStatus, Ticket, TicketStatus
from deskhand.domain.desk.rows import row_by_pk, rows_where


def _decided_how(approval: Approval | None) -> str:
    """How an effect was approved, when not simply by a person as proposed."""
    if approval is None:
        return ""
    if approval.changed:
        proposed = approval.arguments if isinstance(approval.arguments, dict) else {}
        what = changes_text(approval.tool, proposed, approval.executes, approval.currency)
        return f" (approved with changes by {approval.decided_by_label or 'a person'}: {what})"
    if approval.policy_id is not None:
        return f" (approved by the merchant's {approval.decided_by_label})"
    return ""


# The two reads of ``effects_summary``, through statements built once
# (``deskhand.domain.desk.rows``), each pinned against its ORM form (tests/integrity/test_rows.py).


def run_ledger_entries(run_id: Any) -> list[LedgerEntry]:
    """``LedgerEntry.objects.filter(run_id=run_id).select_related("approval")
    .order_by("created_at", "id")``. (Who decided is on the approval's row; its policy is read
    only for a policy's decision.)

    What it buys, with ``run_approvals_not_performed``: the summary written at every run's end
    takes 0.5-1.1 ms of CPU through these and 2.5-4.7 ms through the ORM forms (``process_time``,
    best of 5 rounds of 200 calls, eight rounds alternating the two, 2026-12-07, 2 shared cores
    at load 6-10), so 0.2-0.3 ms of ``bench --loop``'s CPU a step (12 steps a run): the largest
    of the reads the 0.2.0 re-layout moved to the ORM (docs/benchmarks.md, "--loop")."""
    order = 't0."created_at", t0."id"'
    return rows_where(
        LedgerEntry, 't0."run_id" = %s', (run_id,), related=("approval",), order_by=order
    )


def run_approvals_not_performed(run_id: Any) -> list[Approval]:
    """The run's approvals but those approved and performed (a ledger entry names them):
    ``Approval.objects.filter(run_id=run_id).exclude(Q(status="approved") &
    Q(Exists(LedgerEntry.objects.filter(approval_id=OuterRef("id"))))).order_by("requested_at",
    "id")``. What it buys: ``run_ledger_entries``."""
    return rows_where(
        Approval,
        't0."run_id" = %s AND NOT (t0."status" = %s AND EXISTS'
        ' (SELECT 1 FROM agent_ledgerentry l WHERE l."approval_id" = t0."id"))',
        (run_id, ApprovalStatus.APPROVED),
        order_by='t0."requested_at", t0."id"',
    )


def effects_summary(run_id: str) -> str:
    """What this run actually did to the world, from the ledger and the approvals — never from the model.

    A fork first names what it inherited: the effects its lineage had made before it
    started, which it did not (and could not) repeat. Then what was new in this run.
    """
    lines: list[str] = []
    run = row_by_pk(Run, run_id)
    inherited = inherited_effects(run)
    entries = run_ledger_entries(run.pk)
    for entry in entries:
        if entry.ok:
            what = describe(entry.tool, entry.arguments, currency_of(entry))
            lines.append(what + _decided_how(entry.approval))
    if not lines and not any(e.is_pending for e in entries):
        lines.append("No money moved, no email was sent and no order was cancelled.")
    elif all(e.tool in CUSTOMER_MAIL for e in entries if e.ok or e.is_pending):
        # Only words to the customer: say so about the money too, as a run that did nothing would.
        lines.append("No money moved and no order was cancelled.")
    for entry in entries:
        approved = entry.approval.preview.splitlines()[0] if entry.approval else entry.tool
        what = approved.rstrip(".")
        if entry.is_pending:
            # Claimed (under the run lock, before any cancel) and sent to another system whose
            # answer is not recorded yet: it may have happened. Never reported as either.
            lines.append(
                f"In flight, not yet confirmed by {entry.adapter}: {what} (claimed under ledger "
                f"key {entry.key}; its outcome is recorded when {entry.adapter} answers or "
                "reconciliation finds it)."
            )
        elif not entry.ok and entry.adapter != "database":
            lines.append(f"Approved but not done: {what}. {_first(entry.result)}")
    # Every approval but those approved and performed (a ledger entry records them above).
    for a in run_approvals_not_performed(run.pk):
        verb = {
            # Approved, yet never performed: the run was cancelled (or stopped) before it acted.
            "approved": "Approved but not performed",
            "denied": "Declined by a person",
            "expired": "Expired without a decision",
            "withdrawn": "Withdrawn when the run was cancelled",
            "pending": "Never decided",
        }[a.status]
        what = a.preview.splitlines()[0].rstrip(".")
        lines.append(
            f"{verb}: {what}" + (f" (reason: {a.reason.rstrip('.')})" if a.reason else "") + "."
        )
    if inherited:
        head = [
            "Inherited from the lineage (already done, not repeated):",
            *(
                f"- {describe(e.tool, e.arguments, currency_of(e))} (run {e.run_id})"
                for e in inherited
            ),
            "New in this run:",
        ]
        lines = head + lines
    return "\n".join(lines)


def _first(text: str) -> str:
    return text.split(". The approval")[0].split("\n")[0][:300].rstrip(".") + "."


@dataclasses.dataclass(frozen=True)
class RefundFigures:
    """What a run's refunds did with money, in integer cents, three ways that never overlap.

    * ``moved`` — refunds made and confirmed: in this database at once, at a payment
      provider once it answered that it made them (``Refund`` ``succeeded``);
    * ``in_flight`` — claimed and sent to a payment provider whose answer is not recorded
      yet (``Refund`` ``pending``): it may have moved; reconciliation finds out;
    * ``not_moved`` — refunds a person (or a merchant's rule) approved that did not move: the
      provider declined or never made them, the refund was refused when claimed, or the run
      ended before it acted.
    """

    moved: int
    in_flight: int
    not_moved: int


def _amount(args: Any) -> int:
    value = args.get("amount_cents") if isinstance(args, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def run_refund_figures(run: Run) -> RefundFigures:
    """The run's refunds as money moved, in flight and not moved (``RefundFigures``)."""
    by_status = {
        row["status"]: int(row["t"] or 0)
        for row in run.refunds.order_by().values("status").annotate(t=Sum("amount_cents"))
    }
    not_moved = sum(
        _amount(args)
        for args in LedgerEntry.objects.filter(run_id=run.pk, tool="issue_refund", ok=False)
        .exclude(state=LedgerState.PENDING)
        .values_list("arguments", flat=True)
    )
    if not run.is_open:  # an open run may still make an approval it holds
        not_moved += sum(
            _amount(approved or proposed)
            for approved, proposed in Approval.objects.filter(
                run_id=run.pk,
                tool="issue_refund",
                status=ApprovalStatus.APPROVED,
                ledger_entries__isnull=True,
            ).values_list("approved_arguments", "arguments")
        )
    return RefundFigures(
        moved=by_status.get(RefundStatus.SUCCEEDED, 0),
        in_flight=by_status.get(RefundStatus.PENDING, 0),
        not_moved=not_moved,
    )


def run_outcome(run: Run) -> dict[str, Any]:
    """The outcome as the CLI prints it (``--json``) and the console shows it."""
    pending = run.approvals.filter(status=ApprovalStatus.PENDING).order_by("requested_at").first()
    withdrawn = run.approvals.filter(status=ApprovalStatus.WITHDRAWN).order_by("requested_at")
    money = run_refund_figures(run)
    return {
        "run_id": str(run.id),
        "ticket": run.ticket.reference,
        "status": run.status,
        "stop_reason": run.stop_reason or None,
        "stop_detail": run.stop_detail or None,
        # A model call waiting out a rate limit (429/529 retry-after), and why.
        "waiting_until": run.waiting_until.isoformat() if run.waiting_until else None,
        "wait_reason": run.wait_reason or None,
        "steps": run.steps,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "cache_read_tokens": run.cache_read_tokens,
        "cache_write_tokens": run.cache_write_tokens,
        "cache_hit_ratio": run.cache_hit_ratio,
        "cost_micros": run.cost_micros,
        # Money, three ways that never overlap (RefundFigures): moved and confirmed, in
        # flight at a provider, approved but not moved.
        "refunds_cents": money.moved,
        "refunds_in_flight_cents": money.in_flight,
        "refunds_not_moved_cents": money.not_moved,
        "pending_approval_id": str(pending.id) if pending else None,
        "pending_approval_preview": pending.preview if pending else None,
        "withdrawn_approval_ids": [str(a.pk) for a in withdrawn],
        "provider": run.provider,
        "model": run.model,
        "summary": run.summary,
    }


# --- what earlier runs did on a ticket (the console and run_ticket warn before a re-run) ---


@dataclasses.dataclass(frozen=True)
class DoneOnTicket:
    """One effect earlier runs made on a ticket: a refund or an email, with who made it."""

    what: str  # "refund" | "email"
    amount_cents: int | None
    currency: str
    detail: str
    run_id: uuid.UUID | None
    at: dt.datetime
    # A refund claimed at a payment provider that has not confirmed it yet: it may have moved.
    in_flight: bool = False


def ticket_done(*, ticket: Ticket, limit: int = 50) -> list[DoneOnTicket]:
    """What was already done on this ticket (refunds its runs made, emails sent on it), oldest first."""
    refunds = [
        DoneOnTicket(
            "refund",
            r.amount_cents,
            r.currency,
            r.order.reference,
            r.run_id,
            r.created_at,
            in_flight=r.status == RefundStatus.PENDING,
        )
        for r in Refund.objects.filter(merchant_id=ticket.merchant_id, run__ticket=ticket)
        .select_related("order")
        .order_by("created_at", "id")[:limit]
    ]
    # An email is told by its words, not its subject: every answer on a thread shares one
    # ("Re: …"), so two replies read as the same line twice (issue 40).
    emails = [
        DoneOnTicket("email", None, "", _gist(e.body), e.run_id, e.sent_at)
        for e in OutboundEmail.objects.filter(merchant_id=ticket.merchant_id, ticket=ticket)
        .only("body", "run_id", "sent_at")
        .order_by("sent_at", "id")[:limit]
    ]
    seen: set[tuple[str, str, object]] = set()
    done = []
    for d in sorted(refunds + emails, key=lambda d: d.at):
        if d.what == "email" and (d.what, d.detail, d.run_id) in seen:
            continue  # the same words from the same run (a copy re-sent after a crash)
        seen.add((d.what, d.detail, d.run_id))
        done.append(d)
    return done


GIST_CHARS = 90


def _gist(body: str) -> str:
    """An email's opening words after its greeting: "We have refunded $38.00 against…"."""
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].lower().startswith(("hello", "hi ", "dear")):
        lines = lines[1:]
    text = " ".join(lines)
    return text if len(text) <= GIST_CHARS else text[: GIST_CHARS - 1].rstrip() + "…"


def rerun_needs_confirming(*, ticket: Ticket, done: list[DoneOnTicket]) -> bool:
    """A resolved ticket, or one earlier runs already acted on, is re-run only on purpose."""
    return ticket.status == TicketStatus.RESOLVED or bool(done)
