"""Every retry is one of the named policies in ``deskhand.infra.retry``; no library retries on top."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from deskhand.infra import retry

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("agent", "approvals", "deskhand")


def product_sources() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text()
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        if "migrations" not in path.parts
    }


def test_only_the_policy_module_uses_the_retry_library() -> None:
    users = [
        p
        for p, text in product_sources().items()
        if re.search(r"^\s*(from|import) tenacity", text, re.M)
    ]
    assert users == ["deskhand/infra/retry.py"]


def test_dbos_retries_a_step_only_through_a_named_policy() -> None:
    engine = {
        p: t
        for p, t in product_sources().items()
        if p.startswith(("deskhand/engine/", "deskhand/infra/dbos/"))
    }
    spelled = [p for p, text in engine.items() if re.search(r"max_attempts|interval_seconds", text)]
    assert spelled == []


def test_the_sdk_never_retries_under_the_model_policy() -> None:
    clients = [
        (p, m.group(0))
        for p, text in product_sources().items()
        for m in re.finditer(r"anthropic\.Anthropic\([^)]*\)", text)
    ]
    assert clients, "the Anthropic client is built somewhere"
    assert all("max_retries=0" in call for _, call in clients), clients


def test_an_elapsed_budget_counts_the_calls_and_gives_up_with_an_answer() -> None:
    now = [0.0]
    slept: list[float] = []

    def call() -> str:
        now[0] += 3.0  # each call takes 3 s
        raise TimeoutError("slow")

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    policy = retry.RetryPolicy(
        max_attempts=10,
        base_delay=1.0,
        max_delay=8.0,
        budget_seconds=10.0,
        jitter=False,
        elapsed=True,
    )
    answer = retry.retry_call(
        call,
        policy,
        transient=lambda exc: isinstance(exc, TimeoutError),
        gave_up=lambda exc, calls: f"{calls} calls: {exc}",
        sleep=sleep,
        clock=lambda: now[0],
    )
    # 3 s call, 1 s wait, 3 s call (7 s); a 2 s wait would end at 9 s: allowed; the next
    # call ends at 12 s and a 4 s wait would pass 10 s.
    assert (answer, slept) == ("3 calls: slow", [1.0, 2.0])


def test_an_error_that_is_not_transient_is_raised_at_once() -> None:
    calls = []

    def call() -> None:
        calls.append(1)
        raise ValueError("no")

    with pytest.raises(ValueError):
        retry.retry_call(call, retry.MODEL, transient=lambda exc: False, sleep=lambda s: None)
    assert calls == [1]


def test_the_outbox_schedule_doubles_from_five_seconds_to_an_hour() -> None:
    assert [retry.backoff(n).total_seconds() for n in (1, 2, 3, 10, 50)] == [
        5.0,
        10.0,
        20.0,
        2560.0,
        3600.0,
    ]


def test_the_stripe_sdk_retries_only_what_the_effect_policy_leaves_it() -> None:
    # The one SDK allowed to retry on its own (under our Idempotency-Key) gets attempts - 1
    # retries, and every request it sends is drawn from the effect's one RequestSpend.
    payments = product_sources()["agent/effects/payments.py"]
    assert "max_network_retries=retry.sdk_network_retries(" in payments
    assert "self.spend.take()" in payments
    assert retry.sdk_network_retries(retry.EFFECT) == retry.EFFECT.max_attempts - 1
    spelled = [
        p for p, text in product_sources().items() if re.search(r"max_network_retries\s*=", text)
    ]
    assert spelled == ["agent/effects/payments.py"]


def test_a_request_spend_says_no_after_the_attempts_or_the_seconds() -> None:
    now = [0.0]
    spend = retry.RequestSpend(
        retry.RetryPolicy(max_attempts=3, budget_seconds=5.0, jitter=False),
        clock=lambda: now[0],
    )
    assert [spend.take(), spend.take(), spend.take(), spend.take()] == [True, True, True, False]
    assert spend.sent == 3
    late = retry.RequestSpend(
        retry.RetryPolicy(max_attempts=9, budget_seconds=5.0), clock=lambda: now[0]
    )
    assert late.take()
    now[0] = 5.5
    assert late.take() is False and late.sent == 1
