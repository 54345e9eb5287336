"""What every effect adapter answers, and the one retry loop they share (``deskhand.infra.retry.EFFECT``).

An adapter for a system outside this database does four things, each in a known
transaction (``agent.ledger.intents`` drives them):

``prepare(ctx, args, entry)``
    In the claim's transaction, before anything leaves: the local checks (whose order,
    which ticket, every refund ceiling) and any reservation (a pending ``Refund`` row).
    Raises ``ToolError``; then nothing is claimed and nothing is sent.
``perform(entry)``
    Call the other system under the entry's key, retrying what is safe to retry
    (same key, inside ``config.budget()``). Returns an ``Outcome``.
``find(entry)``
    Ask the other system whether the effect was made, without making it (for a claim
    that must not be re-sent). Returns an ``Outcome`` (``unknown`` if it cannot tell).
``record(entry, outcome)``
    In the settling transaction: the local rows that say what happened, and the text the
    model reads. Returns ``(text, ok)``.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any, Literal, Protocol

from agent.effects import config
from agent.models.ledger import LedgerEntry
from agent.tools.registry import ToolContext
from deskhand.infra import retry

State = Literal["done", "failed", "unknown"]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the other system said about one effect.

    ``done``: it was made (``provider_ref`` names it). ``failed``: the system refused it
    and nothing was made (``code``, ``reason`` are its words, redacted). ``unknown``: no
    answer that settles it (retries spent, or a lookup that cannot tell): the claim stays
    pending.
    """

    state: State
    provider_ref: str = ""
    code: str = ""
    reason: str = ""
    amount_cents: int | None = None
    calls: int = 0


class Retry(Exception):
    """A failure after which the same request, under the same key, may be sent again."""

    def __init__(self, reason: str, *, after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.after = after


def with_retries(
    attempt: Callable[[], Outcome],
    *,
    budget: config.Budget | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Call ``attempt`` until it returns, at most ``budget.attempts`` times within ``budget.seconds``.

    ``attempt`` raises ``Retry`` for an answer that leaves the effect undecided but safe to
    ask again under the same key (a 429, a 5xx, a lost connection); the wait is the
    system's ``Retry-After`` when it gives one, else 0.5 s doubling (``deskhand.infra.retry.EFFECT``,
    whose attempts and seconds ``budget`` sets). When the budget runs out the outcome is
    ``unknown``: the claim stays pending, and nothing is ever sent under a new key.
    """
    limits = budget or config.budget()
    policy = dataclasses.replace(
        retry.EFFECT, max_attempts=limits.attempts, budget_seconds=limits.seconds
    )
    calls = 0

    def once() -> Outcome:
        nonlocal calls
        calls += 1
        return dataclasses.replace(attempt(), calls=calls)

    def gave_up(last: BaseException, made: int) -> Outcome:
        reason = last.reason if isinstance(last, Retry) else str(last)
        return Outcome(
            "unknown", reason=f"no settling answer after {made} call(s): {reason}", calls=made
        )

    return retry.retry_call(
        once,
        policy,
        transient=lambda exc: isinstance(exc, Retry),
        named_wait=lambda exc: exc.after if isinstance(exc, Retry) else None,
        gave_up=gave_up,
        sleep=sleep,
        clock=clock,
    )


class Adapter(Protocol):
    name: str

    def prepare(self, ctx: ToolContext, args: dict[str, Any], entry: LedgerEntry) -> None: ...

    def perform(self, entry: LedgerEntry) -> Outcome: ...

    def find(self, entry: LedgerEntry) -> Outcome: ...

    def may_resend(self, entry: LedgerEntry) -> bool: ...

    def record(self, entry: LedgerEntry, outcome: Outcome) -> tuple[str, bool]: ...
