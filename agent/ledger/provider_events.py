"""What Stripe tells us about refunds, stored once and then compared with the ledger.

The way in is the durable intake every webhook uses: the web view
(``deskhand.web.inbound.stripe``) verifies the delivery with the SDK against the secret of
the merchant its URL names, ``payment_event_received`` stores the event once per
(merchant, event id) — a redelivery is the same row — and hands it to the workflow
``deskhand.payment_event`` (``deskhand.engine.payment_events``), which calls
``payment_event_process``. An event whose hand-on was lost is processed by the next
reconciliation pass of its merchant (``process_waiting``).

Processing reports and confirms; it never reverses:

``refund.updated``, ``refund.failed``
    The refund is matched to its ledger entry by the ledger key in its metadata (else by
    its id). A refund Stripe says ``failed`` or ``canceled`` whose claim is pending or was
    recorded made is a finding (``provider_failed``): the ledger and the customer's money
    figures stay as they are until a person looks, because "failed" after "succeeded" at
    Stripe means the money came back to the merchant's balance and the customer must be
    told, not that a row should quietly change. A pending claim of a run that no longer
    acts is settled by lookup (``intents.resolve_stale``, the one door that records a
    claim). A refund with no entry, or one Stripe made where the ledger says it failed, is
    a ``provider_only`` finding — the same row reconciliation would write.
``charge.refunded``
    Stripe's refunded total on the payment against what the ledger holds moved or in flight
    there; more at Stripe is a ``provider_only`` finding.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from agent.effects import config
from agent.effects.payments import METADATA_KEY
from agent.ledger.findings import report
from agent.ledger.intents import lookup_grace, resolve_stale
from agent.models.effects import FindingKind, PaymentEvent, PaymentEventStatus
from agent.models.ledger import LedgerEntry, LedgerState
from deskhand.domain.desk.models import Merchant, Order, Refund
from deskhand.domain.desk.money import format_cents
from deskhand.infra.dbos import client as dbos_client

log = logging.getLogger(__name__)

EVENTS = ("charge.refunded", "refund.updated", "refund.failed")
_REFUND_FIELDS = ("id", "object", "status", "amount", "currency", "payment_intent", "charge")
_CHARGE_FIELDS = ("id", "object", "amount", "amount_refunded", "currency", "payment_intent")


def _kept(event: dict[str, Any]) -> dict[str, Any]:
    """What processing needs of the event's object, and nothing else (no billing details)."""
    obj = (event.get("data") or {}).get("object") or {}
    if event.get("type") == "charge.refunded":
        return {k: obj.get(k) for k in _CHARGE_FIELDS}
    kept = {k: obj.get(k) for k in _REFUND_FIELDS}
    kept["failure_reason"] = obj.get("failure_reason")
    meta = obj.get("metadata") or {}
    kept["ledger_key"] = meta.get(METADATA_KEY) if isinstance(meta, dict) else None
    return kept


def payment_event_received(
    *, merchant: Merchant, event: dict[str, Any]
) -> tuple[PaymentEvent, bool]:
    """Store a verified event once, then hand it to a worker. Returns (row, stored now)."""
    row, created = PaymentEvent.objects.get_or_create(
        merchant=merchant,
        provider="stripe",
        event_id=str(event["id"])[:255],
        defaults={"type": str(event.get("type"))[:64], "data": _kept(event)},
    )
    if row.status == PaymentEventStatus.RECEIVED:
        try:
            dbos_client.enqueue_payment_event(row.pk)
        except Exception:
            log.exception("payment event %s was stored; reconciliation processes it", row.pk)
    return row, created


def _money(cents: Any, currency: Any) -> str:
    return format_cents(cents if isinstance(cents, int) else 0, str(currency or "usd").upper())


def _on_refund(row: PaymentEvent, now: dt.datetime) -> str:
    data = row.data
    ref, status = str(data.get("id") or ""), str(data.get("status") or "")
    key = data.get("ledger_key")
    entries = LedgerEntry.objects.filter(merchant_id=row.merchant_id, adapter="payments")
    entry = (entries.filter(key=key).first() if key else None) or (
        entries.filter(provider_ref=ref).first() if ref else None
    )
    money = _money(data.get("amount"), data.get("currency"))
    payment = data.get("payment_intent") or data.get("charge")
    if entry is None:
        report(
            row.merchant_id,
            FindingKind.PROVIDER_ONLY,
            f"provider_only:{ref}",
            now,
            provider_ref=ref,
            provider_amount_cents=data.get("amount")
            if isinstance(data.get("amount"), int)
            else None,
            detail=f"Stripe reports refund {ref} ({money} on {payment}, {status}); the ledger has no entry for it.",
        )
        return f"reported: refund {ref} has no ledger entry"
    failed = status in ("failed", "canceled")
    if failed and entry.state in (LedgerState.PENDING, LedgerState.DONE):
        reason = data.get("failure_reason") or status
        report(
            row.merchant_id,
            FindingKind.PROVIDER_FAILED,
            f"provider_failed:{ref}",
            now,
            ledger_entry=entry,
            provider_ref=ref,
            provider_amount_cents=data.get("amount")
            if isinstance(data.get("amount"), int)
            else None,
            detail=(
                f"Stripe reports refund {ref} ({money} on {payment}) {status} ({reason}); the "
                f"ledger {'recorded it made' if entry.state == LedgerState.DONE else 'holds its claim pending'} "
                f"({entry.key}). Nothing was reversed here: a person must check whether the "
                "customer has the money and tell them."
            ),
        )
        return f"reported: refund {ref} {status} at Stripe, ledger {entry.state}"
    if entry.state == LedgerState.PENDING:
        if entry.run.is_active:
            return f"left to its step: the claim of refund {ref} is still being worked"
        settled = resolve_stale(entry.pk)
        return f"claim of refund {ref} settled by lookup: {settled or 'still unknown'}"
    if entry.state == LedgerState.FAILED and not failed:
        report(
            row.merchant_id,
            FindingKind.PROVIDER_ONLY,
            f"provider_only:{ref}",
            now,
            ledger_entry=entry,
            provider_ref=ref,
            provider_amount_cents=data.get("amount")
            if isinstance(data.get("amount"), int)
            else None,
            detail=(
                f"Stripe reports refund {ref} ({money} on {payment}) {status}; the ledger "
                f"recorded its claim failed ({entry.key})."
            ),
        )
        return f"reported: refund {ref} {status} at Stripe, ledger failed"
    return f"consistent: refund {ref} {status}, ledger {entry.state}"


def _on_charge(row: PaymentEvent, now: dt.datetime) -> str:
    data = row.data
    refs = [r for r in (data.get("payment_intent"), data.get("id")) if r]
    at_stripe = data.get("amount_refunded")
    order = Order.objects.filter(merchant_id=row.merchant_id, payment_reference__in=refs).first()
    if order is None or not isinstance(at_stripe, int):
        return f"ignored: no order of this merchant is paid by {', '.join(refs) or 'that charge'}"
    ours = Refund.objects.filter(order=order).aggregate(total=Sum("amount_cents"))["total"] or 0
    if at_stripe > ours:
        report(
            row.merchant_id,
            FindingKind.PROVIDER_ONLY,
            f"charge_refunded:{data.get('id')}:{at_stripe}",
            now,
            provider_ref=str(data.get("id")),
            provider_amount_cents=at_stripe,
            ledger_amount_cents=ours,
            detail=(
                f"Stripe has refunded {_money(at_stripe, data.get('currency'))} on {order.reference}; "
                f"the ledger accounts for {_money(ours, data.get('currency'))}."
            ),
        )
        return f"reported: {order.reference} refunded more at Stripe than the ledger holds"
    return f"consistent: {order.reference}"


def payment_event_process(event_pk: int, *, now: dt.datetime | None = None) -> str:
    """Process one stored event once (under its row's lock); returns what it concluded."""
    now = now or timezone.now()
    with transaction.atomic():
        row = PaymentEvent.objects.select_for_update().filter(pk=event_pk).first()
        if row is None:
            return "gone"
        if row.status == PaymentEventStatus.PROCESSED:
            return row.outcome
        if row.type == "charge.refunded":
            outcome = _on_charge(row, now)
        elif row.type in EVENTS:
            outcome = _on_refund(row, now)
        else:
            outcome = f"ignored: {row.type} is not an event Deskhand reads"
        row.status, row.outcome, row.processed_at = PaymentEventStatus.PROCESSED, outcome, now
        row.save(update_fields=["status", "outcome", "processed_at"])
    log.info("payment event %s (%s): %s", row.event_id, row.type, config.redact(outcome))
    return outcome


def process_waiting(merchant_id: int, now: dt.datetime) -> int:
    """The sweep behind the workflow: events stored and still unprocessed after the grace."""
    waiting = PaymentEvent.objects.filter(
        merchant_id=merchant_id,
        status=PaymentEventStatus.RECEIVED,
        received_at__lt=now - min(lookup_grace(), dt.timedelta(minutes=1)),
    ).values_list("pk", flat=True)
    return sum(1 for pk in list(waiting) if payment_event_process(pk, now=now))
