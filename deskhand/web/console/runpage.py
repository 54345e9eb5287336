"""What the run page shows, built once for the full page, the polling fallback and the SSE stream."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from django.db import transaction
from django.db.models import Max
from django.urls import reverse
from django.utils import timezone

from agent.models import Run, Step
from agent.privacy.redaction import replay_refusal
from agent.replay import rebuild, timeline
from agent.replay.knowledge import run_knowledge
from agent.run.selectors import run_refund_figures
from approvals.selectors import run_audit
from deskhand.domain.desk.models import Membership
from deskhand.web.console import forks, present, selectors, story
from deskhand.web.console.forms import NOTE_MAX


def actions_signature(run: Run, pending_ids: list[str]) -> str:
    """Changes exactly when what a person can do on the page changes: a gate opens or closes, the run ends."""
    raw = f"{int(run.is_active)}{int(run.status == 'cancelling')}|{','.join(sorted(pending_ids))}"
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


def panel_context(run: Run, membership: Membership) -> dict[str, Any]:
    """The facts and history (``panel``) and what a person can do (``actions``)."""
    approvals = selectors.run_approvals(run_id=run.pk)
    outside = selectors.run_workflow_findings(run=run)
    money = run_refund_figures(run)
    currency = selectors.run_currency(run=run) if any(dataclasses.astuple(money)) else "USD"
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
        # Times on the page are the merchant's, labelled (``words.moment``).
        "zone": membership.merchant.timezone,
        # Decided approvals keep their card, order facts included: the page says what was weighed.
        "approvals": present.approval_views(
            [
                (a, selectors.order_facts(merchant_id=run.merchant_id, arguments=a.arguments))
                for a in approvals
                if a.status != "pending"
            ],
            now,
        ),
        "pending": present.approval_views(pending, now),
        "notes": selectors.run_notes(run_id=run.pk),
        # The article versions its searches returned, as recorded: what it read, not what is now.
        "knowledge_read": run_knowledge(run),
        "audit": run_audit(run_id=run.pk),
        # Money three ways (agent.run.selectors.RefundFigures): moved and confirmed, in flight
        # at a payment provider, approved and not moved.
        "refunded": present.cents(money.moved, currency),
        "in_flight": present.cents(money.in_flight, currency) if money.in_flight else "",
        "not_moved": present.cents(money.not_moved, currency) if money.not_moved else "",
        "tokens": run.total_tokens,
        "cache_hit": "—" if run.cache_hit_ratio is None else f"{run.cache_hit_ratio:.0%}",
        "wall": present.duration((end - started).total_seconds()) if end else "—",
        "waited": present.duration(run.waited_seconds),  # in the wall time's own units
        "cost": present.dollars(run.cost_micros),
        "now": now,
        "started_ago": story.ago(run.created_at, now),
        "started_exact": story.exact(run.created_at),
        "actions_sig": actions_signature(run, [str(a.pk) for a, _ in pending]),
        "run_path": reverse("console:run", kwargs={"run_id": run.pk}),
        "note_max": NOTE_MAX,
        "redactions": present.redaction_views(run),
        "workflow_findings": outside,
        "started_outside": selectors.started_outside(outside, run),
        **forks.fork_links(run, membership),  # the lineage's links; replay is for owners
    }


def step_peaks(run_id: Any) -> tuple[int, int]:
    peaks = Step.objects.filter(run_id=run_id).aggregate(
        ms=Max("latency_ms"), cost=Max("cost_micros")
    )
    return int(peaks["ms"] or 0), int(peaks["cost"] or 0)


def steps_context(run: Run, after: int = 0, *, can_act: bool = False) -> dict[str, Any]:
    steps = selectors.run_steps(run_id=run.pk, after=after)
    peak_ms, peak_cost = step_peaks(run.pk) if after else (None, None)
    currency = selectors.run_currency(run=run) if steps else "USD"
    return {
        "run": run,
        "items": present.timeline(
            run, steps, peak_ms=peak_ms, peak_cost=peak_cost, currency=currency
        ),
        "last_seq": steps[-1].seq if steps else after,
        "spend": present.spend(run, steps) if not after else None,
        "can_act": can_act,
        # What the model was sent is rebuilt from the step log: gone once its words are.
        "transcript_kept": replay_refusal(run) is None,
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
    currency = selectors.run_currency(run=run)
    views = present.timeline(run, steps, peak_ms=peak_ms, peak_cost=peak_cost, currency=currency)
    return [v for v in views if v.undoable]


@dataclasses.dataclass
class SentBlock:
    """One content block exactly as the model was sent it (outside text keeps its fence)."""

    kind: str  # text | tool_use | tool_result | anything else a provider returned
    label: str  # the tool a call asks for, or the call a result answers
    text: str
    error: bool = False


def model_view(run: Run, seq: int) -> tuple[rebuild.View, list[tuple[str, list[SentBlock]]]]:
    """What the model saw before step ``seq``, rebuilt by ``agent.conversation`` (as replay is)."""
    with transaction.atomic():
        view = rebuild.at(timeline.load(run), seq)
    turns = []
    for message in view.messages:
        blocks = []
        for b in message["content"]:
            kind = str(b.get("type"))
            if kind == "text":
                blocks.append(SentBlock(kind, "", str(b.get("text", ""))))
            elif kind == "tool_use":
                blocks.append(SentBlock(kind, str(b.get("name")), present.pretty(b.get("input"))))
            elif kind == "tool_result":
                label, error = str(b.get("tool_use_id")), bool(b.get("is_error"))
                blocks.append(SentBlock(kind, label, str(b.get("content", "")), error))
            else:
                blocks.append(SentBlock(kind, "", present.pretty(b)))
        turns.append((str(message["role"]), blocks))
    return view, turns
