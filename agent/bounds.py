"""Bounds: every run terminates, and no cap is exceeded even across a crash.

``bounds_check`` runs as a step before every model call, so every value it
reads (totals, clock, daily spend, the step log) is checkpointed and replay
agrees with the original execution.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from typing import Any

from django.conf import settings
from django.db.models import Count, Sum
from django.utils import timezone

from agent.models import Run, Step, StepKind
from deskhand.desk.money import format_micros


def _day_start(now: dt.datetime, tz_name: str) -> dt.datetime:
    tz = zoneinfo.ZoneInfo(tz_name)
    local = now.astimezone(tz)
    return local.replace(hour=0, minute=0, second=0, microsecond=0)


def bounds_check(run_id: str, now_iso: str | None = None) -> dict[str, Any] | None:
    """The first bound this run has hit, as ``{"reason", "detail"}``; ``None`` if none."""
    run = Run.objects.select_related("merchant").get(pk=run_id)
    now = dt.datetime.fromisoformat(now_iso) if now_iso else timezone.now()
    if run.steps >= run.max_steps:
        return {"reason": "step_cap", "detail": f"reached the {run.max_steps}-step ceiling"}
    if run.total_tokens >= run.max_tokens:
        return {"reason": "token_cap", "detail": f"used {run.total_tokens} tokens of {run.max_tokens}"}
    if run.cost_micros >= run.max_spend_micros:
        return {"reason": "spend_cap", "detail": f"spent {format_micros(run.cost_micros)} of {format_micros(run.max_spend_micros)}"}
    deadline = run.deadline_at + dt.timedelta(seconds=run.waited_seconds)
    if now > deadline:
        return {"reason": "deadline", "detail": f"ran past its {run.deadline_seconds}s working deadline"}
    merchant_spend = (
        Run.objects.filter(merchant_id=run.merchant_id, created_at__gte=_day_start(now, run.merchant.timezone))
        .aggregate(t=Sum("cost_micros"))["t"] or 0
    )
    if merchant_spend >= run.merchant.daily_spend_cap_micros:
        return {"reason": "merchant_daily_spend", "detail": f"{run.merchant.name} spent {format_micros(merchant_spend)} today, its cap is {format_micros(run.merchant.daily_spend_cap_micros)}"}
    platform_spend = Run.objects.filter(created_at__gte=_day_start(now, "UTC")).aggregate(t=Sum("cost_micros"))["t"] or 0
    if platform_spend >= settings.DESKHAND_PLATFORM_DAILY_SPEND_MICROS:
        return {"reason": "platform_daily_spend", "detail": f"the platform spent {format_micros(platform_spend)} today"}
    repeated = (
        Step.objects.filter(run_id=run_id, kind=StepKind.TOOL)
        .order_by()
        .values("tool", "arguments")
        .annotate(n=Count("id"))
        .filter(n__gte=run.loop_threshold)
        .order_by("-n", "tool")
        .first()
    )
    if repeated:
        return {"reason": "loop_detected", "detail": f"called {repeated['tool']} with identical arguments {repeated['n']} times"}
    return None
