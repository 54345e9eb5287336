"""The payments double behaves like a provider, and the payments client reads it right.

Each behaviour Deskhand relies on (or defends against) is proved here on the wire, with
the real client (``agent.effects.payments``): idempotent replay, a key reused with other
parameters, key expiry, declines, 429 with ``Retry-After``, 500, slow and lost answers,
and a wrong key whose echo never reaches Deskhand's words.
"""

from __future__ import annotations

import time

import pytest

from agent.effects import config
from agent.effects.base import Retry, with_retries
from agent.effects.payments import PaymentsClient, idempotency_key, refund_outcome
from tests.support.payments_api import PaymentsApi

CHARGE = "ch_test_1042"


@pytest.fixture
def api():
    double = PaymentsApi().start()
    double.charge(CHARGE, 4800)
    yield double
    double.stop()


def client(api: PaymentsApi, *, key: str | None = None, timeout: float = 5.0) -> PaymentsClient:
    return PaymentsClient(
        config.PaymentsConfig(
            base_url=api.url,
            api_key=key or api.api_key,
            key_window_seconds=86_400,
            key_margin_seconds=3_600,
            timeout_seconds=timeout,
        )
    )


def refund(c: PaymentsClient, key: str, amount: int = 3800, charge: str = CHARGE):
    return c.create_refund(
        key=key,
        charge=charge,
        amount_cents=amount,
        currency="USD",
        metadata={"deskhand_ledger_key": key},
    )


def budget(attempts: int = 4, seconds: float = 10.0) -> config.Budget:
    return config.Budget(attempts=attempts, seconds=seconds)


def test_the_same_key_with_the_same_parameters_returns_the_first_refund(api):
    c = client(api)
    first, again = refund(c, "k1"), refund(c, "k1")
    assert first.status == again.status == 200
    assert again.body["id"] == first.body["id"]
    assert again.headers.get("idempotent-replayed") == "true"
    assert len(api.refunds) == 1 and api.refunded_cents(CHARGE) == 3800


def test_the_same_key_with_another_amount_is_refused_with_the_providers_error(api):
    c = client(api)
    refund(c, "k1", 3800)
    forged = refund(c, "k1", 1900)
    assert forged.status == 400
    outcome = refund_outcome(forged)
    assert outcome.state == "failed" and outcome.code == "idempotency_error"
    assert "same parameters" in outcome.reason
    assert len(api.refunds) == 1


def test_a_key_is_forgotten_after_the_window_and_then_refunds_again(api):
    now = [1_000_000.0]
    api.clock = lambda: now[0]
    api.key_window_seconds = 60
    c = client(api)
    refund(c, "k1", 1000)
    now[0] += 61
    second = refund(c, "k1", 1000)
    # The hazard Deskhand guards against: past the window the "same" request pays twice.
    assert second.status == 200 and second.headers.get("idempotent-replayed") is None
    assert len(api.refunds) == 2


@pytest.mark.parametrize(
    ("setup", "code"),
    [
        (lambda api: api.charge(CHARGE, 4800, disputed=True), "charge_disputed"),
        (lambda api: api.refund_directly(CHARGE, 4800), "charge_already_refunded"),
        (lambda api: setattr(api, "balance_cents", 100), "balance_insufficient"),
        (lambda api: api.decline("expired_or_canceled_card"), "expired_or_canceled_card"),
    ],
    ids=["disputed", "already-refunded", "insufficient-funds", "scripted"],
)
def test_a_decline_is_a_failed_outcome_with_the_providers_reason_and_no_refund(api, setup, code):
    setup(api)
    before = len(api.refunds)
    outcome = with_retries(
        lambda: refund_outcome(refund(client(api), "k-decline")), budget=budget()
    )
    assert outcome.state == "failed" and outcome.code == code and outcome.reason
    assert outcome.calls == 1  # a decline is an answer, never retried
    assert len(api.refunds) == before
    # ...and it is the key's stored answer: asking again is answered the same, still no refund.
    assert refund_outcome(refund(client(api), "k-decline")).code == code
    assert len(api.refunds) == before


def test_a_429_is_retried_after_its_retry_after_under_the_same_key(api):
    api.rate_limited(retry_after=1.0)
    started = time.monotonic()
    outcome = with_retries(lambda: refund_outcome(refund(client(api), "k429")), budget=budget())
    assert outcome.state == "done" and outcome.calls == 2
    assert time.monotonic() - started >= 1.0
    posts = [r for r in api.requests if r.method == "POST"]
    assert [r.status for r in posts] == [429, 200]
    assert {r.headers["Idempotency-Key"] for r in posts} == {"k429"}
    assert len(api.refunds) == 1


def test_a_500_is_retried_under_the_same_key_and_pays_once(api):
    api.server_error(times=2)
    outcome = with_retries(lambda: refund_outcome(refund(client(api), "k500")), budget=budget())
    assert outcome.state == "done" and outcome.calls == 3
    assert [r.status for r in api.requests] == [500, 500, 200]
    assert len(api.refunds) == 1


def test_a_lost_response_is_retried_and_answered_from_the_first_refund(api):
    api.lose_response()
    outcome = with_retries(lambda: refund_outcome(refund(client(api), "klost")), budget=budget())
    assert outcome.state == "done" and outcome.calls == 2
    assert api.requests[-1].replayed is True
    assert outcome.provider_ref == api.refunds[0]["id"]
    assert len(api.refunds) == 1


def test_a_slow_provider_past_the_timeout_is_retried_and_pays_once(api):
    api.slow(1.5)
    outcome = with_retries(
        lambda: refund_outcome(refund(client(api, timeout=0.5), "kslow")), budget=budget(6, 10)
    )
    assert outcome.state == "done"
    assert len(api.refunds) == 1
    # While the first request was still being processed, the same key was turned away (409).
    statuses = [r.status for r in api.requests]
    assert statuses[-1] == 200 and api.requests[-1].replayed


def test_a_slow_provider_within_the_timeout_is_just_slow(api):
    api.slow(0.3)
    outcome = with_retries(lambda: refund_outcome(refund(client(api), "kslow2")), budget=budget())
    assert outcome.state == "done" and outcome.calls == 1


def test_retries_stop_at_the_budget_and_leave_the_outcome_unknown(api):
    api.server_error(times=50)
    outcome = with_retries(
        lambda: refund_outcome(refund(client(api), "kdown")), budget=budget(attempts=3)
    )
    assert outcome.state == "unknown" and outcome.calls == 3
    assert "500" in outcome.reason
    assert len(api.refunds) == 0


def test_a_connection_refused_is_a_retry_not_an_answer(api):
    c = client(api)
    api.stop()
    with pytest.raises(Retry):
        refund(c, "knobody")


def test_a_wrong_key_is_refused_and_the_echoed_key_never_reaches_our_words(api, monkeypatch):
    wrong = "sk_test_WRONGkey0000000000000000001"
    monkeypatch.setenv("DESKHAND_PAYMENTS_API_KEY", wrong)
    reply = refund(client(api, key=wrong), "kauth")
    assert reply.status == 401 and wrong in reply.body["error"]["message"]  # the provider echoes it
    outcome = refund_outcome(reply)
    assert outcome.state == "failed"
    assert wrong not in outcome.reason and "[redacted]" in outcome.reason
    assert len(api.refunds) == 0


def test_the_list_pages_and_filters_by_charge_and_time(api):
    now = [2_000_000.0]
    api.clock = lambda: now[0]
    api.charge("ch_other", 10_000)
    for i in range(150):
        now[0] += 1
        api.refund_directly("ch_other", 10, n=str(i))
    api.refund_directly(CHARGE, 100)
    c = client(api)
    assert len(list(c.list_refunds(charge="ch_other"))) == 150
    assert len(list(c.list_refunds(created_gte=int(now[0]) - 9))) == 11
    assert c.get_refund("re_missing").status == 404


def test_the_idempotency_key_is_the_ledger_key_unless_it_cannot_travel_in_a_header():
    safe = "9b1c0b9e-6a43-4b8e-9d0e-0f4e7f3c9a11:toolu_01ABC:0123456789abcdef"
    assert idempotency_key(safe) == safe
    hostile = "run:toolu_\r\nX-Injected: 1:abc"
    derived = idempotency_key(hostile)
    assert derived.startswith("dh-") and "\n" not in derived and derived == idempotency_key(hostile)
    assert idempotency_key("x" * 300) != idempotency_key("x" * 301)
