"""Running a read or reversible tool call as one step: validation, the handler, the step row.

They run in one transaction with their step row, under the run's row lock. Irreversible
calls never come here: they pass the approval gate and run through the ledger
(``agent.ledger.effect``), which builds the same ``tool_context``.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any

from django.db import transaction

from agent.models import ACTIVE_STATUSES, Run, RunStatus
from agent.models.payloads import StepKind
from agent.record import faults
from agent.record.steplog import log_step
from agent.steps import Done, ToolPayload
from agent.tools import REGISTRY, Risk, ToolError, get_tool
from agent.tools.registry import ToolContext
from deskhand.domain.desk.rows import row_by_pk


def tool_context(
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
        order_source=run.order_source,
    )


def not_performed(status: str, name: str) -> Done:
    """What a tool step answers on a run that is no longer active: nothing was performed."""
    return Done(
        stop="cancelled" if status in (RunStatus.CANCELLING, RunStatus.CANCELLED) else "closed",
        status=status,
        detail=f"the run is {status}; {name} was not performed",
    )


def validate_call(name: str, args: Any) -> tuple[str | None, dict[str, Any] | None]:
    """(error, args): the error a model should see, or the validated arguments."""
    try:
        tool = get_tool(name)
        return None, tool.validate(args)
    except ToolError as exc:
        return str(exc), None


def execute_tool(run_id: str, seq: int, call: dict[str, Any]) -> Done:
    """Run a read or reversible call (or record why a call cannot run) as one step.

    On a run being cancelled (or already ended) nothing runs and nothing is
    written: it returns ``stop`` ``cancelled`` or ``closed`` (``not_performed``) and
    the loop ends quietly, so this step's row cannot take the cancel's number.
    """
    name, call_id, args = call["name"], call["id"], call.get("input")
    error, valid = validate_call(name, args)
    tool = REGISTRY.get(name)
    risk = tool.risk.value if tool else ""
    started = time.monotonic()
    if (
        error is None and tool is not None and tool.risk is Risk.IRREVERSIBLE
    ):  # pragma: no cover - loop routes these to the gate
        error = f"{name} is irreversible and must pass the approval gate"
    with transaction.atomic():
        # The run's row lock, as a cancel takes it, and the run read under it: once for the
        # handler's context and the step row (log_step is told, and does not lock again).
        run = row_by_pk(Run, run_id, related=("ticket",), lock=True)
        status = run.status
        if status not in ACTIVE_STATUSES:
            return not_performed(status, name)
        text, ok, inverse = error or "", error is None, None
        if error is None and tool is not None:
            # A savepoint, so a failed handler leaves nothing behind — for a handler that
            # writes. A read writes nothing to undo: two statements a read saved.
            undo = nullcontext() if tool.risk is Risk.READ else transaction.atomic()
            try:
                with undo:
                    faults.before_tool(name, run_id)
                    outcome = tool.run(tool_context(run, call_id), valid or {})
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
            result=ToolPayload(text=text),
            ok=ok,
            latency_ms=int((time.monotonic() - started) * 1000),
            inverse=inverse,
            locked_status=status,
        )
    return Done(text=text, ok=ok)
