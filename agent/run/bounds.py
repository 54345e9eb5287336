"""Bounds: every run terminates, and no cap is passed even across a crash.

``bounds_check`` runs as a durable step before every model call, so every
value it reads — the run's totals, the clock, the merchant's and the
platform's spend today, the step log — is read inside a step and checkpointed:
a replayed run sees the same answer the original did. The caps themselves were
snapshotted on the run at creation (``run_create``), so a settings change never
widens a run in flight; the platform cap and the merchant's daily cap are read
live, because they are shared budgets, not the run's own.

The checks run in a fixed order and the first one hit ends the run
``exhausted`` with its own stop reason; the loop then writes the summary
(``run_finish``: what the model said, then "Effects:" from the ledger).

Money that leaves — refunds — is bounded elsewhere, in the refund's own
transaction under row locks (``deskhand.domain.desk.services.refund_issue``): the
order's refundable remainder, the run's refund ceiling and the merchant's
daily refund ceiling. A refusal there is an error tool result the model reads,
not the end of the run. ``refund_precheck`` answers the same question
read-only, for asking before a person is bothered with an approval that
could not be paid.
"""

from __future__ import annotations

import datetime as dt
import json
import zoneinfo
from collections.abc import Callable
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from agent.models import Run
from agent.models.payloads import StepKind
from agent.steps import Bounds
from agent.tools.reads import order_facts_of_customer
from agent.tools.registry import ToolError
from deskhand.domain.desk.money import format_cents, format_micros
from deskhand.domain.desk.rows import row_by_pk
from deskhand.domain.desk.selectors import refund_totals
from deskhand.domain.desk.services import merchant_day_start

Hit = dict[str, str]
Check = Callable[[Run, dt.datetime], Hit | None]


def day_start(now: dt.datetime, tz_name: str) -> dt.datetime:
    """Midnight of ``now``'s calendar day on the wall clock of ``tz_name``."""
    local = now.astimezone(zoneinfo.ZoneInfo(tz_name))
    return local.replace(hour=0, minute=0, second=0, microsecond=0)


def _hit(reason: str, detail: str) -> Hit:
    return {"reason": reason, "detail": detail}


def check_steps(run: Run, now: dt.datetime) -> Hit | None:
    if run.steps >= run.max_steps:
        return _hit("step_cap", f"reached the {run.max_steps}-step ceiling ({run.steps} steps)")
    return None


def check_tokens(run: Run, now: dt.datetime) -> Hit | None:
    if run.total_tokens >= run.max_tokens:
        return _hit("token_cap", f"used {run.total_tokens} tokens of {run.max_tokens}")
    return None


def check_spend(run: Run, now: dt.datetime) -> Hit | None:
    if run.cost_micros >= run.max_spend_micros:
        spent, cap = format_micros(run.cost_micros), format_micros(run.max_spend_micros)
        return _hit("spend_cap", f"spent {spent} of {cap}")
    return None


def check_deadline(run: Run, now: dt.datetime) -> Hit | None:
    # Time spent waiting for a person is handed back; the working clock never resets.
    deadline = run.deadline_at + dt.timedelta(seconds=run.waited_seconds)
    if now > deadline:
        return _hit(
            "deadline",
            f"ran past its {run.deadline_seconds}s working deadline "
            f"(not counting {run.waited_seconds:.0f}s spent waiting for a person)",
        )
    return None


SPEND_TODAY = """
SELECT COALESCE(SUM(cost_micros) FILTER (WHERE merchant_id = %s AND created_at >= %s), 0),
       COALESCE(SUM(cost_micros) FILTER (WHERE created_at >= %s), 0)
FROM agent_run WHERE created_at >= LEAST(%s, %s)
"""


def spend_today(run: Run, now: dt.datetime) -> tuple[int, int]:
    """Model spend of runs started today: the merchant's (on its own calendar) and the whole
    platform's (UTC). One statement for both checks, read once per bounds check."""
    cached = run.__dict__.get("_spend_today")
    if cached is not None and cached[0] == now:
        return cached[1]
    with connection.cursor() as cur:
        cur.execute(SPEND_TODAY, spend_params(run, now))
        row = cur.fetchone()
    spent = (int(row[0]), int(row[1])) if row else (0, 0)
    run.__dict__["_spend_today"] = (now, spent)
    return spent


def spend_params(run: Run, now: dt.datetime) -> list[Any]:
    mine, every = day_start(now, run.merchant.timezone), day_start(now, "UTC")
    return [run.merchant_id, mine, every, mine, every]


def check_merchant_day(run: Run, now: dt.datetime) -> Hit | None:
    spent, cap = spend_today(run, now)[0], run.merchant.daily_spend_cap_micros
    if spent >= cap:
        return _hit(
            "merchant_daily_spend",
            f"{run.merchant.name} spent {format_micros(spent)} today, its cap is {format_micros(cap)}",
        )
    return None


def check_platform_day(run: Run, now: dt.datetime) -> Hit | None:
    spent, cap = spend_today(run, now)[1], settings.DESKHAND_PLATFORM_DAILY_SPEND_MICROS
    if spent >= cap:
        return _hit(
            "platform_daily_spend",
            f"the platform spent {format_micros(spent)} today, its cap is {format_micros(cap)}",
        )
    return None


def repeated_call(run: Run) -> dict[str, Any] | None:
    """The call made most often with identical arguments, if it reached the loop threshold.

    A call counts whether it ran or not: every tool step (failed ones too), and
    every irreversible call a person declined (its approval step), so a model
    that keeps asking for what was refused is stopped like one that keeps
    reading the same record. An approved call is counted once, by its tool step.
    """
    if "_repeated" in run.__dict__:  # read ahead with the turn's other questions
        return run.__dict__.pop("_repeated")
    # In SQL, not the ORM: it runs before every model call, and its query compiled to this
    # same statement every time (the grouping by a JSON column was most of a turn's bounds).
    with connection.cursor() as cur:
        cur.execute(REPEATED, repeated_params(run))
        row = cur.fetchone()
    return _repeated(row)


def repeated_params(run: Run) -> list[Any]:
    return [run.pk, StepKind.TOOL, StepKind.APPROVAL, run.loop_threshold]


def _repeated(row: Any) -> dict[str, Any] | None:
    if row is None or row[0] is None:
        return None
    arguments = json.loads(row[1]) if isinstance(row[1], str) else row[1]
    return {"tool": row[0], "arguments": arguments, "n": row[2]}


def remember(run: Run, now: dt.datetime, spent: tuple[int, int], repeated_row: Any) -> None:
    """What ``spend_today`` (at ``now``) and ``repeated_call`` would read, read ahead by the
    caller in one statement with its own questions (``agent.run.turns``); each is used once,
    on this instance of the run only."""
    run.__dict__["_spend_today"] = (now, spent)
    run.__dict__["_repeated"] = _repeated(repeated_row)


REPEATED = """
SELECT tool, arguments, COUNT(id) AS n FROM agent_step
WHERE run_id = %s AND (kind = %s OR (kind = %s AND (result -> 'event') = '"denied"'::jsonb))
GROUP BY tool, arguments HAVING COUNT(id) >= %s ORDER BY n DESC, tool LIMIT 1
"""


def check_loop(run: Run, now: dt.datetime) -> Hit | None:
    repeated = repeated_call(run)
    if repeated:
        return _hit(
            "loop_detected",
            f"called {repeated['tool']} with identical arguments {repeated['n']} times",
        )
    return None


# In order: the first hit ends the run.
CHECKS: tuple[Check, ...] = (
    check_steps,
    check_tokens,
    check_spend,
    check_deadline,
    check_merchant_day,
    check_platform_day,
    check_loop,
)


def bounds_check(run_id: str, now_iso: str | None = None, run: Run | None = None) -> Hit | None:
    """The first bound this run has hit, as ``{"reason", "detail"}``; ``None`` if none.

    Run as a step: the clock is read here, inside it, and the answer is checkpointed.
    ``run``: the run as the caller just read it, with its merchant (not read again).
    """
    if run is None:
        run = Run.objects.select_related("merchant").get(pk=run_id)
    if not run.is_active:
        # Cancelled (or closed) while working: no further model call; the loop's run.finish
        # then writes nothing, and the cancel keeps the last line of the step log.
        return {"reason": "cancelled", "detail": f"the run is {run.status}"}
    now = dt.datetime.fromisoformat(now_iso) if now_iso else timezone.now()
    for check in CHECKS:
        hit = check(run, now)
        if hit is not None:
            return hit
    return None


def bounds_step(run_id: str, run: Run | None = None, now: dt.datetime | None = None) -> Bounds:
    """``bounds_check`` as the turn reads it: the hit, or how many steps are left.

    A reply with many tool calls is counted against the step cap one call at a time, so the
    loop needs the remainder, not only whether the cap is already reached. ``run``: as for
    ``bounds_check``.
    """
    hit = bounds_check(run_id, now_iso=now.isoformat() if now else None, run=run)
    if hit is not None:
        return Bounds(reason=hit["reason"], detail=hit["detail"])
    if run is None:
        run = Run.objects.only("steps", "max_steps").get(pk=run_id)
    return Bounds(steps_left=max(run.max_steps - run.steps, 0))


def refund_precheck(run_id: str, args: dict[str, Any], run: Run | None = None) -> str | None:
    """Why an ``issue_refund`` with these arguments could not be paid now, or ``None``.

    Read-only and advisory: the refund's own transaction re-checks every limit
    under row locks, and that check is the one that holds. This one lets the
    loop refuse before a person is asked to approve money that cannot move.
    ``run``: the run as the caller just read it, with its merchant and ticket.
    """
    if run is None:
        run = row_by_pk(Run, run_id, related=("merchant", "ticket"))
    amount, reference = args.get("amount_cents"), args.get("order_reference")
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
        return None  # validation's business, not a ceiling's
    if not isinstance(reference, str):
        return None
    try:
        # The lookup the refund itself makes: this merchant's order, this ticket's customer,
        # read from the order source the run started with.
        order = order_facts_of_customer(
            merchant_id=run.merchant_id,
            customer_id=run.ticket.customer_id,
            reference=reference,
            source=run.order_source,
        )
    except ToolError as exc:
        return f"cannot refund {format_cents(amount)}: {exc}"

    money = partial(format_cents, currency=order.currency)  # the order's own currency
    refused = f"cannot refund {money(amount)} against {order.reference}"
    # Counted as the refund counts them: every run on this ticket (their forks and re-runs
    # too), the merchant's today; the order's own from its source (what it has refunded,
    # and what is in flight at a payment provider).
    totals = refund_totals(
        order_id=order.order_id or 0,  # an order held on a platform has no refund rows here
        merchant_id=run.merchant_id,
        since=merchant_day_start(run.merchant),
        ticket_id=run.ticket_id,
    )
    remaining = order.remainder_cents
    if amount > remaining:
        return f"{refused}: only {money(remaining)} of {money(order.total_cents)} is left to refund"
    by_run = totals.runs
    if by_run + amount > run.max_refund_cents:
        left = max(run.max_refund_cents - by_run, 0)
        return f"{refused}: this run's refund ceiling is {money(run.max_refund_cents)}, {money(left)} is left"
    today = totals.today
    ceiling = run.merchant.daily_refund_ceiling_cents
    if today + amount > ceiling:
        left = max(ceiling - today, 0)
        return f"{refused}: {run.merchant.name}'s daily refund ceiling is {money(ceiling)}, {money(left)} is left today"
    return None
