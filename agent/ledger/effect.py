"""The ledger's claim, made in the effect's own transaction: an irreversible call, exactly once.

``execute_irreversible`` runs an approved call: one transaction locks the run's row (a
cancel takes the same lock), re-reads the approval, claims the ledger key, runs the
handler inside a savepoint, records the result and writes the step row. A step
re-executed after a crash between that commit and DBOS's checkpoint finds its claim and
returns the recorded result instead of acting again. That holds outright for an effect
that is a row in this database (the in-database adapter). An effect in another system (a
payment provider, a mail server: ``agent.effects``) is claimed ``pending`` under the same
lock and committed first, then made under the ledger key as its idempotency key, then
recorded (``agent.ledger.intents``). Whether the run's lineage already made the effect is
asked before a person is (``agent.ledger.lineage.performed``, in the gate's opening step).
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.db import transaction

from agent.ledger import intents, lineage
from agent.ledger.answers import log_effect_answer
from agent.models import Run
from agent.models.ledger import LedgerEntry, LedgerState
from agent.record import faults
from agent.record.execute import not_performed, tool_context
from agent.record.steplog import storable
from agent.steps import Done, ToolPayload
from agent.tools import ToolError, args_hash, get_tool
from agent.tools.narrowing import (
    NarrowingRefused,
    approved_call,
    changes_text,
    with_change_note,
)
from agent.tools.order_facts import RefundFacts, facts_moved, moved_note, refund_facts
from approvals.models import Approval, ApprovalStatus
from deskhand.domain.desk.models import TicketMessage
from deskhand.domain.desk.rows import row_by_pk
from deskhand.domain.desk.services import ticket_note_add
from deskhand.infra import events
from deskhand.infra.crashpoints import Point


def ledger_key(root: Run, call_id: str, digest: str) -> str:
    """Root run + the call's id + its arguments hash: a re-executed step finds its own claim.

    Unique per claim. Whether an effect was already made is not decided by this key
    (a real model mints a fresh call id every time) but by ``agent.ledger.lineage``: the same
    identity and content anywhere in the lineage, whatever the wording.
    """
    return f"{root.pk}:{call_id}:{digest[:16]}"


def _covered(
    run: Run, approval: Approval, call: dict[str, Any], digest: str
) -> dict[str, Any] | Done:
    """The call the approval on record lets this run perform (the proposal, or the narrower
    call a person approved), or why nothing is performed: the approval does not cover this
    exact call (on a run no longer active: ``not_performed``), or its narrowing is refused."""
    if (
        approval.status != ApprovalStatus.APPROVED
        or approval.run_id != run.pk
        or approval.tool_call_id != call["id"]
        or approval.args_hash != digest
    ):
        if not run.is_active:
            return not_performed(run.status, call["name"])
        return Done(
            stop="approval_mismatch", detail="the approval on record does not cover this exact call"
        )
    try:
        return approved_call(approval, call)
    except NarrowingRefused as exc:
        return Done(stop="approval_mismatch", detail=f"the approved call is refused: {exc}")


def _facts_moved(
    run: Run, approval: Approval, seq: int, call_id: str, name: str, args: dict[str, Any]
) -> Done | None:
    """The approval holds for the facts the person saw: re-read them, or refuse to pay.

    Read under the merchant's and the order's row locks, in the transaction that would
    claim the ledger key (``refund_facts(lock=True)``), so no refund lands between this
    read and the claim: a crash anywhere still pays at most once. An approval that recorded
    no facts (opened before approvals held them, or a call on no order's money) holds as
    it always did.
    """
    seen = RefundFacts.from_json(approval.facts)
    if seen is None:
        return None
    now = refund_facts(merchant_id=run.merchant_id, reference=seen.order_reference, lock=True)
    record = None if now is None else facts_moved(seen, now, args.get("amount_cents"))
    if record is None:
        return None
    note = moved_note(record)
    # The ticket says why in words, once (a step re-executed after a crash finds its note).
    if not TicketMessage.objects.filter(ticket_id=run.ticket_id, run=run, body=note).exists():
        ticket_note_add(ticket=run.ticket, body=note, run_id=run.pk)
    events.emit("run.facts_changed", run_id=run.pk, approval_id=approval.pk, seq=seq)
    return log_effect_answer(
        run_id=str(run.pk),
        seq=seq,
        tool=name,
        call_id=call_id,
        arguments=args,
        result=ToolPayload(text=json.dumps(record, sort_keys=True), approval_id=str(approval.pk)),
        ok=False,
    )


def execute_irreversible(run_id: str, seq: int, call: dict[str, Any], approval_id: str) -> Done:
    """Perform an approved irreversible call exactly once, through the ledger.

    Everything happens in one transaction: re-check the approval row (the
    decision, not any message, is the authority), claim the ledger key, run
    the handler, record the result, write the step row. Returns what the model reads, or
    ``stop`` with its ``detail`` (``agent.steps.Done``).

    What is performed is the *approved* call: the proposal, or the narrower call
    a person approved instead (``agent.tools.narrowing``; re-checked here against the
    registry and the recorded hash). The ledger key, the lineage's identity and
    every ceiling apply to it, and the model's result says a person changed it.

    It starts by locking the run's row (a cancel takes the same lock) and
    re-reading its status: on a run being cancelled (or already ended) nothing
    is performed and nothing is written — it returns ``stop`` ``cancelled`` or
    ``closed`` with the run's ``status``, which the loop turns into a quiet end —
    unless the ledger already holds this exact call's claim, which is replayed
    as usual (nothing new happens; the record is reported).
    """
    name, call_id, args = call["name"], call["id"], call["input"]
    tool = get_tool(name)
    digest = args_hash(name, args)
    started = time.monotonic()
    with transaction.atomic():
        # The run's row lock first: a cancel takes the same lock, so an effect and a
        # cancel are serialised. Whichever commits first, the other sees it.
        run = row_by_pk(Run, run_id, related=("ticket", "merchant"), lock=True)
        root = run.root()  # walks the fork chain: once per call, not once per use
        if root.pk != run.pk:
            # The lineage's lock: two runs of one lineage never decide "already made?" at once.
            list(Run.objects.select_for_update().filter(pk=root.pk).values_list("pk", flat=True))
        approval = row_by_pk(Approval, approval_id, lock=True)
        performed = _covered(run, approval, call, digest)
        if isinstance(performed, Done):
            return performed
        done_args = performed["input"]
        done_digest = args_hash(name, done_args)
        changed = (
            changes_text(name, args, done_args, approval.currency) if done_digest != digest else ""
        )
        key = ledger_key(root, call_id, done_digest)
        # This call's own claim (a re-execution after a crash between commit and checkpoint),
        # else the same effect made anywhere in the lineage since the lookup.
        own_claim = LedgerEntry.objects.select_for_update(of=("self",)).filter(key=key).first()
        entry = own_claim or lineage.lookup(run, performed, root)
        if not run.is_active and entry is None:
            # Nothing new happens on a run being cancelled or ended. A claim already made
            # is still answered from the ledger below: it performs nothing, it reports what was done.
            return not_performed(run.status, name)
        own = entry is not None and entry.run_id == run.pk and entry.tool_call_id == call_id
        pending: tuple[int, bool] | None = None
        if entry is not None and own and entry.is_pending:
            # This call's own claim on another system, not yet recorded: settle it under the
            # same key (or only look it up, on a run that may no longer act).
            pending = (entry.pk, run.is_active)
        elif entry is not None:
            text = entry.result if own else lineage.answer_text(entry)
            text = with_change_note(text, changed, approval)
            return log_effect_answer(
                run_id=run_id,
                seq=seq,
                tool=name,
                call_id=call_id,
                arguments=done_args,
                result=ToolPayload(text=text, ledger_key=entry.key),
                ok=entry.ok,
                replayed=True,
            )
        elif (moved := _facts_moved(run, approval, seq, call_id, name, done_args)) is not None:
            # The order's money moved since the person was shown it: nothing is claimed or paid.
            return moved
        else:
            adapter = intents.adapter_name(
                run.merchant, tool, run.ticket_id, order_source=run.order_source
            )
            external = adapter != intents.DATABASE
            entry = LedgerEntry.objects.create(
                key=key,
                merchant_id=run.merchant_id,
                root_run=root,
                run=run,
                tool=name,
                tool_call_id=call_id,
                args_hash=done_digest,
                identity=lineage.call_identity(name, done_args),
                arguments=done_args,
                approval=approval,
                ok=not external,
                result="",
                state=LedgerState.PENDING if external else LedgerState.DONE,
                adapter=adapter,
            )
            context = tool_context(run, call_id, root, ledger_entry_id=entry.pk)
            if external:
                refused = intents.claim(entry, tool, context, done_args)
                if refused is None:
                    pending = (entry.pk, True)
            else:
                try:
                    with transaction.atomic():
                        faults.before_tool(name, run_id)
                        outcome = tool.run(context, done_args)
                    entry.result, entry.ok = faults.after_tool(name, run_id, outcome.text), True
                except ToolError as exc:
                    entry.result, entry.ok = str(exc), False
                entry.result = storable(entry.result)
                entry.save(update_fields=["result", "ok"])
                faults.at(Point.AFTER_EFFECT, name)
            text = with_change_note(entry.result, changed, approval)
            if pending is None:
                log_effect_answer(
                    run_id=run_id,
                    seq=seq,
                    tool=name,
                    call_id=call_id,
                    arguments=done_args,
                    result=ToolPayload(text=text, ledger_key=key, approval_id=approval_id),
                    ok=entry.ok,
                    latency_ms=int((time.monotonic() - started) * 1000),
                )
                events.emit(
                    "run.effect",
                    run_id=run_id,
                    tool=name,
                    approval_id=approval_id,
                    ok=entry.ok,
                    seq=seq,
                    adapter=entry.adapter,
                )
    if pending is not None:
        faults.at(Point.AFTER_CLAIM, name)  # committed; the other system is not yet called
        return intents.settle(
            pending[0],
            run_id=run_id,
            seq=seq,
            call=performed,
            approval_id=approval_id,
            may_send=pending[1],
            note=lambda result: with_change_note(result, changed, approval),
        )
    faults.at(Point.AFTER_COMMIT, name)
    return Done(text=text, ok=entry.ok)
