"""Reconciliation: compare the ledger with the payment provider's refunds, report every difference.

(Shopify's side — a merchant whose orders are at Shopify — is ``shopify_reconciliation``,
run first in the same pass; the Stripe comparison below runs only for a merchant with
something at Stripe.)

Run by a scheduled DBOS workflow (``deskhand.engine.schedules``) on the time it was scheduled
for (``now``: the clock is an input, so a test or a recovered firing sees the same one).
For each merchant that refunds at a provider (or did within the look-back), one pass:

1. **Stale claims.** A pending claim whose run no longer acts (cancelled, ended) is settled
   from what the provider lists under its key (``intents.resolve_stale``) — recorded, never
   re-sent. One the provider still cannot account for once its key window has passed is a
   finding (``unresolved``).
2. **The provider's refunds** since ``now - lookback`` (Stripe's ``refunds.list``, every page)
   on the merchant's payments (an order's payment intent, or its charge), matched to
   ledger entries by the ledger key in their metadata: one with no settled entry is a
   finding (``provider_only`` — e.g. a refund made in the provider's dashboard); one whose
   amount differs from its entry is a finding (``amount_differs``).
3. **The ledger's settled refunds** the provider did not list are read one by one
   (``refunds.retrieve``); one the provider does not know is a finding (``ledger_only``).

A finding is a row (``EffectFinding``), the same row on every pass that sees it again. It
is shown in the admin, counted by ``agent.effects.selectors.findings_summary`` (for
``health --json``) and on the console's home and merchant pages. Nothing here refunds,
voids, or edits an entry to make a difference go away: a person settles a finding
(``manage.py effects_findings --resolve``).
"""

from __future__ import annotations

import datetime as dt
import logging

import stripe
from django.db.models import Q

from agent.effects import config
from agent.effects.payments import NAME as PAYMENTS
from agent.effects.payments import (
    client_for,
    ledger_key_of,
    list_refunds,
    paid_with,
    refund_known,
)
from agent.effects.shopify import NAME as SHOPIFY
from agent.ledger.findings import report
from agent.ledger.intents import ADAPTERS, lookup_grace, resolve_stale
from agent.ledger.provider_events import process_waiting
from agent.ledger.shopify_reconciliation import reconcile_shopify, reconciles_at_shopify
from agent.models.effects import FindingKind
from agent.models.ledger import LedgerEntry, LedgerState
from deskhand.domain.desk.models import Merchant, Order, Refund
from deskhand.domain.desk.money import format_cents

log = logging.getLogger(__name__)


def lookback() -> dt.timedelta:
    return dt.timedelta(days=config._int("DESKHAND_RECONCILE_LOOKBACK_DAYS", 7))


def merchants_to_reconcile(now: dt.datetime) -> list[int]:
    """Merchants refunding at a provider now, or who did within the look-back."""
    recent = LedgerEntry.objects.filter(
        adapter__in=(PAYMENTS, SHOPIFY), created_at__gte=now - lookback()
    )
    return sorted(
        Merchant.objects.filter(
            Q(refund_adapter=PAYMENTS)
            | Q(order_source=SHOPIFY)
            | Q(pk__in=recent.values("merchant_id"))
        ).values_list("pk", flat=True)
    )


def _amount(entry: LedgerEntry) -> int | None:
    value = (entry.arguments or {}).get("amount_cents")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def settle_stale_claims(merchant_id: int, now: dt.datetime) -> dict[str, int]:
    """Pending claims nobody works on: record what the other system says; report the unknowable."""
    counts = {"settled": 0, "unresolved": 0}
    stale = LedgerEntry.objects.filter(
        merchant_id=merchant_id, state=LedgerState.PENDING, created_at__lt=now - lookup_grace()
    ).select_related("run")
    for entry in stale:
        if entry.run.is_active or entry.adapter not in ADAPTERS:
            continue  # its own step settles it when the run goes on
        if resolve_stale(entry.pk) is not None:
            counts["settled"] += 1
            continue
        horizon = dt.timedelta(0)
        if entry.adapter == PAYMENTS:
            try:
                horizon = dt.timedelta(
                    seconds=config.payments(entry.merchant.slug).key_window_seconds
                )
            except config.NotConfigured:
                horizon = dt.timedelta(days=1)
        if entry.created_at < now - horizon:
            counts["unresolved"] += 1
            report(
                merchant_id,
                FindingKind.UNRESOLVED,
                f"unresolved:{entry.key}",
                now,
                ledger_entry=entry,
                ledger_amount_cents=_amount(entry),
                detail=(
                    f"ledger claim {entry.key} ({entry.tool}, run {entry.run_id}) is still pending "
                    f"at {entry.adapter}, which cannot say whether it was made; a person must check."
                ),
            )
    return counts


def reconcile_merchant(merchant_id: int, *, now: dt.datetime) -> dict[str, int]:
    """One pass for one merchant (see the module docstring). Returns what it found, by kind."""
    merchant = Merchant.objects.get(pk=merchant_id)
    counts = {k: 0 for k in FindingKind.values} | settle_stale_claims(merchant_id, now)
    counts["events"] = process_waiting(merchant_id, now)
    since = now - lookback()
    if reconciles_at_shopify(merchant, since):
        for kind, n in reconcile_shopify(merchant, now=now, since=since).items():
            counts[kind] += n
    at_stripe = LedgerEntry.objects.filter(
        merchant=merchant, adapter=PAYMENTS, created_at__gte=since
    ).exists()
    if merchant.refund_adapter != PAYMENTS and not at_stripe:
        return counts  # nothing of this merchant's is at Stripe to compare
    payments = dict(
        Order.objects.filter(merchant=merchant)
        .exclude(payment_reference="")
        .values_list("payment_reference", "reference")
    )
    try:
        client = client_for(merchant)
        listed = [
            r
            for r in list_refunds(client, since=int(since.timestamp()))
            if paid_with(r) & payments.keys()
        ]
    except (config.NotConfigured, stripe.StripeError) as exc:
        # The pass could not read the provider: say so in the log; nothing is concluded.
        log.warning("reconciliation of %s skipped: %s", merchant.slug, config.redact(str(exc)))
        return counts
    entries = {
        e.key: e
        for e in LedgerEntry.objects.filter(
            merchant=merchant, adapter=PAYMENTS, created_at__gte=since - dt.timedelta(days=1)
        )
    }
    seen_refs = set()
    for r in listed:
        ref, amount = str(r.get("id")), r.get("amount")
        seen_refs.add(ref)
        key = ledger_key_of(r)
        entry = entries.get(key or "") or (
            LedgerEntry.objects.filter(key=key).first() if key else None
        )
        money = format_cents(
            amount if isinstance(amount, int) else 0, str(r.get("currency", "usd")).upper()
        )
        paid = sorted(paid_with(r) & payments.keys())
        order = payments[paid[0]] if paid else str(r.get("charge"))
        if entry is not None and entry.state == LedgerState.PENDING:
            continue  # in flight: its step (or step 1 above) records it
        if entry is None or entry.state != LedgerState.DONE or entry.provider_ref not in ("", ref):
            counts[FindingKind.PROVIDER_ONLY] += 1
            report(
                merchant_id,
                FindingKind.PROVIDER_ONLY,
                f"provider_only:{ref}",
                now,
                ledger_entry=entry,
                provider_ref=ref,
                provider_amount_cents=amount if isinstance(amount, int) else None,
                detail=(
                    f"the provider refunded {money} against {order} ({ref}) and the ledger has no "
                    + (
                        "entry for it"
                        if entry is None
                        else f"settled entry for it ({entry.key}: {entry.state})"
                    )
                    + "."
                ),
            )
            continue
        recorded = (
            Refund.objects.filter(ledger_entry=entry).values_list("amount_cents", flat=True).first()
        )
        ours = recorded if recorded is not None else _amount(entry)
        if ours != amount:
            counts[FindingKind.AMOUNT_DIFFERS] += 1
            report(
                merchant_id,
                FindingKind.AMOUNT_DIFFERS,
                f"amount_differs:{ref}",
                now,
                ledger_entry=entry,
                provider_ref=ref,
                ledger_amount_cents=ours,
                provider_amount_cents=amount if isinstance(amount, int) else None,
                detail=f"refund {ref} against {order}: the provider says {amount} cents, the ledger {ours}.",
            )
    for entry in entries.values():
        if entry.state != LedgerState.DONE or entry.provider_ref in seen_refs:
            continue
        if entry.created_at < since:
            continue  # outside the provider list's window: not comparable
        known = refund_known(client, entry.provider_ref) if entry.provider_ref else False
        if known is None:
            continue  # the provider could not say; nothing is concluded
        if known:
            continue  # listed late or on another page: it exists
        counts[FindingKind.LEDGER_ONLY] += 1
        report(
            merchant_id,
            FindingKind.LEDGER_ONLY,
            f"ledger_only:{entry.key}",
            now,
            ledger_entry=entry,
            provider_ref=entry.provider_ref,
            ledger_amount_cents=_amount(entry),
            detail=(
                f"ledger entry {entry.key} records a refund ({entry.provider_ref or 'no provider id'}) "
                "the provider does not know."
            ),
        )
    return counts


def reconcile_all(now: dt.datetime) -> dict[str, dict[str, int]]:
    """Every merchant's pass (what the scheduled workflow does, one step per merchant)."""
    return {str(m): reconcile_merchant(m, now=now) for m in merchants_to_reconcile(now)}
