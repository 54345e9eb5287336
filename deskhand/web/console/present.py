"""How a step reads on the run page: labels, what came from outside, where time and money went.

Everything a tool returned, and everything a customer or staff member wrote,
reached the model inside a fence (agent/conversation/fence.py). The console shows that
text with the fence markers removed and a visible "untrusted" label: the
reader should know which words were the agent's and which it was handed.

Over 400 lines because every kind of step has its own wording; the cases read best side by
side.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import Any

from django.utils import timezone

from agent.conversation import fence
from agent.models import Run, Step, payloads
from agent.models.payloads import StepKind
from agent.models.privacy import Redaction, RedactionReason
from agent.providers.scripted import MARK
from agent.tools import REGISTRY
from agent.tools.order_facts import RefundFacts
from approvals.models import Approval
from deskhand.domain.desk import orders
from deskhand.domain.desk.models import Order
from deskhand.domain.desk.money import SYMBOLS, display_cents, minor_digits, typed_units
from deskhand.web.console import story, words

BAR_STEPS = 100  # static/console.css has a .w0 … .w100 class per percent (CSP forbids style="")


def dollars(micros: int) -> str:
    """Micro-dollars as dollars: four places below a cent, where model calls live."""
    sign = "-" if micros < 0 else ""
    whole, frac = divmod(abs(int(micros)), 1_000_000)
    cents4 = frac // 100
    return f"{sign}${whole}.{cents4:04d}"


def cents(amount: int | None, currency: str = "USD") -> str:
    return "—" if amount is None else display_cents(int(amount), currency)


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
    sentence: str  # what happened, for people (console.story)
    ago: str  # "4 min ago"; the exact time is the hover (``exact``)
    exact: str
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
    def arguments(self) -> str:
        return pretty(self.step.arguments)

    @property
    def tokens(self) -> int:
        s = self.step
        return s.input_tokens + s.output_tokens + s.cache_read_tokens + s.cache_write_tokens

    @property
    def dom_id(self) -> str:
        return f"step-{self.step.seq}"


def step_view(
    step: Step,
    *,
    peak_ms: int,
    peak_cost: int,
    run_open: bool,
    now: dt.datetime,
    currency: str = "USD",
) -> StepView:
    p = payloads.read(step)
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    outside = ""
    details: dict[str, Any] = {}
    if isinstance(p, payloads.ModelPayload):
        for block in p.content:
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
        if p.stop_reason:
            details["stop reason"] = p.stop_reason
    elif isinstance(p, payloads.ToolPayload):
        outside = untrusted(pretty(p.text) if p.text else "")
        if p.ledger_key:
            details["ledger key"] = p.ledger_key
    elif isinstance(p, payloads.ApprovalPayload):
        for key, value in (
            ("preview", p.preview),
            ("args hash", p.args_hash),
            ("expires at", p.expires_at),
            ("decided by", p.decided_by),
            ("reason", p.reason),
            ("waited seconds", p.waited_seconds),
            ("detail", p.detail),
        ):
            if value not in (None, ""):
                details[key] = value
        if (seen := RefundFacts.from_json(p.facts)) is not None:
            details["the order as shown"] = seen.line()
    elif isinstance(p, payloads.NotePayload):
        outside = "\n\n".join(f"{n.author or '?'}: {untrusted(n.body)}" for n in p.notes)
    elif isinstance(p, payloads.EndPayload):
        for key, value in (
            ("status", p.status),
            ("stop reason", p.stop_reason),
            ("detail", p.detail),
            ("by", p.by),
        ):
            if value:
                details[key] = value
        if p.summary:
            texts.append(p.summary)
    elif isinstance(p, payloads.UndoPayload):
        for key, value in (("text", p.text), ("by", p.by)):
            if value:
                details[key] = value
    return StepView(
        step=step,
        sentence=story.sentence(step, currency=currency),
        ago=story.ago(step.created_at, now),
        exact=story.exact(step.created_at),
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
    run: Run,
    steps: list[Step],
    *,
    peak_ms: int | None = None,
    peak_cost: int | None = None,
    currency: str = "USD",
) -> list[StepView]:
    """The steps as the page shows them. Peaks are the run's, so bars compare across the run."""
    now = timezone.now()
    peak_ms = peak_ms if peak_ms is not None else max((s.latency_ms for s in steps), default=0)
    peak_cost = (
        peak_cost if peak_cost is not None else max((s.cost_micros for s in steps), default=0)
    )
    return [
        step_view(
            s,
            peak_ms=peak_ms,
            peak_cost=peak_cost,
            run_open=run.is_open,
            now=now,
            currency=currency,
        )
        for s in steps
    ]


@dataclasses.dataclass(frozen=True)
class Spend:
    """Where the run's time and money went, by kind of step; the parts add up to its wall time."""

    model_ms: int
    tool_ms: int
    waited_s: float
    model_bar: int
    tool_bar: int
    # The rest of the run's wall time: queues, the worker's own work, saving each step.
    other_s: float = 0.0

    @property
    def model(self) -> str:
        return duration(self.model_ms / 1000)

    @property
    def tools(self) -> str:
        return duration(self.tool_ms / 1000)

    @property
    def waited(self) -> str:
        return duration(self.waited_s)

    @property
    def other(self) -> str:
        return duration(self.other_s)


def spend(run: Run, steps: list[Step]) -> Spend:
    model_ms = sum(s.latency_ms for s in steps if s.kind == StepKind.MODEL)
    tool_ms = sum(s.latency_ms for s in steps if s.kind == StepKind.TOOL)
    total = model_ms + tool_ms
    started = run.started_at or run.created_at
    end = run.finished_at or (timezone.now() if run.is_open else run.updated_at)
    wall = (end - started).total_seconds() if end and started else 0.0
    waited = float(run.waited_seconds or 0)
    return Spend(
        model_ms=model_ms,
        tool_ms=tool_ms,
        waited_s=waited,
        model_bar=_bar(model_ms, total),
        tool_bar=_bar(tool_ms, total),
        other_s=max(0.0, wall - total / 1000 - waited),
    )


@dataclasses.dataclass(frozen=True)
class RunRow:
    """A run as one line of a list (``money``: what it refunded or its ticket has at stake)."""

    run: Run
    money: str = "—"

    @property
    def cost(self) -> str:
        return dollars(self.run.cost_micros)

    @property
    def tokens(self) -> int:
        return self.run.total_tokens

    @property
    def wall(self) -> str:
        start = self.run.started_at or self.run.created_at
        return (
            duration((self.run.finished_at - start).total_seconds())
            if self.run.finished_at
            else "—"
        )


def run_rows(runs: list[Run], money: dict[Any, str] | None = None) -> list[RunRow]:
    return [RunRow(r, (money or {}).get(r.pk, "—")) for r in runs]


@dataclasses.dataclass(frozen=True)
class OrderFacts:
    """An order as an approver weighs it: what it cost, what has gone back, when it arrived."""

    order: Order

    @property
    def total(self) -> str:
        return cents(self.order.total_cents, self.order.currency)

    @property
    def refunded_cents(self) -> int:
        """Money moved back and confirmed (``refund_figures``' ``refunded``)."""
        return int(getattr(self.order, "refunded", 0) or 0)

    @property
    def in_flight_cents(self) -> int:
        """Claimed at a payment provider, not yet confirmed: it may have moved."""
        return int(getattr(self.order, "in_flight", 0) or 0)

    @property
    def refunded(self) -> str:
        return cents(self.refunded_cents, self.order.currency)

    @property
    def in_flight(self) -> str:
        return cents(self.in_flight_cents, self.order.currency)

    @property
    def remaining_cents(self) -> int:
        """What may still be refunded: money in flight counts against it (it may have moved)."""
        return self.order.total_cents - self.refunded_cents - self.in_flight_cents

    @property
    def remaining(self) -> str:
        return cents(self.remaining_cents, self.order.currency)


@dataclasses.dataclass(frozen=True)
class SourcedOrder:
    """An order as the ticket page lists it, read from the merchant's order source."""

    facts: orders.OrderFacts

    @property
    def total(self) -> str:
        return cents(self.facts.total_cents, self.facts.currency)

    @property
    def refunded(self) -> str:
        return cents(self.facts.refunded_cents, self.facts.currency)

    @property
    def in_flight_cents(self) -> int:
        return self.facts.in_flight_cents

    @property
    def in_flight(self) -> str:
        return cents(self.facts.in_flight_cents, self.facts.currency)


@dataclasses.dataclass(frozen=True)
class Changeable:
    """One field a person may change on an approval card, from the tool registry."""

    field: str
    kind: str  # "at_most" | "reword"
    value: Any
    currency: str = "USD"
    label: str = ""

    @property
    def is_money(self) -> bool:
        return (
            self.kind == "at_most"
            and isinstance(self.value, int)
            and not isinstance(self.value, bool)
        )

    @property
    def shown(self) -> str:
        return cents(self.value, self.currency) if self.is_money else str(self.value)

    @property
    def in_units(self) -> str:
        """The proposed amount as a person types it: ``17900`` -> ``"179.00"``."""
        return typed_units(int(self.value), self.currency)

    @property
    def symbol(self) -> str:
        return SYMBOLS.get(self.currency, "")

    @property
    def digits(self) -> int:
        """The currency's minor digits, for the form's live preview (``money.minor_digits``)."""
        return minor_digits(self.currency)


# Arguments that are the model's own account, not anything read from the database.
CLAIM_LABELS = {"reason": "The agent's reason (not checked)"}


@dataclasses.dataclass(frozen=True)
class ApprovalView:
    """A pending (or decided) approval with its arguments laid beside the order's facts."""

    approval: Approval
    order: OrderFacts | None
    now: dt.datetime

    @property
    def headline(self) -> str:
        """The preview's first line, as a heading: "Reply to the customer on NW-1", without the
        colon that introduced the body below it."""
        if not self.approval.preview:
            return words.tool(self.approval.tool)
        return self.approval.preview.splitlines()[0].rstrip().rstrip(":")

    @property
    def has_more(self) -> bool:
        return "\n" in self.approval.preview.strip()

    @property
    def prior_effects(self) -> list[dict[str, Any]]:
        """What the lineage and earlier runs on the ticket already did to this order or customer."""
        prior = self.approval.prior_effects
        return [p for p in prior if isinstance(p, dict)] if isinstance(prior, list) else []

    @property
    def claims(self) -> list[tuple[str, str]]:
        """What the model asserts and nothing checked (its reason), labelled as such."""
        args = self.approval.arguments if isinstance(self.approval.arguments, dict) else {}
        # The keyless provider marks what it writes for staff; the banner already says which
        # provider runs, so the mark never starts the sentence a person decides on.
        return [
            (CLAIM_LABELS[key], str(args[key]).strip().removeprefix(MARK).strip())
            for key in CLAIM_LABELS
            if isinstance(args.get(key), str) and args[key].strip()
        ]

    @property
    def currency(self) -> str:
        return self.order.order.currency if self.order is not None else "USD"

    @property
    def tool_words(self) -> str:
        return words.tool(self.approval.tool)

    @property
    def arguments(self) -> list[tuple[str, str]]:
        """The call's arguments in words ("Amount: $19.00"); the codes stay in ``raw_arguments``."""
        return [(words.argument(key), shown) for key, shown in self._shown(self._proposed)]

    @property
    def raw_arguments(self) -> list[tuple[str, str]]:
        """The arguments as the step log keeps them (names and integer cents), for engineers."""
        args = self._proposed
        return [(key, pretty(args[key])) for key in sorted(args)]

    @property
    def _proposed(self) -> dict[str, Any]:
        return self.approval.arguments if isinstance(self.approval.arguments, dict) else {}

    def _shown(self, args: dict[str, Any]) -> list[tuple[str, str]]:
        out = []
        for key in sorted(args):
            if key in CLAIM_LABELS:
                continue
            value = args[key]
            if key.endswith("_cents") and isinstance(value, int) and not isinstance(value, bool):
                shown = cents(value, self.currency)
            else:
                shown = value if isinstance(value, str) else pretty(value)
            out.append((key, str(shown)))
        return out

    def _summary(self, args: dict[str, Any]) -> str:
        """One line for a call: "Refund $20.00 on order NW-1042", else the tool's preview."""
        tool = REGISTRY.get(self.approval.tool)
        money_field = tool.money_field if tool is not None else None
        amount = args.get(money_field) if money_field else None
        if isinstance(amount, int) and not isinstance(amount, bool):
            order = args.get("order_reference")
            where = f" on order {order}" if order else ""
            return f"{words.tool(self.approval.tool)} {cents(amount, self.currency)}{where}"
        if tool is not None and self.approval.tool == "send_customer_email":
            return f"{words.tool(self.approval.tool)}: “{args.get('subject', '')}”"
        return self.headline

    @property
    def proposed_summary(self) -> str:
        return self._summary(self._proposed)

    @property
    def approved_summary(self) -> str:
        """What was approved: the narrower call when a person changed it, else the proposal."""
        executes = self.approval.executes if self.approval.changed else self._proposed
        return self._summary(executes if isinstance(executes, dict) else self._proposed)

    @property
    def changeable(self) -> list[Changeable]:
        """The fields a person may change when approving (the tool registry says which, and how)."""
        tool = REGISTRY.get(self.approval.tool)
        if tool is None:
            return []
        args = self._proposed
        return [
            Changeable(f, how.value, args.get(f), self.currency, words.argument(f))
            for f, how in tool.narrowable
        ]

    @property
    def amount_cents(self) -> int | None:
        value = (
            self.approval.arguments.get("amount_cents")
            if isinstance(self.approval.arguments, dict)
            else None
        )
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def facts(self) -> RefundFacts | None:
        """The order's money as this request showed it (what an approval holds for)."""
        return RefundFacts.from_json(self.approval.facts)

    @property
    def facts_moved(self) -> str:
        """How the order's refunded total moved since this was asked ("" if it did not): an
        approval now pays nothing and the run asks again."""
        seen = self.facts
        if seen is None or self.order is None:
            return ""
        now = self.order.refunded_cents + self.order.in_flight_cents
        if now == seen.refunded_cents:
            return ""
        return (
            f"{cents(now, seen.currency)} refunded now: approving pays nothing, and the agent "
            "asks again with the new total"
        )

    @property
    def exceeds_remaining(self) -> bool:
        if self.order is None or self.amount_cents is None:
            return False
        return self.amount_cents > self.order.remaining_cents

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

    @property
    def changes(self) -> str:
        """What a person changed when approving, in words: "amount from $48.00 to $20.00"."""
        if not self.approval.changed:
            return ""
        return changes_words(self._proposed, self.approval.executes, self.currency)


def changes_words(proposed: dict[str, Any], approved: dict[str, Any], currency: str) -> str:
    """What a person changed, for people (``agent.tools.narrowing.changes_text`` keeps the codes)."""
    out = []
    for field in sorted(set(proposed) | set(approved)):
        old, new = proposed.get(field), approved.get(field)
        if old == new:
            continue
        label = words.argument(field).lower()
        if isinstance(old, int) and isinstance(new, int) and field.endswith("_cents"):
            out.append(f"{label} from {cents(old, currency)} to {cents(new, currency)}")
        else:
            out.append(f"{label} edited")
    return "; ".join(out)


def approval_views(
    pairs: list[tuple[Approval, Order | None]], now: dt.datetime
) -> list[ApprovalView]:
    return [ApprovalView(a, OrderFacts(o) if o is not None else None, now) for a, o in pairs]


# What a redaction's counts name, in the words the run page uses.
REDACTED_PARTS = {
    "steps": "step payloads",
    "approvals": "approvals' wording",
    "staff_notes": "staff notes",
    "audit_events": "audit details",
    "ledger_entries": "ledger entries' wording",
}


@dataclasses.dataclass(frozen=True)
class RedactionView:
    """One redaction of a run, as the run page states it: why, when, what went, what stayed."""

    redaction: Redaction

    @property
    def headline(self) -> str:
        at = f"{self.redaction.created_at:%Y-%m-%d %H:%M} UTC"
        if self.redaction.reason == RedactionReason.ERASURE:
            return f"Erased on {at}: the customer's personal data was erased at their request."
        days = self.redaction.what.get("retention_days")
        kept = f" keeps runs' words for {days} days" if days else "'s retention period"
        return f"Redacted on {at}: this merchant{kept}."

    @property
    def removed(self) -> str:
        what = self.redaction.what
        parts = [f"{what[k]} {label}" for k, label in REDACTED_PARTS.items() if what.get(k)]
        if what.get("dbos_history") == "deleted":
            parts.append("its DBOS history (deleted)")
        return ", ".join(parts) or "nothing left to remove"


def redaction_views(run: Run) -> list[RedactionView]:
    return [RedactionView(r) for r in Redaction.objects.filter(run=run).order_by("created_at")]
