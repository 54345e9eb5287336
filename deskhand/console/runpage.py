"""What the run page shows, built once for the full page, the polling fallback and the SSE stream."""

from __future__ import annotations

import hashlib
from typing import Any

from django.db.models import Max
from django.urls import reverse
from django.utils import timezone

from agent.models import Run, Step
from approvals.selectors import run_audit
from deskhand.console import present, selectors
from deskhand.desk.models import Membership


def actions_signature(run: Run, pending_ids: list[str]) -> str:
    """Changes exactly when what a person can do on the page changes: a gate opens or closes, the run ends."""
    raw = f"{int(run.is_open)}|{','.join(sorted(pending_ids))}"
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


def panel_context(run: Run, membership: Membership) -> dict[str, Any]:
    """The facts and history (``panel``) and what a person can do (``actions``)."""
    approvals = selectors.run_approvals(run_id=run.pk)
    started = run.started_at or run.created_at
    end = run.finished_at or (timezone.now() if run.is_open else run.updated_at)
    now = timezone.now()
    pending = [
        (a, selectors.order_facts(merchant_id=run.merchant_id, arguments=a.arguments))
        for a in approvals
        if a.status == "pending"
    ]
    return {
        "run": run,
        "can_act": membership.can_act,
        "approvals": present.approval_views([(a, None) for a in approvals], now),
        "pending": present.approval_views(pending, now),
        "notes": selectors.run_notes(run_id=run.pk),
        "audit": run_audit(run_id=run.pk),
        "refunded": present.cents(selectors.run_refunded_cents(run_id=run.pk)),
        "tokens": run.total_tokens,
        "wall": present.duration((end - started).total_seconds()) if end else "—",
        "cost": present.dollars(run.cost_micros),
        "now": now,
        "actions_sig": actions_signature(run, [str(a.pk) for a, _ in pending]),
        "run_path": reverse("console:run", kwargs={"run_id": run.pk}),
    }


def step_peaks(run_id: Any) -> tuple[int, int]:
    peaks = Step.objects.filter(run_id=run_id).aggregate(
        ms=Max("latency_ms"), cost=Max("cost_micros")
    )
    return int(peaks["ms"] or 0), int(peaks["cost"] or 0)


def steps_context(run: Run, after: int = 0, *, can_act: bool = False) -> dict[str, Any]:
    steps = selectors.run_steps(run_id=run.pk, after=after)
    peak_ms, peak_cost = step_peaks(run.pk) if after else (None, None)
    return {
        "run": run,
        "items": present.timeline(run, steps, peak_ms=peak_ms, peak_cost=peak_cost),
        "last_seq": steps[-1].seq if steps else after,
        "spend": present.spend(run, steps) if not after else None,
        "can_act": can_act,
    }


def undoable_items(run: Run, *, up_to: int, can_act: bool) -> list[present.StepView]:
    """Steps already on the page that became undoable because the run just ended (re-sent out of band)."""
    if not can_act or run.is_open or up_to <= 0:
        return []
    steps = list(
        Step.objects.filter(
            run_id=run.pk,
            seq__lte=up_to,
            kind="tool",
            inverse__isnull=False,
            undone_by__isnull=True,
        ).order_by("seq")
    )
    if not steps:
        return []
    peak_ms, peak_cost = step_peaks(run.pk)
    return [
        v for v in present.timeline(run, steps, peak_ms=peak_ms, peak_cost=peak_cost) if v.undoable
    ]
