"""How a step reads on the run page: labels, what came from outside, where time and money went.

Everything a tool returned, and everything a customer or staff member wrote,
reached the model inside a fence (agent/fence.py). The console shows that
text with the fence markers removed and a visible "untrusted" label: the
reader should know which words were the agent's and which it was handed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

from agent import fence
from agent.models import Run, Step, StepKind
from approvals.models import Approval
from deskhand.desk.models import Order

BAR_STEPS = 100  # static/console.css has a .w0 … .w100 class per percent (CSP forbids style="")


def dollars(micros: int) -> str:
    """Micro-dollars as dollars: four places below a cent, where model calls live."""
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(int(micros)), 1_000_000)
    cents4 = frac // 100
    return f"{sign}${whole}.{cents4:04d}"


def cents(amount: int | None, currency: str = "USD") -> str:
    if amount is None:
        return "—"
    sign = "-" if amount < 0 else ""
    whole, frac = divmod(abs(int(amount)), 100)
    symbol = "$" if currency == "USD" else ""
    suffix = "" if symbol else f" {currency}"
    return f"{sign}{symbol}{whole:,}.{frac:02d}{suffix}"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = max(0.0, float(seconds))
    if seconds < 1:
        return f"{int(seconds * 1000)} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h {minutes:02d}m"
    return f"{hours // 24}d {hours % 24}h"


def untrusted(text: Any) -> str:
    """Outside text for display: the fence stripped (the template marks it untrusted)."""
    return fence.unwrap(str(text)) if text is not None else ""


def pretty(value: Any) -> str:
    """JSON for people: indented, keys in order, non-ASCII kept."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def _bar(value: int, peak: int) -> int:
    if peak <= 0 or value <= 0:
        return 0
    return max(1, min(BAR_STEPS, round(value * BAR_STEPS / peak)))


@dataclasses.dataclass
class StepView:
    step: Step
    title: str
    time_bar: int
    cost_bar: int
    texts: list[str]  # the agent's own words (model output)
    calls: list[dict[str, Any]]  # tool calls a model turn asked for
    outside: str  # untrusted text (tool results, notes), fence stripped
    details: dict[str, Any]  # anything else worth showing, as key → value
    undoable: bool

    @property
    def cost(self) -> str:
        return dollars(self.step.cost_micros)

    @property
    def tokens(self) -> int:
        return self.step.input_tokens + self.step.output_tokens

    @property
    def dom_id(self) -> str:
        return f"step-{self.step.seq}"


def _title(step: Step) -> str:
    r = step.result if isinstance(step.result, dict) else {}
    if step.kind == StepKind.MODEL:
        return "Model turn"
    if step.kind == StepKind.TOOL:
        return f"Tool call: {step.tool}"
    if step.kind == StepKind.APPROVAL:
        event = r.get("event", "")
        return {
            "requested": f"Approval requested: {step.tool}",
            "approved": f"Approved: {step.tool}",
            "denied": f"Denied: {step.tool}",
            "expired": f"Approval expired: {step.tool}",
            "mismatch": f"Approval refused (arguments changed): {step.tool}",
        }.get(event, f"Approval: {step.tool}")
    if step.kind == StepKind.NOTE:
        return "Staff guidance reached the agent"
    if step.kind == StepKind.FINAL:
        return "Finished"
    if step.kind == StepKind.BOUND:
        return f"Stopped: {r.get('stop_reason') or r.get('status') or 'bound'}"
    if step.kind == StepKind.ERROR:
        return f"Failed: {r.get('stop_reason', 'error')}"
    if step.kind == StepKind.UNDO:
        return f"Undo of step {r.get('undid_seq', '?')}"
    return step.kind


def step_view(step: Step, *, peak_ms: int, peak_cost: int, run_open: bool) -> StepView:
    r = step.result if isinstance(step.result, dict) else {}
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    outside = ""
    details: dict[str, Any] = {}
    if step.kind == StepKind.MODEL:
        for block in r.get("content") or []:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text" and block.get("text"):
                texts.append(untrusted(block["text"]))
            elif block.get("type") == "tool_use":
                calls.append(
                    {
                        "name": block.get("name", "?"),
                        "id": block.get("id", ""),
                        "input": pretty(block.get("input")),
                    }
                )
        if r.get("stop_reason"):
            details["stop reason"] = r["stop_reason"]
    elif step.kind == StepKind.TOOL:
        outside = untrusted(pretty(r.get("text", "")) if r.get("text") else "")
        if r.get("ledger_key"):
            details["ledger key"] = r["ledger_key"]
    elif step.kind == StepKind.APPROVAL:
        for key in (
            "preview",
            "args_hash",
            "expires_at",
            "decided_by",
            "reason",
            "waited_seconds",
            "detail",
        ):
            if r.get(key) not in (None, ""):
                details[key.replace("_", " ")] = r[key]
    elif step.kind == StepKind.NOTE:
        outside = "\n\n".join(
            f"{n.get('author', '?')}: {untrusted(n.get('body', ''))}"
            for n in r.get("notes") or []
            if isinstance(n, dict)
        )
    elif step.kind in (StepKind.FINAL, StepKind.BOUND, StepKind.ERROR):
        for key in ("status", "stop_reason", "detail", "by"):
            if r.get(key):
                details[key.replace("_", " ")] = r[key]
        if r.get("summary"):
            texts.append(str(r["summary"]))
    elif step.kind == StepKind.UNDO:
        for key in ("text", "by"):
            if r.get(key):
                details[key] = r[key]
    return StepView(
        step=step,
        title=_title(step),
        time_bar=_bar(step.latency_ms, peak_ms),
        cost_bar=_bar(step.cost_micros, peak_cost),
        texts=texts,
        calls=calls,
        outside=outside,
        details=details,
        undoable=bool(step.inverse)
        and step.undone_by_id is None
        and step.kind == StepKind.TOOL
        and not run_open,
    )


def timeline(
    run: Run, steps: list[Step], *, peak_ms: int | None = None, peak_cost: int | None = None
) -> list[StepView]:
    """The steps as the page shows them. Peaks are the run's, so bars compare across the run."""
    peak_ms = peak_ms if peak_ms is not None else max((s.latency_ms for s in steps), default=0)
    peak_cost = (
        peak_cost if peak_cost is not None else max((s.cost_micros for s in steps), default=0)
    )
    return [step_view(s, peak_ms=peak_ms, peak_cost=peak_cost, run_open=run.is_open) for s in steps]


@dataclasses.dataclass(frozen=True)
class Spend:
    """Where the run's time and money went, by kind of step."""

    model_ms: int
    tool_ms: int
    waited_s: float
    model_cost: int
    model_bar: int
    tool_bar: int


def spend(run: Run, steps: list[Step]) -> Spend:
    model_ms = sum(s.latency_ms for s in steps if s.kind == StepKind.MODEL)
    tool_ms = sum(s.latency_ms for s in steps if s.kind == StepKind.TOOL)
    total = model_ms + tool_ms
    return Spend(
        model_ms=model_ms,
        tool_ms=tool_ms,
        waited_s=run.waited_seconds,
        model_cost=sum(s.cost_micros for s in steps),
        model_bar=_bar(model_ms, total),
        tool_bar=_bar(tool_ms, total),
    )


@dataclasses.dataclass(frozen=True)
class RunRow:
    """A run as one line of a list."""

    run: Run

    @property
    def cost(self) -> str:
        return dollars(self.run.cost_micros)

    @property
    def tokens(self) -> int:
        return self.run.input_tokens + self.run.output_tokens

    @property
    def wall(self) -> str:
        start = self.run.started_at or self.run.created_at
        return (
            duration((self.run.finished_at - start).total_seconds())
            if self.run.finished_at
            else "—"
        )


def run_rows(runs: list[Run]) -> list[RunRow]:
    return [RunRow(r) for r in runs]


@dataclasses.dataclass(frozen=True)
class OrderFacts:
    """An order as an approver weighs it: what it cost, what has gone back, when it arrived."""

    order: Order

    @property
    def total(self) -> str:
        return cents(self.order.total_cents, self.order.currency)

    @property
    def refunded_cents(self) -> int:
        return int(getattr(self.order, "refunded", 0) or 0)

    @property
    def refunded(self) -> str:
        return cents(self.refunded_cents, self.order.currency)

    @property
    def remaining(self) -> str:
        return cents(self.order.total_cents - self.refunded_cents, self.order.currency)


@dataclasses.dataclass(frozen=True)
class ApprovalView:
    """A pending (or decided) approval with its arguments laid beside the order's facts."""

    approval: Approval
    order: OrderFacts | None
    now: dt.datetime

    @property
    def headline(self) -> str:
        return (
            self.approval.preview.splitlines()[0] if self.approval.preview else self.approval.tool
        )

    @property
    def has_more(self) -> bool:
        return "\n" in self.approval.preview.strip()

    @property
    def arguments(self) -> list[tuple[str, str]]:
        args = self.approval.arguments if isinstance(self.approval.arguments, dict) else {}
        out = []
        for key in sorted(args):
            value = args[key]
            if key.endswith("_cents") and isinstance(value, int) and not isinstance(value, bool):
                shown = f"{cents(value)} ({value} cents)"
            else:
                shown = value if isinstance(value, str) else pretty(value)
            out.append((key, str(shown)))
        return out

    @property
    def amount_cents(self) -> int | None:
        value = (
            self.approval.arguments.get("amount_cents")
            if isinstance(self.approval.arguments, dict)
            else None
        )
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def exceeds_remaining(self) -> bool:
        if self.order is None or self.amount_cents is None:
            return False
        return self.amount_cents > self.order.order.total_cents - self.order.refunded_cents

    @property
    def age(self) -> str:
        return duration((self.now - self.approval.requested_at).total_seconds())

    @property
    def expires_in(self) -> str:
        left = (self.approval.expires_at - self.now).total_seconds()
        return "expired" if left <= 0 else duration(left)

    @property
    def hash_short(self) -> str:
        return self.approval.args_hash[:12]


def approval_views(
    pairs: list[tuple[Approval, Order | None]], now: dt.datetime
) -> list[ApprovalView]:
    return [ApprovalView(a, OrderFacts(o) if o is not None else None, now) for a, o in pairs]
