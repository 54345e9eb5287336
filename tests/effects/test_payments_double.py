"""The Stripe double behaves as Stripe documents, and the adapter reads it right through the SDK.

Every request here is sent by the official ``stripe`` SDK (``agent.effects.payments``), so
the double is held to what the SDK really puts on the wire (form-encoded ``/v1``, the
pinned ``Stripe-Version``, a bearer key, our ``Idempotency-Key``), and each behaviour
Deskhand relies on or defends against is pinned to Stripe's documented answer:
idempotent replay, a key reused with other parameters, a key in use, key expiry,
validation that stores nothing, declines, amounts above what is left, 429, 5xx, slow and
dropped answers, a wrong key whose echo never reaches Deskhand's words, and the list's
pages and filters.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import pytest
import stripe

from agent.effects import config
from agent.effects.payments import (
    API_VERSION,
    SPENT,
    create_refund,
    error_outcome,
    idempotency_key,
    list_refunds,
    refund_known,
    refund_with_retries,
    stripe_client,
)
from tests.support.payments_api import PaymentsApi

INTENT = "pi_test_1042"
CHARGE_OF_INTENT = "ch_test_1042"


@pytest.fixture
def api():
    double = PaymentsApi().start()
    double.charge(INTENT, 4800)
    yield double
    double.stop()


def cfg(
    api: PaymentsApi, *, secret: str | None = None, timeout: float = 5.0
) -> config.PaymentsConfig:
    return config.PaymentsConfig(
        base_url=api.url,
        api_key=secret or api.api_key,
        key_window_seconds=86_400,
        key_margin_seconds=3_600,
        timeout_seconds=timeout,
    )


def budget(attempts: int = 4, seconds: float = 10.0) -> config.Budget:
    return config.Budget(attempts=attempts, seconds=seconds)


def refund(
    api: PaymentsApi,
    key: str,
    amount: int = 3800,
    payment: str = INTENT,
    *,
    limits: config.Budget | None = None,
    **kw,
):
    """One refund the way the adapter makes it: retries by the SDK and by us, one budget."""
    return refund_with_retries(
        cfg(api, **kw),
        key=key,
        payment_reference=payment,
        amount_cents=amount,
        metadata={"deskhand_ledger_key": key},
        budget=limits or budget(),
    )


def posts(api: PaymentsApi):
    return [r for r in api.requests if r.method == "POST"]


def raw_post(api: PaymentsApi, form: str, *, key: str, headers: dict[str, str] | None = None):
    """A request the SDK would never send, to see the double refuse it as Stripe does."""
    request = urllib.request.Request(
        api.url + "/v1/refunds",
        data=form.encode(),
        headers={
            "Authorization": f"Bearer {api.api_key}",
            "Idempotency-Key": key,
            "Stripe-Version": API_VERSION,
            "Content-Type": "application/x-www-form-urlencoded",
            **(headers or {}),
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_pinned_api_version_is_the_one_the_sdk_is_written_for():
    # The SDK's typed objects follow the version it ships with: upgrading the SDK to a new
    # API version must move our pin (and the double) deliberately, with this test.
    assert stripe.api_version == API_VERSION


def test_the_sdk_sends_form_encoded_v1_with_the_pinned_version_the_bearer_key_and_our_key(api):
    outcome = refund(api, "k-wire")
    assert outcome.state == "done" and outcome.calls == 1
    [post] = posts(api)
    assert post.path == "/v1/refunds"
    assert post.headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert post.headers["Stripe-Version"] == API_VERSION
    assert post.headers["Authorization"] == f"Bearer {api.api_key}"
    assert post.headers["Idempotency-Key"] == "k-wire"
    assert sorted(post.form) == sorted(
        [
            ("payment_intent", INTENT),
            ("amount", "3800"),
            ("reason", "requested_by_customer"),
            ("metadata[deskhand_ledger_key]", "k-wire"),
        ]
    )
    [made] = api.refunds
    assert (made["payment_intent"], made["charge"]) == (INTENT, CHARGE_OF_INTENT)


def test_the_same_key_with_the_same_parameters_returns_the_first_refund(api):
    first, again = refund(api, "k1"), refund(api, "k1")
    assert first.state == again.state == "done"
    assert again.provider_ref == first.provider_ref
    assert [p.replayed for p in posts(api)] == [False, True]
    assert len(api.refunds) == 1 and api.refunded_cents(INTENT) == 3800


def test_the_same_key_with_another_amount_is_a_400_idempotency_error(api):
    refund(api, "k1", 3800)
    client = stripe_client(cfg(api))
    with pytest.raises(stripe.IdempotencyError) as raised:
        create_refund(client, key="k1", payment_reference=INTENT, amount_cents=1900, metadata={})
    assert raised.value.http_status == 400
    assert raised.value.json_body["error"]["type"] == "idempotency_error"
    outcome = error_outcome(raised.value)
    assert outcome.state == "failed" and outcome.code == "idempotency_error"
    assert "same parameters" in outcome.reason
    assert len(api.refunds) == 1


def test_a_key_in_use_is_a_409_that_the_sdk_retries_into_the_replay(api):
    api.slow(1.0)
    first = threading.Thread(target=refund, args=(api, "k-busy"))
    first.start()
    deadline = time.monotonic() + 5
    while not api._in_progress and time.monotonic() < deadline:
        time.sleep(0.01)
    second = refund(api, "k-busy")
    first.join()
    statuses = [p.status for p in posts(api)]
    assert 409 in statuses  # the documented lock error while the first was in progress
    assert second.state == "done" and posts(api)[-1].replayed
    assert len(api.refunds) == 1


def test_a_key_is_forgotten_after_the_window_and_then_refunds_again(api):
    now = [1_000_000.0]
    api.clock = lambda: now[0]
    api.key_window_seconds = 60
    refund(api, "k1", 1000)
    now[0] += 61
    second = refund(api, "k1", 1000)
    # The hazard Deskhand guards against: past the window the "same" request pays twice.
    assert second.state == "done" and not posts(api)[-1].replayed
    assert len(api.refunds) == 2


def test_an_unknown_parameter_is_refused_as_stripe_words_it_and_stores_nothing_under_the_key(api):
    status, body = raw_post(api, f"payment_intent={INTENT}&amount=100&colour=red", key="k-v")
    assert status == 400
    assert body["error"] == {
        "type": "invalid_request_error",
        "code": "parameter_unknown",
        "param": "colour",
        "message": "Received unknown parameter: colour",
        "doc_url": "https://docs.stripe.com/error-codes/parameter-unknown",
    }
    # Validation stores no result: the same key with a valid request goes through.
    assert raw_post(api, f"payment_intent={INTENT}&amount=100", key="k-v")[0] == 200
    assert len(api.refunds) == 1


@pytest.mark.parametrize(
    ("form", "code"),
    [
        ("amount=100", "parameter_missing"),
        (f"payment_intent={INTENT}&amount=ten", "parameter_invalid_integer"),
        (f"payment_intent={INTENT}&reason=because", "parameter_invalid"),
        (f"payment_intent={INTENT}&metadata=flat", "parameter_invalid"),
    ],
    ids=["no-payment", "amount-not-an-integer", "unknown-reason", "metadata-not-a-hash"],
)
def test_a_malformed_create_is_a_400_with_stripes_code(api, form, code):
    status, body = raw_post(api, form, key="k-bad")
    assert (status, body["error"]["code"]) == (400, code)
    assert api.refunds == []


def test_a_version_it_does_not_speak_and_a_json_body_are_refused(api):
    status, body = raw_post(api, "amount=1", key="k", headers={"Stripe-Version": "2019-02-19"})
    assert status == 400 and "Invalid Stripe API version" in body["error"]["message"]
    status, body = raw_post(
        api, json.dumps({"amount": 1}), key="k", headers={"Content-Type": "application/json"}
    )
    assert status == 400 and "x-www-form-urlencoded" in body["error"]["message"]
    assert api.refunds == []


def test_a_refund_above_what_is_left_is_amount_too_large_in_stripes_words(api):
    api.refund_directly(INTENT, 4000)
    outcome = refund(api, "k-big", 3800)
    assert outcome.state == "failed" and outcome.code == "amount_too_large"
    assert outcome.reason == (
        "Refund amount ($38.00) is greater than unrefunded amount on charge ($8.00)"
    )
    assert outcome.calls == 1 and len(api.refunds) == 1


@pytest.mark.parametrize(
    ("setup", "code"),
    [
        (lambda api: api.charge(INTENT, 4800, disputed=True), "charge_disputed"),
        (lambda api: api.refund_directly(INTENT, 4800), "charge_already_refunded"),
        (lambda api: setattr(api, "balance_cents", 100), "balance_insufficient"),
        (lambda api: api.decline("expired_or_canceled_card"), "expired_or_canceled_card"),
    ],
    ids=["disputed", "already-refunded", "insufficient-funds", "scripted"],
)
def test_a_decline_is_a_failed_outcome_with_stripes_reason_stored_under_the_key(api, setup, code):
    setup(api)
    before = len(api.refunds)
    outcome = refund(api, "k-decline")
    assert outcome.state == "failed" and outcome.code == code and outcome.reason
    assert outcome.calls == 1  # a decline is an answer: neither the SDK nor we retry it
    # ...and it is the key's stored answer: asking again is answered the same, still no refund.
    assert refund(api, "k-decline").code == code
    assert posts(api)[-1].replayed
    assert len(api.refunds) == before


def test_an_unknown_payment_is_resource_missing(api):
    outcome = refund(api, "k-missing", payment="pi_nobody")
    assert (outcome.state, outcome.code) == ("failed", "resource_missing")
    assert "No such payment_intent: 'pi_nobody'" in outcome.reason


def test_a_dropped_connection_after_the_refund_is_retried_by_the_sdk_and_pays_once(api):
    api.lose_response()
    outcome = refund(api, "k-lost")
    assert outcome.state == "done" and outcome.provider_ref == api.refunds[0]["id"]
    # Two requests, both sent by one call of ours: the SDK retried under the same key.
    assert outcome.calls == 2
    assert [(p.headers["Idempotency-Key"], p.replayed) for p in posts(api)] == [
        ("k-lost", False),
        ("k-lost", True),
    ]
    assert len(api.refunds) == 1


def test_a_500_is_retried_by_the_sdk_under_the_same_key_and_pays_once(api):
    api.server_error(times=2)
    outcome = refund(api, "k500")
    assert outcome.state == "done" and outcome.calls == 3
    assert [p.status for p in posts(api)] == [500, 500, 200]
    assert len(api.refunds) == 1


def test_a_429_is_retried_by_us_after_its_retry_after_and_not_by_the_sdk(api):
    api.rate_limited(retry_after=1.0)
    started = time.monotonic()
    outcome = refund(api, "k429")
    assert outcome.state == "done" and outcome.calls == 2
    assert time.monotonic() - started >= 1.0
    assert [p.status for p in posts(api)] == [429, 200]
    assert {p.headers["Idempotency-Key"] for p in posts(api)} == {"k429"}


def test_retries_by_the_sdk_and_by_us_together_never_pass_the_attempts(api):
    api.server_error(times=50)
    outcome = refund(api, "kdown", limits=budget(attempts=3))
    # Not 3 calls of ours, each sent up to 3 times by the SDK: one budget for both loops.
    assert outcome.state == "unknown" and outcome.calls == 3
    assert len(posts(api)) == 3 and api.refunds == []
    api.reset()
    api.charge(INTENT, 4800)
    api.rate_limited(retry_after=0.1, times=50)
    outcome = refund(api, "k-429s", limits=budget(attempts=3))
    assert outcome.state == "unknown" and len(posts(api)) == 3


def test_a_slow_answer_past_the_timeout_is_retried_and_pays_once(api):
    api.slow(1.5)
    outcome = refund(api, "kslow", timeout=0.5, limits=budget(6, 10))
    assert outcome.state == "done"
    assert len(api.refunds) == 1
    assert posts(api)[-1].status == 200 and posts(api)[-1].replayed


def test_a_provider_nobody_answers_for_leaves_the_outcome_unknown(api):
    dead = cfg(api)
    api.stop()
    outcome = refund_with_retries(
        dead,
        key="knobody",
        payment_reference=INTENT,
        amount_cents=1,
        metadata={},
        budget=budget(attempts=2, seconds=5),
    )
    assert outcome.state == "unknown" and outcome.calls == 2


def test_past_the_budget_no_request_leaves(api):
    api.server_error(times=50)
    outcome = refund(api, "k-time", limits=budget(attempts=10, seconds=0.2))
    # The SDK's first retry would start after its 0.5 s wait, past the 0.2 s budget: the
    # HTTP client refuses it, and the SDK must not retry that refusal.
    assert (outcome.state, outcome.calls, outcome.reason) == ("unknown", 1, SPENT)
    assert len(posts(api)) == 1


def test_a_wrong_key_is_refused_and_the_echoed_key_never_reaches_our_words(api, monkeypatch):
    wrong = "sk_test_WRONGkey0000000000000000001"
    monkeypatch.setenv("DESKHAND_PAYMENTS_API_KEY", wrong)
    outcome = refund(api, "kauth", secret=wrong)
    assert api.requests[0].status == 401
    assert outcome.state == "failed" and outcome.calls == 1
    assert wrong not in outcome.reason and "[redacted]" in outcome.reason
    assert api.refunds == []


def test_a_legacy_charge_is_refunded_by_charge(api):
    api.charge("ch_legacy_1", 2000)
    outcome = refund(api, "k-legacy", 500, payment="ch_legacy_1")
    assert outcome.state == "done"
    assert ("charge", "ch_legacy_1") in posts(api)[0].form
    assert api.refunds[0]["payment_intent"] is None


def test_the_list_pages_and_filters_by_payment_intent_charge_and_time(api):
    now = [2_000_000.0]
    api.clock = lambda: now[0]
    api.charge("pi_other", 10_000)
    for i in range(150):
        now[0] += 1
        api.refund_directly("pi_other", 10, n=str(i))
    api.refund_directly(INTENT, 100)
    client = stripe_client(cfg(api))
    assert len(list(list_refunds(client, payment_reference="pi_other"))) == 150
    assert len(list(list_refunds(client, payment_reference=CHARGE_OF_INTENT))) == 1
    assert len(list(list_refunds(client, since=int(now[0]) - 9))) == 11
    pages = [p for p in api.requests if p.method == "GET"]
    assert len(pages) == 4  # two pages (100 + 50) on pi_other, one for the charge, one since
    assert refund_known(client, api.refunds[0]["id"]) is True
    assert refund_known(client, "re_missing") is False


def test_an_unknown_list_parameter_is_refused(api):
    request = urllib.request.Request(
        api.url + "/v1/refunds?colour=red",
        headers={"Authorization": f"Bearer {api.api_key}", "Stripe-Version": API_VERSION},
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, timeout=5)
    assert raised.value.code == 400
    assert json.loads(raised.value.read())["error"]["code"] == "parameter_unknown"


def test_the_idempotency_key_is_the_ledger_key_unless_it_cannot_travel_in_a_header():
    safe = "9b1c0b9e-6a43-4b8e-9d0e-0f4e7f3c9a11:toolu_01ABC:0123456789abcdef"
    assert idempotency_key(safe) == safe
    hostile = "run:toolu_\r\nX-Injected: 1:abc"
    derived = idempotency_key(hostile)
    assert derived.startswith("dh-") and "\n" not in derived and derived == idempotency_key(hostile)
    assert idempotency_key("x" * 300) != idempotency_key("x" * 301)
