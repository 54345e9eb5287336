"""``replay RUN_ID --diverge`` and ``replay --corpus``: what the replay command prints for them.

The work is ``agent.replay.diverge`` (one run) and ``agent.replay.corpus`` (many); this module
turns the command line into their inputs — which system prompt, which provider and
model, what spend limit — and their results into lines or one JSON object.
"""

from __future__ import annotations

import decimal
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from agent.models.payloads import StepKind
from agent.replay import corpus, timeline
from agent.replay import diverge as divergence
from agent.replay.rebuild import system_for
from deskhand.domain.cli import CliError
from deskhand.domain.desk.models import Merchant

# A spend limit above this is a typo, not a budget.
MAX_SPEND_USD = decimal.Decimal(10_000)


def one_line(text: Any, width: int) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def prompt_source(prompt_file: str | None) -> tuple[Callable[[timeline.Timeline], str], str]:
    """(the system prompt for a timeline, what to call it): the file's, else today's."""
    if not prompt_file:
        return system_for, "the current system prompt"
    path = Path(prompt_file)
    if not path.is_file():
        raise CliError(f"no system prompt file {prompt_file!r}.", code="invalid")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise CliError(f"{prompt_file!r} is not a UTF-8 text file.", code="invalid") from None
    return (
        lambda tl: divergence.custom_system_prompt(text, tl.token),
        f"the system prompt in {prompt_file}",
    )


def asked(opts: dict[str, Any]) -> corpus.Asked:
    try:
        return corpus.Asked(opts["provider"], opts["model"]).check()
    except corpus.ReplayRefused as exc:
        raise CliError(str(exc), code="invalid") from None


def spend_limit(value: str | None) -> int | None:
    """``--max-spend-usd`` as integer micro-dollars (no float touches it)."""
    if value is None:
        return None
    try:
        usd = decimal.Decimal(value.strip())
    except decimal.InvalidOperation:
        usd = decimal.Decimal("NaN")
    if not usd.is_finite() or usd <= 0 or usd > MAX_SPEND_USD:
        raise CliError(
            f"--max-spend-usd takes an amount of dollars above 0 and at most {MAX_SPEND_USD}, "
            f"not {value!r}.",
            code="invalid",
        )
    return int((usd * 1_000_000).to_integral_value(rounding=decimal.ROUND_DOWN))


def differing(a: list[str], b: list[str], width: int = 120) -> tuple[str, str]:
    """Both decision lists on one line each, cut around where they first differ."""
    left, right = ", ".join(a), ", ".join(b)
    i = next(
        (k for k, (x, y) in enumerate(zip(left, right, strict=False)) if x != y),
        min(len(left), len(right)),
    )
    if max(len(left), len(right)) <= width or i < width - 30:
        return one_line(left, width), one_line(right, width)
    start = i - 40
    return "…" + one_line(left[start:], width), "…" + one_line(right[start:], width)


def diverge(cmd: BaseCommand, tl: timeline.Timeline, opts: dict[str, Any]) -> None:
    """One run: print where it first decides otherwise; exit 1 if it does, 0 if not."""
    system_text, source = prompt_source(opts["system_prompt"])
    who = asked(opts)
    budget = spend_limit(opts["max_spend_usd"])
    if not any(s.kind == StepKind.MODEL for s in tl.steps):
        raise CliError(f"run {tl.run.id} made no model calls; there is nothing to replay.")
    try:
        provider = who.provider(tl.run)
    except corpus.ReplayRefused as exc:
        raise CliError(str(exc), code="invalid") from None
    try:
        result = divergence.diverge(tl, provider, system_text(tl), budget)
    except Exception as exc:  # a provider failing mid-replay is reported, not a traceback
        raise CliError(
            f"the provider failed during the replay: {type(exc).__name__}: {one_line(exc, 200)}."
        ) from None
    if opts["json"]:
        cmd.stdout.write(json.dumps(_diverge_json(tl, provider, source, result), sort_keys=True))
    else:
        _diverge_lines(cmd.stdout.write, tl, provider, source, result)
    if result.diverged:
        cmd.stdout.flush()
        sys.exit(1)


def _diverge_json(
    tl: timeline.Timeline, provider: Any, source: str, r: divergence.Divergence
) -> dict[str, Any]:
    return {
        "run": str(tl.run.pk),
        "provider": f"{provider.name}/{provider.model}",
        "prompt": source,
        "outcome": r.outcome,
        "diverged_at": r.seq,
        "matched": r.matched,
        "total": r.total,
        "original": r.original,
        "now": r.now,
        "tool": r.tool if r.diverged else None,
        "money_moved_differently_cents": r.money_cents if r.diverged else 0,
        "soft": [{"step": seq, "tool": w.tool, "fields": list(w.fields)} for seq, w in r.soft],
        "model_calls": r.calls,
        "model_spend_micros": r.cost_micros,
    }


def _diverge_lines(
    w: Callable[[str], Any],
    tl: timeline.Timeline,
    provider: Any,
    source: str,
    r: divergence.Divergence,
) -> None:
    w(
        f"replaying run {tl.run.id} against {source} with {provider.name}/{provider.model} — "
        "nothing is executed or written"
    )
    w(
        f"model calls made for the replay: {r.calls}, {r.input_tokens + r.output_tokens} tokens, "
        f"{r.cost_micros} micro-USD (not charged to any run)"
    )
    for seq, reworded in r.soft:
        w(
            f"soft difference at step {seq}: {reworded.tool} decided the same, worded "
            f"{', '.join(reworded.fields)} otherwise"
        )
    if r.out_of_budget:
        w(f"stopped: the spend limit was reached after {r.matched} of {r.total} decisions")
        return
    if not r.diverged:
        soft = f" ({len(r.soft)} with other wording)" if r.soft else ""
        w(f"no divergence — all {r.total} decision(s) matched{soft}")
        return
    w(f"diverged at step {r.seq}: {r.matched} of {r.total} decisions matched first")
    before, now = differing(r.original, r.now)
    w("  originally: " + (before or "(no tool call: it finished)"))
    w("  now:        " + (now or "(no tool call: it would finish)"))
    if r.now_text:
        w("  now says:   " + one_line(r.now_text, 160))
    if r.money_cents:
        w(
            f"  money:      {corpus.dollars(r.original_money)} in refunds proposed originally, "
            f"{corpus.dollars(r.now_money)} now"
        )
    w(
        "the replay stops here: there is no recorded observation for a call the original run "
        "never made."
    )


def run_corpus(cmd: BaseCommand, opts: dict[str, Any]) -> None:
    """``replay --corpus``: replay many runs; the table (or one object) on stdout."""
    if opts["limit"] is not None and opts["limit"] < 1:
        raise CliError("--limit takes a number of runs of at least 1.", code="invalid")
    if opts["since"] is not None and opts["since"] < 1:
        raise CliError("--since takes a number of days of at least 1.", code="invalid")
    system_text, source = prompt_source(opts["system_prompt"])
    who = asked(opts)
    budget = spend_limit(opts["max_spend_usd"])
    merchant_id = None
    if opts["merchant"]:
        found = Merchant.objects.filter(slug=opts["merchant"]).first()
        if found is None:
            raise CliError(f"no merchant {opts['merchant']!r}.", code="not_found")
        merchant_id = found.pk
    runs = corpus.select(merchant_id, opts["since"], opts["limit"] or 100)
    real = any(who.real_for(run) for run in runs)
    if real and budget is None:
        raise CliError(
            "a corpus against a real provider (anthropic) needs --max-spend-usd.", code="usage"
        )
    if real and not settings.ANTHROPIC_API_KEY:
        raise CliError(
            "these runs' own provider is anthropic, which needs ANTHROPIC_API_KEY to be set.",
            code="invalid",
        )
    name = who.describe()
    report = corpus.Report(len(runs), name, source, budget)
    tty = cmd.stderr.isatty()

    def progress(i: int, outcome: corpus.Outcome) -> None:
        width = 30
        filled = width * i // max(len(runs), 1)
        bar = (
            f"[{'#' * filled}{'.' * (width - filled)}] {i}/{len(runs)} runs, "
            f"{corpus.micro_dollars(report.spent_micros)} spent, last: {outcome.outcome}"
        )
        cmd.stderr.write(
            f"\r{bar}" if tty else bar, ending="\n" if not tty or i == len(runs) else ""
        )

    corpus.run_corpus(runs, who, system_text, report, progress)
    if tty and report.stopped:
        cmd.stderr.write("")
    if opts["json"]:
        cmd.stdout.write(json.dumps(report.as_json(), sort_keys=True))
        return
    cmd.stdout.write(
        f"corpus: {len(runs)} finished run(s)"
        + (f" of {opts['merchant']}" if opts["merchant"] else "")
        + (f" from the last {opts['since']} day(s)" if opts["since"] else "")
        + f", replayed with {name} against {source} — nothing is executed or written"
    )
    for line in report.table():
        cmd.stdout.write(line)
