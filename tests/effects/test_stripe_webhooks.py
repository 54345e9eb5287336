"""Stripe's refund webhooks: verified with the SDK per merchant, stored once, then compared.

Deliveries go through Django's test client to ``/inbound/stripe/<slug>/``, signed as Stripe
signs them (``tests.support.payments_api.signed``). What the ledger holds comes from real
refunds at the double through the payments adapter (``execute_irreversible``, as the
claim tests drive it); the processing is the workflow's own function, and one test runs
the whole way through the in-process DBOS executor.
"""

from __future__ import annotations

import datetime as dt
import json
import threading

import pytest
from django.db import close_old_connections
from django.test import Client

from agent.ledger.provider_events import payment_event_process
from agent.ledger.provider_reconciliation import reconcile_merchant
from agent.models import EffectFinding, PaymentEvent
from agent.models.ledger import LedgerEntry
from agent.record import faults
from agent.run.services import run_cancel
from deskhand.domain.desk.models import Merchant, Refund
from tests.durability.helpers import user
from tests.effects.test_claims import (  # noqa: F401  (quiet_sends: autouse)
    OWNER,
    Crash,
    approved_refund,
    crash_at,
    execute,
    quiet_sends,
)
from tests.support.payments_api import PaymentsApi, signed, webhook_event
from tests.support.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)

NW_SECRET = "whsec_northwind_test_0123456789abcdef"
LU_SECRET = "whsec_lumen_test_fedcba9876543210"
URL = "/inbound/stripe/northwind/"


@pytest.fixture(autouse=True)
def endpoint_secrets(monkeypatch) -> None:
    monkeypatch.setenv("DESKHAND_STRIPE_WEBHOOK_SECRET_NORTHWIND", NW_SECRET)
    monkeypatch.setenv("DESKHAND_STRIPE_WEBHOOK_SECRET_LUMEN", LU_SECRET)


def deliver(event: dict, *, secret: str = NW_SECRET, url: str = URL, signature: str | None = None):
    body = json.dumps(event).encode()
    return Client().post(
        url,
        data=body,
        content_type="application/json",
        headers={"Stripe-Signature": signature or signed(body, secret)},
    )


def made_refund(api: PaymentsApi) -> tuple[LedgerEntry, dict]:
    """NW-1042's $38.00 refund, made at the double through the adapter and recorded done."""
    run, call, approval = approved_refund(3800)
    assert execute(run, call, approval).ok
    [refund] = api.refunds
    return LedgerEntry.objects.get(tool="issue_refund"), refund


def test_a_bad_signature_is_a_401_and_nothing_is_stored(northwind_pays_at_the_provider):
    event = webhook_event("refund.updated", {"id": "re_x", "object": "refund", "status": "failed"})
    forged = deliver(event, secret="whsec_someone_else")
    assert forged.status_code == 401 and "nothing was stored" in forged.content.decode()
    assert deliver(event, signature="t=1,v1=00").status_code == 401
    # Lumen's own secret cannot speak for Northwind.
    assert deliver(event, secret=LU_SECRET).status_code == 401
    assert PaymentEvent.objects.count() == 0


def test_an_unknown_merchant_or_one_without_a_secret_is_a_404(
    northwind_pays_at_the_provider, monkeypatch
):
    event = webhook_event("refund.updated", {"id": "re_x", "object": "refund"})
    assert deliver(event, url="/inbound/stripe/nobody/").status_code == 404
    monkeypatch.delenv("DESKHAND_STRIPE_WEBHOOK_SECRET_LUMEN")
    assert deliver(event, secret=LU_SECRET, url="/inbound/stripe/lumen/").status_code == 404
    assert PaymentEvent.objects.count() == 0


@pytest.mark.parametrize("body", [b"not json", b"[]", b"null", b'"x"', b"{}", b'{"id": 5}'])
def test_a_signed_body_that_is_not_an_event_is_a_400(northwind_pays_at_the_provider, body):
    reply = Client().post(
        URL,
        data=body,
        content_type="application/json",
        headers={"Stripe-Signature": signed(body, NW_SECRET)},
    )
    assert reply.status_code == 400 and "nothing was stored" in reply.content.decode()
    assert PaymentEvent.objects.count() == 0


def test_an_event_delivered_five_times_at_once_is_stored_once(northwind_pays_at_the_provider):
    event = webhook_event(
        "refund.updated", {"id": "re_dup", "object": "refund", "status": "succeeded"}
    )
    answers: list[int] = []

    def send() -> None:
        try:
            answers.append(deliver(event).status_code)
        finally:
            close_old_connections()

    threads = [threading.Thread(target=send) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers == [200] * 5
    assert PaymentEvent.objects.filter(event_id=event["id"]).count() == 1
    assert deliver(event).content.decode().strip() == "Already stored."


def test_an_event_type_deskhand_does_not_read_is_answered_and_not_stored(
    northwind_pays_at_the_provider,
):
    reply = deliver(webhook_event("customer.created", {"id": "cus_1", "object": "customer"}))
    assert reply.status_code == 200 and PaymentEvent.objects.count() == 0


def test_refund_failed_on_a_recorded_refund_is_a_finding_and_nothing_is_reversed(
    northwind_pays_at_the_provider,
):
    api = northwind_pays_at_the_provider
    entry, refund = made_refund(api)
    failed = {**refund, "status": "failed", "failure_reason": "expired_or_canceled_card"}
    assert deliver(webhook_event("refund.failed", failed)).status_code == 200
    row = PaymentEvent.objects.get()
    # Stored first, with what processing needs and nothing more.
    assert row.status == "received"
    assert row.data["ledger_key"] == entry.key and row.data["status"] == "failed"

    outcome = payment_event_process(row.pk)

    assert outcome.startswith(f"reported: refund {refund['id']} failed at Stripe, ledger done")
    finding = EffectFinding.objects.get()
    assert (finding.kind, finding.provider_ref, finding.ledger_entry_id) == (
        "provider_failed",
        refund["id"],
        entry.pk,
    )
    assert "expired_or_canceled_card" in finding.detail and "Nothing was reversed" in finding.detail
    # The ledger and the refund stay as recorded: a person decides what happens next.
    entry.refresh_from_db()
    assert entry.state == "done" and Refund.objects.get().status == "succeeded"
    # Processing twice concludes the same, and writes no second finding.
    assert payment_event_process(row.pk) == outcome
    assert EffectFinding.objects.count() == 1


def test_refund_updated_that_agrees_with_the_ledger_changes_nothing(northwind_pays_at_the_provider):
    _entry, refund = made_refund(northwind_pays_at_the_provider)
    deliver(webhook_event("refund.updated", refund))
    outcome = payment_event_process(PaymentEvent.objects.get().pk)
    assert outcome == f"consistent: refund {refund['id']} succeeded, ledger done"
    assert EffectFinding.objects.count() == 0


def test_a_refund_deskhand_did_not_make_is_reported_like_reconciliation_reports_it(
    northwind_pays_at_the_provider,
):
    api = northwind_pays_at_the_provider
    outside = api.refund_directly("pi_northwind_nw_1042", 500)
    deliver(webhook_event("refund.updated", outside))
    payment_event_process(PaymentEvent.objects.get().pk)
    [finding] = EffectFinding.objects.all()
    assert (finding.kind, finding.provider_ref) == ("provider_only", outside["id"])
    # Reconciliation finds the same difference: the same row, not a second one.
    reconcile_merchant(Merchant.objects.get(slug="northwind").pk, now=finding.found_at)
    assert EffectFinding.objects.filter(provider_ref=outside["id"]).count() == 1


def test_charge_refunded_beyond_the_ledger_is_a_finding(northwind_pays_at_the_provider):
    api = northwind_pays_at_the_provider
    made_refund(api)
    api.refund_directly("pi_northwind_nw_1042", 700)
    charge = {
        "id": "ch_northwind_nw_1042",
        "object": "charge",
        "amount": 4800,
        "amount_refunded": 4500,
        "currency": "usd",
        "payment_intent": "pi_northwind_nw_1042",
        "billing_details": {"email": "dana.whitfield@example.com", "name": "Dana Whitfield"},
    }
    deliver(webhook_event("charge.refunded", charge))
    row = PaymentEvent.objects.get()
    assert "billing_details" not in row.data  # the customer's details are never stored
    assert payment_event_process(row.pk).startswith("reported: NW-1042 refunded more")
    finding = EffectFinding.objects.get()
    assert (finding.provider_amount_cents, finding.ledger_amount_cents) == (4500, 3800)


def test_an_event_whose_hand_on_was_lost_is_processed_by_reconciliation(
    northwind_pays_at_the_provider,
):
    _entry, refund = made_refund(northwind_pays_at_the_provider)
    deliver(webhook_event("refund.updated", refund))
    row = PaymentEvent.objects.get()
    counts = reconcile_merchant(row.merchant_id, now=row.received_at + dt.timedelta(minutes=2))
    row.refresh_from_db()
    assert counts["events"] == 1 and row.status == "processed"


def test_a_delivered_event_is_processed_by_its_workflow(
    dbos_executor, northwind_pays_at_the_provider
):
    _entry, refund = made_refund(northwind_pays_at_the_provider)
    deliver(webhook_event("refund.failed", {**refund, "status": "failed"}))
    row = PaymentEvent.objects.get()
    until(
        "the event's workflow processed it",
        lambda: PaymentEvent.objects.get(pk=row.pk).status == "processed",
        timeout=30,
    )
    assert EffectFinding.objects.get().kind == "provider_failed"


def pending_claim(api: PaymentsApi) -> tuple:
    """A refund Stripe made whose record here never committed: the claim is pending."""
    run, call, approval = approved_refund(3800)
    crash_at("after_provider")
    with pytest.raises(Crash):
        execute(run, call, approval)
    faults.clear()
    [made] = api.refunds
    return run, LedgerEntry.objects.get(tool="issue_refund"), made


def test_refund_updated_settles_the_pending_claim_of_a_run_that_stopped_acting(
    northwind_pays_at_the_provider,
):
    api = northwind_pays_at_the_provider
    run, entry, made = pending_claim(api)
    run_cancel(run=run, user=user(OWNER))
    deliver(webhook_event("refund.updated", made))

    outcome = payment_event_process(PaymentEvent.objects.get().pk)

    assert outcome == f"claim of refund {made['id']} settled by lookup: done"
    entry.refresh_from_db()
    assert (entry.state, entry.provider_ref) == ("done", made["id"])
    assert Refund.objects.get().status == "succeeded"
    assert [r.method for r in api.requests].count("POST") == 1  # looked up, never re-sent


def test_refund_failed_on_a_pending_claim_is_a_finding_and_the_claim_is_left_alone(
    northwind_pays_at_the_provider,
):
    api = northwind_pays_at_the_provider
    _run, entry, made = pending_claim(api)
    deliver(
        webhook_event("refund.failed", {**made, "status": "failed", "failure_reason": "unknown"})
    )

    outcome = payment_event_process(PaymentEvent.objects.get().pk)

    assert outcome == f"reported: refund {made['id']} failed at Stripe, ledger pending"
    assert EffectFinding.objects.get().kind == "provider_failed"
    entry.refresh_from_db()
    assert entry.state == "pending" and Refund.objects.get().status == "pending"
