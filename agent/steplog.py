"""Writing the step log: the audit trail and the live feed are the same rows.

Rows are upserted on (run, seq): ``seq`` comes from the loop's deterministic
count, so a step that re-executes after a crash lands on the row it wrote
before. Accounting columns are *added* (a retried model call was paid for
twice, and the log must say so); everything else is overwritten.
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.db.models import F

from agent.models import Run, Step
from agent.runtime import current_step_id


def without_nul(value: Any) -> Any:
    """Postgres text and jsonb refuse NUL; outside text may carry it. Replace, never drop."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {without_nul(k): without_nul(v) for k, v in value.items()}
    if isinstance(value, list):
        return [without_nul(v) for v in value]
    return value


def log_step(
    *,
    run_id: str,
    seq: int,
    kind: str,
    tool: str = "",
    tool_call_id: str = "",
    risk: str = "",
    arguments: dict[str, Any] | None = None,
    result: dict[str, Any] | None = None,
    ok: bool = True,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cost_micros: int = 0,
    latency_ms: int = 0,
    replayed: bool = False,
    inverse: dict[str, Any] | None = None,
) -> Step:
    """Record one step and fold its accounting into the run's totals, atomically."""
    arguments, result = without_nul(arguments), without_nul(result)
    with transaction.atomic():
        step, created = Step.objects.select_for_update().get_or_create(
            run_id=run_id,
            seq=seq,
            defaults={
                "function_id": current_step_id.get(),
                "kind": kind,
                "tool": tool,
                "tool_call_id": tool_call_id,
                "risk": risk,
                "arguments": arguments or {},
                "result": result or {},
                "ok": ok,
                "input_tokens": input_tokens,
                "output_tokens": output_tokens,
                "cost_micros": cost_micros,
                "latency_ms": latency_ms,
                "replayed": replayed,
                "inverse": inverse,
            },
        )
        if not created:
            step.function_id = current_step_id.get()
            step.kind, step.tool, step.tool_call_id, step.risk = kind, tool, tool_call_id, risk
            step.arguments, step.result, step.ok = arguments or {}, result or {}, ok
            step.input_tokens += input_tokens
            step.output_tokens += output_tokens
            step.cost_micros += cost_micros
            step.latency_ms = latency_ms
            step.replayed = step.replayed or replayed
            step.inverse = inverse
            step.attempts += 1
            step.save()
        Run.objects.filter(pk=run_id).update(
            steps=F("steps") + (1 if created else 0),
            input_tokens=F("input_tokens") + input_tokens,
            output_tokens=F("output_tokens") + output_tokens,
            cost_micros=F("cost_micros") + cost_micros,
        )
        notify_step(run_id, seq)
    return step


def notify_step(run_id: str, seq: int) -> None:
    """Tell live pages a step committed (Postgres NOTIFY is delivered on commit)."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_notify('deskhand_steps', %s)", [f"{run_id}:{seq}"])
