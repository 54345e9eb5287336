"""Every retry policy in one module: what is tried again, how often, how far apart, for how long.

Seven policies, each named here, so how often anything is tried is read in one place:

``MODEL`` — one model call (``agent.providers.anthropic``)
    4 attempts; 1 s doubling, capped at 30 s, jittered (half to full); a ``retry-after``
    is honoured, capped at 30 s too; at most 90 s of waiting. Transient: HTTP 429, 500,
    502, 503, 504, 529, connection errors, timeouts; anything else fails at once.
``EFFECT`` — one effect at another system, always under the same key (``agent.effects``)
    4 attempts; 0.5 s doubling, capped at 8 s; a ``Retry-After`` is honoured as given;
    at most 20 s from the first call, the calls' own time included. Transient: what the
    adapter raises ``Retry`` for (a 429, an SMTP 4xx, a lost connection to the mail server).
    At Stripe most of these retries are the SDK's own (below), counted against the same
    attempts and the same seconds by one ``RequestSpend``.
``SHOPIFY`` — one call to a store's Shopify Admin API (``deskhand.domain.store.shopify``)
    8 attempts; a ``THROTTLED`` answer waits what its ``extensions.cost`` names (the points
    asked less those available, over the restore rate), uncapped; otherwise 0.25 s doubling,
    capped at 4 s; at most 20 s from the first call, the calls' own time included (a caller
    with an effect's budget passes its own). Transient: ``THROTTLED`` (nothing ran), and for
    reads and the idempotent refund only, a lost connection, a 429 or a 5xx.
``STEP`` — a durable step that only reads or upserts (``agent.runtime.RETRYABLE_STEPS``)
    3 attempts; 1 s then 2 s (DBOS's ``interval_seconds`` and ``backoff_rate``).
    Transient: any exception (in practice the database's, while Postgres restarts).
``INTAKE_STEP`` — the inbound mail workflow's two steps (``deskhand.engine.intake``)
    5 attempts; 1, 2, 4, 8 s. Transient: any exception.
``RECONCILE_STEP`` — one merchant's reconciliation pass (``deskhand.engine.schedules``)
    3 attempts; 1 s then 2 s. Transient: any exception.
``DELIVERY`` — an outbox row: a staff notification (``approvals.outbox``) or a reply relayed
    to a help desk (``deskhand.domain.apikeys.relay``)
    Never given up; 5 s doubling, capped at an hour. Transient: any failure.

``MODEL`` and ``EFFECT`` run in the process, with tenacity underneath (``retry_call``); the
three step policies are handed to DBOS, which retries the step (``dbos_step``); ``DELIVERY``
is a schedule, not a loop: the row waits for its ``next_attempt_at`` (``backoff``).

**No library retries on top of ours.** The Anthropic SDK is built with ``max_retries=0``
(its default, 2, would make every attempt here three requests); mail speaks ``smtplib``,
which does not retry, and Shopify's client is httpx, whose transport does not retry unless
told. The Stripe SDK is the one exception, on purpose: its retries send
the *same* ``Idempotency-Key`` (ours, the ledger key) and it knows which of Stripe's
answers are safe to repeat (a lost connection, a 409 while the key is in use, a 5xx, and
whatever Stripe marks ``Stripe-Should-Retry``). So the payments adapter lets the SDK retry
(``sdk_network_retries(EFFECT)`` = attempts - 1) and does not retry those itself; its own
loop retries only a 429, which the SDK leaves alone. Both loops draw on one
``RequestSpend``, which the SDK's HTTP client consults before every request it sends
(``agent.effects.payments``): once ``EFFECT.max_attempts`` requests are sent or its
``budget_seconds`` have passed, no further request leaves, whichever loop asks. The SDK
waits 0.5 s doubling, jittered, at most 5 s between its own retries (its constants, not
ours). So a model call sends at most ``MODEL.max_attempts`` requests, and an effect at
most ``EFFECT.max_attempts``, per run of its step. Reads at Stripe (a lookup, a
reconciliation pass) are not effects: each request there may be retried by the SDK
``sdk_network_retries(EFFECT)`` times, and a reconciliation pass is a ``RECONCILE_STEP``. A model step is itself a ``STEP`` (a failure *around* the call — writing its step
row — re-runs it), so the worst case is 3 times 4, 12 requests for one turn, each counted on
the step row; an irreversible tool step is never retried by DBOS (a person approved one
attempt). The workflow may also sleep a named rate-limit wait durably and call again
(``agent.run.turns``): those calls count against the same ``MODEL`` attempts and budget.

Attempts and budgets come from the environment where a deployment tunes them:
``DESKHAND_MODEL_ATTEMPTS`` and ``DESKHAND_MODEL_BACKOFF`` (settings' ``ANTHROPIC_RETRY``),
``DESKHAND_EFFECT_ATTEMPTS`` and ``DESKHAND_EFFECT_BUDGET_SECONDS`` (``agent.effects.config``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import sys
import time
from collections.abc import Callable
from typing import TypedDict

import tenacity


@dataclasses.dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How one kind of call is tried again. The defaults are ``MODEL``'s (the policy a
    deployment tunes through settings); every other policy spells out all its values."""

    max_attempts: int = 4  # calls in all, the first included
    base_delay: float = 1.0  # seconds before the first retry; doubled each time
    max_delay: float = 30.0  # cap on one backoff wait
    budget_seconds: float = 90.0  # cap on the waiting for one call (see ``elapsed``)
    jitter: bool = True  # each backoff drawn from half to all of it, so callers spread out
    elapsed: bool = False  # the budget counts the calls' own time too, from the first call
    cap_named_wait: bool = True  # a wait the other side names is capped at ``max_delay``

    def backoff(self, failures: int) -> float:
        """Seconds to wait after the ``failures``-th failure, before jitter."""
        return min(self.max_delay, self.base_delay * 2 ** max(failures - 1, 0))


NEVER = sys.maxsize  # attempts of a policy that never gives up

MODEL = RetryPolicy()
MODEL_TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504, 529})
EFFECT = RetryPolicy(
    max_attempts=4,
    base_delay=0.5,
    max_delay=8.0,
    budget_seconds=20.0,
    jitter=False,
    elapsed=True,
    cap_named_wait=False,
)
SHOPIFY = RetryPolicy(
    max_attempts=8,
    base_delay=0.25,
    max_delay=4.0,
    budget_seconds=20.0,
    jitter=False,
    elapsed=True,
    cap_named_wait=False,
)
# DBOS waits ``interval_seconds * backoff_rate ** i`` (i from 0); max_delay is the last wait.
STEP = RetryPolicy(max_attempts=3, base_delay=1.0, max_delay=2.0, budget_seconds=3.0, jitter=False)
INTAKE_STEP = dataclasses.replace(STEP, max_attempts=5, max_delay=8.0, budget_seconds=15.0)
RECONCILE_STEP = STEP
DELIVERY = RetryPolicy(
    max_attempts=NEVER,
    base_delay=5.0,
    max_delay=3600.0,
    budget_seconds=float("inf"),
    jitter=False,
)


def sdk_network_retries(policy: RetryPolicy) -> int:
    """The retries an SDK that retries on its own may make, so that with its first request
    it sends at most ``policy.max_attempts`` (Stripe's ``max_network_retries``)."""
    return max(0, policy.max_attempts - 1)


@dataclasses.dataclass
class RequestSpend:
    """The requests one effect has sent, counted against ``policy`` whichever loop retries.

    One effect may be retried by two loops (an SDK's own and ``retry_call`` around it); each
    request either sends asks ``take()`` first, so together they never send more than
    ``policy.max_attempts`` requests, nor start one after ``policy.budget_seconds``.
    """

    policy: RetryPolicy
    clock: Callable[[], float] = time.monotonic
    sent: int = 0
    started: float | None = None

    def take(self) -> bool:
        """Count one more request, or say no (``False``) once the policy is spent."""
        now = self.clock()
        if self.started is None:
            self.started = now
        if self.sent >= self.policy.max_attempts or now - self.started > self.policy.budget_seconds:
            return False
        self.sent += 1
        return True


def backoff(attempts: int) -> dt.timedelta:
    """How long an outbox row waits after its ``attempts``-th failure (``DELIVERY``)."""
    return dt.timedelta(seconds=DELIVERY.backoff(attempts))


class StepRetry(TypedDict):
    """The retry part of DBOS's step options (``dbos.StepOptions``, ``@DBOS.step``)."""

    retries_allowed: bool
    max_attempts: int
    interval_seconds: float
    backoff_rate: float


def dbos_step(policy: RetryPolicy) -> StepRetry:
    """The step options that make DBOS retry a step as ``policy`` says."""
    return {
        "retries_allowed": True,
        "max_attempts": policy.max_attempts,
        "interval_seconds": policy.base_delay,
        "backoff_rate": 2.0,
    }


def _error(state: tenacity.RetryCallState) -> BaseException:
    """The exception the attempt just raised (tenacity asks the wait and stop only then)."""
    error = state.outcome.exception() if state.outcome is not None else None
    assert error is not None
    return error


def _no_named_wait(exc: BaseException) -> float | None:
    return None


def retry_call[T](
    fn: Callable[[], T],
    policy: RetryPolicy,
    *,
    transient: Callable[[BaseException], bool],
    named_wait: Callable[[BaseException], float | None] = _no_named_wait,
    gave_up: Callable[[BaseException, int], T] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    jitter: Callable[[float], float] = lambda seconds: seconds,
) -> T:
    """Call ``fn`` until it returns, as ``policy`` allows.

    An exception ``transient`` says no to is raised at once. After a transient one the wait
    is what ``named_wait`` reads from it (a ``retry-after``), else the policy's backoff
    (through ``jitter`` if the policy jitters); the policy stops when its attempts are spent
    or the next wait would pass its budget. Then ``gave_up(last error, calls)`` is the
    answer, or, without it, the last error is raised as it was.
    """
    start = clock()

    def wait(state: tenacity.RetryCallState) -> float:
        named = named_wait(_error(state))
        if named is not None:
            return min(named, policy.max_delay) if policy.cap_named_wait else named
        pause = policy.backoff(state.attempt_number)
        return jitter(pause) if policy.jitter else pause

    def stop(state: tenacity.RetryCallState) -> bool:
        if state.attempt_number >= policy.max_attempts:
            return True
        if policy.elapsed:
            return clock() + state.upcoming_sleep > start + policy.budget_seconds
        return state.idle_for + state.upcoming_sleep > policy.budget_seconds

    def give_up(state: tenacity.RetryCallState) -> T:
        assert gave_up is not None
        return gave_up(_error(state), state.attempt_number)

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(transient),
        wait=wait,
        stop=stop,
        sleep=sleep,
        reraise=True,
        retry_error_callback=give_up if gave_up is not None else None,
    )
    return retrying(fn)
