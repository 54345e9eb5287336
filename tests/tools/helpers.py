"""Calling tools the way the runtime does, against real seeded rows.

A context is built from a real ``Run`` (the refund ceiling sums ``Refund.run_id``,
so a fake id would test nothing), and an irreversible call gets a real
``LedgerEntry`` to link its effect to, inside the same savepoint as the call.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agent.models import Run, RunStatus
from agent.models.ledger import LedgerEntry
from agent.tools import REGISTRY, Risk, args_hash
from agent.tools.registry import ToolContext, ToolOutcome
from deskhand.domain.desk.models import Ticket


def start_run(
    ticket_reference: str,
    *,
    max_refund_cents: int | None = None,
    status: str = RunStatus.RUNNING,
) -> Run:
    """A run over the seeded ticket ``ticket_reference``, bounded as settings say."""
    ticket = Ticket.objects.select_related("merchant").get(reference=ticket_reference)
    bounds = dict(settings.DESKHAND_BOUNDS)
    if max_refund_cents is not None:
        bounds["max_refund_cents"] = max_refund_cents
    return Run.objects.create(
        merchant=ticket.merchant,
        ticket=ticket,
        provider="scripted",
        model="test",
        prompt="x",
        status=status,
        deadline_at=timezone.now() + dt.timedelta(seconds=bounds["deadline_seconds"]),
        order_source=ticket.merchant.order_source,  # snapshotted as run_create does
        **bounds,
    )


def context(
    run: Run, *, call_id: str = "call-1", ledger_entry_id: int | None = None
) -> ToolContext:
    return ToolContext(
        merchant_id=run.merchant_id,
        ticket_id=run.ticket_id,
        customer_id=run.ticket.customer_id,
        run_id=str(run.id),
        root_run_id=str(run.root().id),
        tool_call_id=call_id,
        max_refund_cents=run.max_refund_cents,
        ledger_entry_id=ledger_entry_id,
        order_source=run.order_source,
    )


def call(run: Run, tool_name: str, args: dict[str, Any], *, call_id: str = "call-1") -> ToolOutcome:
    """Validate and run one tool call in a savepoint; a ToolError rolls back its writes."""
    tool = REGISTRY[tool_name]
    tool.validate(args)
    with transaction.atomic():
        entry_id = None
        if tool.risk is Risk.IRREVERSIBLE:
            root = run.root()
            entry_id = LedgerEntry.objects.create(
                key=f"{root.id}:{call_id}",
                merchant_id=run.merchant_id,
                root_run=root,
                run=run,
                tool=tool_name,
                tool_call_id=call_id,
                args_hash=args_hash(tool_name, args),
                arguments=args,
                result="",
            ).pk
        return tool.run(context(run, call_id=call_id, ledger_entry_id=entry_id), args)


def result(outcome: ToolOutcome) -> dict[str, Any]:
    """The tool result as the contract says: one JSON object with sorted keys."""
    data = json.loads(outcome.text)
    assert outcome.text == json.dumps(data, sort_keys=True)
    return data
