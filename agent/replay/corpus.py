"""``replay --corpus``: divergence over many recorded runs, and which model a replay asks.

Each selected run is replayed by ``agent.replay.diverge`` (turn by turn, decisions
compared by ``agent.replay.decisions``) and counted as the same, a soft difference (only
wording), diverged, or skipped (nothing to replay). Everything is read-only: a
run's timeline is loaded in a ``READ ONLY`` transaction, the provider is called
directly, never through a step, and nothing is written anywhere.

A real provider costs money, so a corpus against one has a spend limit: it is
checked before every model call, and when it is reached the corpus stops and
says so (a call already in flight finishes, so the spend may pass the limit by
one call's cost).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections import Counter
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agent.models import TERMINAL_STATUSES, Run
from agent.models.payloads import StepKind
from agent.privacy.redaction import replay_refusal
from agent.providers import provider_for, provider_for_run
from agent.providers.base import Provider
from agent.providers.pricing import UnknownModel, require_priced
from agent.providers.scripted import POLICY_MODEL
from agent.replay import diverge, timeline
from deskhand.domain.desk.money import display_cents

PROVIDERS = ("anthropic", "scripted")
# Providers that cost money: a corpus against one needs a spend limit.
REAL_PROVIDERS = frozenset({"anthropic"})


class ReplayRefused(ValueError):
    """Bad input to a replay, as one sentence."""


@dataclasses.dataclass(frozen=True)
class Asked:
    """Which provider and model a replay asks; ``name`` None: each run's own."""

    name: str | None = None
    model: str | None = None

    def check(self) -> Asked:
        """Refuse (``ReplayRefused``) an unknown provider, an unpriced model or a missing key."""
        if self.name is not None and self.name not in PROVIDERS:
            raise ReplayRefused(
                f"unknown provider {self.name!r}; expected {' or '.join(map(repr, PROVIDERS))}."
            )
        if self.model is not None and self.name != "anthropic":
            raise ReplayRefused("--model applies only with --provider anthropic.")
        if self.name == "anthropic":
            try:
                require_priced(self.model or settings.ANTHROPIC_MODEL)
            except UnknownModel as exc:
                raise ReplayRefused(str(exc)) from None
            if not settings.ANTHROPIC_API_KEY:
                raise ReplayRefused("--provider anthropic needs ANTHROPIC_API_KEY to be set.")
        return self

    def describe(self) -> str:
        if self.name is None:
            return "each run's own provider"
        if self.name == "anthropic":
            return f"anthropic/{self.model or settings.ANTHROPIC_MODEL}"
        return f"{self.name}/{POLICY_MODEL}"

    def real_for(self, run: Run) -> bool:
        """Whether replaying ``run`` costs money."""
        return (self.name or run.provider) in REAL_PROVIDERS

    def provider(self, run: Run) -> Provider:
        """The provider that replays ``run``: the one asked for, else the run's own."""
        if self.name is None:
            try:
                return provider_for_run(str(run.pk), run.provider, run.model)
            except ValueError as exc:
                raise ReplayRefused(f"{exc}.") from None
        return provider_for(self.name, self.model or settings.ANTHROPIC_MODEL)


def dollars(cents: int) -> str:
    """Integer cents as dollars, exactly (a corpus's refunds summed across its runs)."""
    return display_cents(cents, "USD")


def micro_dollars(micros: int) -> str:
    """Integer micro-dollars as dollars, exactly (six places)."""
    whole, part = divmod(micros, 1_000_000)
    return f"${whole:,}.{part:06d}"


def select(merchant_id: int | None, since_days: int | None, limit: int) -> list[Run]:
    """Finished runs to replay, newest first."""
    runs = Run.objects.filter(status__in=TERMINAL_STATUSES).select_related("ticket")
    if merchant_id is not None:
        runs = runs.filter(merchant_id=merchant_id)
    if since_days is not None:
        runs = runs.filter(created_at__gte=timezone.now() - dt.timedelta(days=since_days))
    return list(runs.order_by("-created_at", "-id")[:limit])


@dataclasses.dataclass
class Outcome:
    run_id: str
    outcome: str  # same | soft | diverged | skipped | incomplete | failed
    seq: int | None = None
    tool: str = ""
    money_cents: int = 0
    cost_micros: int = 0
    calls: int = 0
    why: str = ""  # skipped or failed: why


@dataclasses.dataclass
class Report:
    selected: int
    asked: str  # e.g. "each run's own provider", "anthropic/claude-sonnet-4-6"
    prompt: str  # "the current system prompt" or "the system prompt in FILE"
    limit_micros: int | None
    outcomes: list[Outcome] = dataclasses.field(default_factory=list)
    stopped: bool = False  # the spend limit was reached

    def count(self, outcome: str) -> int:
        return sum(o.outcome == outcome for o in self.outcomes)

    @property
    def spent_micros(self) -> int:
        return sum(o.cost_micros for o in self.outcomes)

    @property
    def money_cents(self) -> int:
        return sum(o.money_cents for o in self.outcomes if o.outcome == "diverged")

    def by_tool(self) -> dict[str, int]:
        found = Counter(o.tool for o in self.outcomes if o.outcome == "diverged")
        return dict(sorted(found.items(), key=lambda kv: (-kv[1], kv[0])))

    def as_json(self) -> dict[str, Any]:
        return {
            "selected": self.selected,
            "provider": self.asked,
            "prompt": self.prompt,
            "runs": self.count("same") + self.count("soft") + self.count("diverged"),
            "same": self.count("same"),
            "soft": self.count("soft"),
            "diverged": self.count("diverged"),
            "skipped": self.count("skipped"),
            "failed": self.count("failed"),
            "incomplete": self.count("incomplete"),
            "not_reached": self.selected - len(self.outcomes),
            "first_divergence_by_tool": self.by_tool(),
            "money_moved_differently_cents": self.money_cents,
            "model_spend_micros": self.spent_micros,
            "max_spend_micros": self.limit_micros,
            "stopped_at_spend_limit": self.stopped,
            "results": [dataclasses.asdict(o) for o in self.outcomes],
        }

    def table(self) -> list[str]:
        data = self.as_json()
        rows = [
            ("runs replayed", str(data["runs"]), f"of {self.selected} selected"),
            ("same", str(data["same"]), "every decision matched"),
            ("soft", str(data["soft"]), "the same decisions, other wording (reasons, bodies)"),
            ("diverged", str(data["diverged"]), "a tool or a decisive argument differed"),
        ]
        for label in ("skipped", "failed", "incomplete", "not_reached"):
            if data[label]:
                rows.append((label.replace("_", " "), str(data[label]), _why(self, label)))
        rows.append(
            (
                "money moved differently",
                dollars(self.money_cents),
                "refunds proposed at the first divergent decision, original vs now",
            )
        )
        rows.append(
            (
                "model spend",
                micro_dollars(self.spent_micros),
                f"{sum(o.calls for o in self.outcomes)} calls, charged to no run"
                + (f"; limit {micro_dollars(self.limit_micros)}" if self.limit_micros else ""),
            )
        )
        lines = [f"{label:<26} {value:>12}   {note}" for label, value, note in rows]
        if data["first_divergence_by_tool"]:
            lines.append("first divergent step, by what the original decided there:")
            lines += [
                f"  {tool:<24} {n:>12}" for tool, n in data["first_divergence_by_tool"].items()
            ]
        if self.stopped:
            lines.append(
                f"stopped: the spend limit of {micro_dollars(self.limit_micros or 0)} was reached "
                f"after {len(self.outcomes)} of {self.selected} runs"
            )
        return lines


def _why(report: Report, label: str) -> str:
    if label == "not_reached":
        return "not replayed: the spend limit was reached first"
    if label == "incomplete":
        return "the spend limit was reached mid-run"
    reasons = Counter(o.why for o in report.outcomes if o.outcome == label)
    return "; ".join(f"{n}: {why}" for why, n in reasons.most_common(3))


def _load(run: Run) -> timeline.Timeline:
    """The run's timeline, read in a transaction Postgres itself keeps read-only."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost:
            with connection.cursor() as cur:
                cur.execute("SET TRANSACTION READ ONLY")
        return timeline.load(run)


def replay_one(
    run: Run,
    asked: Asked,
    system_text: Callable[[timeline.Timeline], str],
    budget_micros: int | None,
) -> Outcome:
    """One run of the corpus: its outcome, never an exception for a run that cannot replay."""
    rid = str(run.pk)
    refusal = replay_refusal(run)
    if refusal:
        return Outcome(rid, "skipped", why="redacted or erased")
    timeline = _load(run)
    if not any(s.kind == StepKind.MODEL for s in timeline.steps):
        return Outcome(rid, "skipped", why="made no model call")
    try:
        found = diverge.diverge(timeline, asked.provider(run), system_text(timeline), budget_micros)
    except ReplayRefused as exc:
        return Outcome(rid, "failed", why=str(exc))
    except Exception as exc:  # a provider failing is this run's outcome, not the corpus's end
        return Outcome(rid, "failed", why=f"the provider failed: {type(exc).__name__}")
    return Outcome(
        rid,
        found.outcome,
        seq=found.seq,
        tool=found.tool if found.diverged else "",
        money_cents=found.money_cents,
        cost_micros=found.cost_micros,
        calls=found.calls,
    )


def run_corpus(
    runs: list[Run],
    asked: Asked,
    system_text: Callable[[timeline.Timeline], str],
    report: Report,
    progress: Callable[[int, Outcome], None],
) -> Report:
    """Replay ``runs`` in order into ``report``; stop when its spend limit is reached."""
    for i, run in enumerate(runs, start=1):
        left = None if report.limit_micros is None else report.limit_micros - report.spent_micros
        if left is not None and left <= 0:
            report.stopped = True
            break
        outcome = replay_one(run, asked, system_text, left)
        report.outcomes.append(outcome)
        progress(i, outcome)
        if outcome.outcome == "incomplete":
            report.stopped = True
            break
    return report
