"""Rows as the API's schemas (``schemas.py``), validated on the way out so a body never
contradicts the OpenAPI document."""

from __future__ import annotations

from typing import Any

from agent.models import Run, Step
from approvals.models import Approval
from deskhand.domain.desk.models import Order, Ticket, TicketMessage
from deskhand.web.api import schemas
from deskhand.web.console import selectors


def dump(schema: type[schemas.Schema], data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = schema.model_validate(data).model_dump(mode="json")
    return out


def ticket(t: Ticket) -> dict[str, Any]:
    return {
        "reference": t.reference,
        "subject": t.subject,
        "status": t.status,
        "priority": t.priority,
        "tags": list(t.tags),
        "customer_name": t.customer.name,
        "customer_email": t.customer.email,
        "created_at": t.created_at,
        "updated_at": t.updated_at,
    }


def message(m: TicketMessage) -> dict[str, Any]:
    return {
        "id": m.pk,
        "kind": m.kind,
        "channel": m.channel,
        "direction": m.direction,
        "subject": m.subject,
        "body": m.body,
        "from_address": m.from_address,
        "created_at": m.created_at,
    }


def ticket_detail(t: Ticket) -> dict[str, Any]:
    messages = list(TicketMessage.objects.filter(ticket=t).order_by("created_at", "id")[:500])
    runs = selectors.ticket_runs(ticket=t)
    return dump(
        schemas.TicketDetail,
        {
            **ticket(t),
            "messages": [message(m) for m in messages],
            "runs": [
                {
                    "id": r.pk,
                    "status": r.status,
                    "stop_reason": r.stop_reason,
                    "created_at": r.created_at,
                }
                for r in runs
            ],
        },
    )


def order(o: Order | None) -> dict[str, Any] | None:
    if o is None:
        return None
    return {
        "reference": o.reference,
        "status": o.status,
        "total_cents": o.total_cents,
        "currency": o.currency,
        "refunded_cents": int(getattr(o, "refunded", 0) or 0),
        "in_flight_cents": int(getattr(o, "in_flight", 0) or 0),
        "placed_at": o.placed_at,
    }


def pushed_order(o: Order, outcome: str) -> dict[str, Any]:
    return {
        "reference": o.reference,
        "version": o.version,
        "outcome": outcome,
        "status": o.status,
        "currency": o.currency,
        "total_cents": o.total_cents,
        "refunded_cents": o.refunded_cents(),
        "customer_email": o.customer.email,
        "placed_at": o.placed_at,
        "delivered_at": o.delivered_at,
        "items": [
            {
                "sku": i.sku,
                "description": i.description,
                "quantity": i.quantity,
                "unit_price_cents": i.unit_price_cents,
            }
            for i in o.items.order_by("pk")
        ],
    }


def approval(a: Approval, o: Order | None) -> dict[str, Any]:
    return {
        "id": a.pk,
        "run_id": a.run_id,
        "ticket": a.run.ticket.reference,
        "tool": a.tool,
        "arguments": a.arguments,
        "args_hash": a.args_hash,
        "preview": a.preview,
        "status": a.status,
        "requested_at": a.requested_at,
        "expires_at": a.expires_at,
        "decided_by": a.decided_by_name,
        "decided_at": a.decided_at,
        "reason": a.reason,
        "approved_arguments": a.approved_arguments,
        "order": order(o),
        "asked_facts": a.facts or None,
    }


def approval_out(a: Approval) -> dict[str, Any]:
    facts = selectors.order_facts(merchant_id=a.merchant_id, arguments=a.arguments)
    return dump(schemas.ApprovalOut, approval(a, facts))


def run(r: Run) -> dict[str, Any]:
    return {
        "id": r.pk,
        "ticket": r.ticket.reference,
        "status": r.status,
        "stop_reason": r.stop_reason,
        "provider": r.provider,
        "model": r.model,
        "steps": r.steps,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "cost_micros": r.cost_micros,
        "created_at": r.created_at,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
    }


def step(s: Step) -> dict[str, Any]:
    return {
        "seq": s.seq,
        "kind": s.kind,
        "tool": s.tool,
        "arguments": s.arguments,
        "result": s.result,
        "ok": s.ok,
        "input_tokens": s.input_tokens,
        "output_tokens": s.output_tokens,
        "cost_micros": s.cost_micros,
        "latency_ms": s.latency_ms,
        "attempts": s.attempts,
        "replayed": s.replayed,
        "created_at": s.created_at,
    }


def run_detail(r: Run) -> dict[str, Any]:
    approvals = selectors.run_approvals(run_id=r.pk)
    return dump(
        schemas.RunDetail,
        {
            **run(r),
            "stop_detail": r.stop_detail,
            "summary": r.summary,
            "waiting_until": r.waiting_until,
            "wait_reason": r.wait_reason,
            "step_log": [step(s) for s in selectors.run_steps(run_id=r.pk)],
            "approvals": [
                approval(a, selectors.order_facts(merchant_id=r.merchant_id, arguments=a.arguments))
                for a in approvals
            ],
        },
    )
