"""Running a tool call as one step: validation, the handler, the step row, the ledger.

Reads and reversible tools run in a transaction with their step row.
Irreversible tools run only through ``execute_irreversible``, which claims the
ledger key in the same transaction as the effect: a step re-executed after a
crash between the commit and the DBOS checkpoint finds its claim and returns
the recorded result instead of acting again. Exactly-once holds because the
effect is a row in this same database; an external payment API would need the
ledger key passed on as its idempotency key too.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction

from agent import faults
from agent.models import LedgerEntry, Run, StepKind
from agent.steplog import log_step, without_nul
from agent.tools import REGISTRY, Risk, ToolError, args_hash, get_tool
from agent.tools.registry import ToolContext
from approvals.models import Approval, ApprovalStatus


def _context(
    run: Run, call_id: str, root: Run | None = None, ledger_entry_id: int | None = None
) -> ToolContext:
    return ToolContext(
        merchant_id=run.merchant_id,
        ticket_id=run.ticket_id,
        customer_id=run.ticket.customer_id,
        run_id=str(run.pk),
        root_run_id=str((root or run.root()).pk),
        tool_call_id=call_id,
        max_refund_cents=run.max_refund_cents,
        ledger_entry_id=ledger_entry_id,
    )


def ledger_key(root: Run, call_id: str) -> str:
    """Root run + the tool call's stable id: a fork that replays a call finds the original's claim."""
    return f"{root.pk}:{call_id}"


def validate_call(name: str, args: Any) -> tuple[str | None, dict[str, Any] | None]:
    """(error, args): the error a model should see, or the validated arguments."""
    try:
        tool = get_tool(name)
        return None, tool.validate(args)
    except ToolError as exc:
        return str(exc), None


def execute_tool(run_id: str, seq: int, call: dict[str, Any]) -> dict[str, Any]:
    """Run a read or reversible call (or record why a call cannot run) as one step."""
    name, call_id, args = call["name"], call["id"], call.get("input")
    run = Run.objects.select_related("ticket").get(pk=run_id)
    error, valid = validate_call(name, args)
    tool = REGISTRY.get(name)
    risk = tool.risk.value if tool else ""
    started = time.monotonic()
    if (
        error is None and tool is not None and tool.risk is Risk.IRREVERSIBLE
    ):  # pragma: no cover - loop routes these to the gate
        error = f"{name} is irreversible and must pass the approval gate"
    with transaction.atomic():
        text, ok, inverse = error or "", error is None, None
        if error is None and tool is not None:
            try:
                with transaction.atomic():  # a savepoint: a failed handler leaves nothing behind
                    faults.before_tool(name, run_id)
                    outcome = tool.handler(_context(run, call_id), valid or {})
                text, inverse = faults.after_tool(name, run_id, outcome.text), outcome.inverse
            except ToolError as exc:
                text, ok = str(exc), False
        log_step(
            run_id=run_id,
            seq=seq,
            kind=StepKind.TOOL,
            tool=name,
            tool_call_id=call_id,
            risk=risk,
            arguments=args if isinstance(args, dict) else {"_raw": args},
            result={"text": text},
            ok=ok,
            latency_ms=int((time.monotonic() - started) * 1000),
            inverse=inverse,
        )
    return {"text": text, "ok": ok}


def execute_irreversible(
    run_id: str, seq: int, call: dict[str, Any], approval_id: str
) -> dict[str, Any]:
    """Perform an approved irreversible call exactly once, through the ledger.

    Everything happens in one transaction: re-check the approval row (the
    decision, not any message, is the authority), claim the ledger key, run
    the handler, record the result, write the step row. Returns
    ``{"text", "ok", "replayed"}`` or ``{"stop": reason, "detail"}``.
    """
    name, call_id, args = call["name"], call["id"], call["input"]
    tool = get_tool(name)
    run = Run.objects.select_related("ticket").get(pk=run_id)
    digest = args_hash(name, args)
    root = run.root()  # walks the fork chain: once per call, not once per use
    key = ledger_key(root, call_id)
    started = time.monotonic()
    with transaction.atomic():
        approval = Approval.objects.select_for_update().get(pk=approval_id)
        if (
            approval.status != ApprovalStatus.APPROVED
            or str(approval.run_id) != run_id
            or approval.tool_call_id != call_id
            or approval.args_hash != digest
        ):
            return {
                "stop": "approval_mismatch",
                "detail": "the approval on record does not cover this exact call",
            }
        entry = LedgerEntry.objects.select_for_update().filter(key=key).first()
        if entry is not None:
            if entry.args_hash != digest:
                return {
                    "stop": "ledger_mismatch",
                    "detail": f"ledger key {key} was claimed for different arguments",
                }
            log_step(
                run_id=run_id,
                seq=seq,
                kind=StepKind.TOOL,
                tool=name,
                tool_call_id=call_id,
                risk=tool.risk.value,
                arguments=args,
                result={"text": entry.result, "ledger_key": key},
                ok=entry.ok,
                replayed=True,
            )
            return {"text": entry.result, "ok": entry.ok, "replayed": True}
        entry = LedgerEntry.objects.create(
            key=key,
            merchant_id=run.merchant_id,
            root_run=root,
            run=run,
            tool=name,
            tool_call_id=call_id,
            args_hash=digest,
            arguments=args,
            approval=approval,
            ok=True,
            result="",
        )
        try:
            with transaction.atomic():
                faults.before_tool(name, run_id)
                outcome = tool.handler(_context(run, call_id, root, ledger_entry_id=entry.pk), args)
            entry.result, entry.ok = faults.after_tool(name, run_id, outcome.text), True
        except ToolError as exc:
            entry.result, entry.ok = str(exc), False
        entry.result = without_nul(entry.result)
        entry.save(update_fields=["result", "ok"])
        faults.at("after_effect", name)
        log_step(
            run_id=run_id,
            seq=seq,
            kind=StepKind.TOOL,
            tool=name,
            tool_call_id=call_id,
            risk=tool.risk.value,
            arguments=args,
            result={"text": entry.result, "ledger_key": key, "approval_id": approval_id},
            ok=entry.ok,
            latency_ms=int((time.monotonic() - started) * 1000),
        )
    faults.at("after_commit", name)
    return {"text": entry.result, "ok": entry.ok, "replayed": False}


def ledger_lookup(run_id: str, call: dict[str, Any]) -> dict[str, Any] | None:
    """Before asking a person: has this call (by root run + call id) already been performed?"""
    run = Run.objects.get(pk=run_id)
    entry = LedgerEntry.objects.filter(key=ledger_key(run.root(), call["id"])).first()
    if entry is None:
        return None
    return {
        "ok": entry.ok,
        "text": entry.result,
        "same_args": entry.args_hash == args_hash(call["name"], call["input"]),
        "key": entry.key,
    }
