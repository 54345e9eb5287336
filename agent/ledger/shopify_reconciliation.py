"""Reconciliation at Shopify: the ledger against each mirrored order's refunds, every difference.

Part of the scheduled pass (``provider_reconciliation.reconcile_merchant``) for a merchant
whose orders are at Shopify, or whose runs refunded through Shopify within the look-back.
The orders compared are the mirrored ones (``ShopifyOrder``) that Deskhand read, refunded or
heard a webhook about within the look-back: each is read at Shopify now (which also moves its
mirror forwards), and its refunds created since ``now - lookback`` are matched to ledger
entries by the key in their note (``agent.effects.shopify.note_for``):

* a refund no settled entry made — staff in Shopify's admin, another app, the payment
  provider — is ``provider_only``;
* one whose amount is not the entry's is ``amount_differs``;
* a settled entry whose refund Shopify does not list on the order is ``ledger_only``.

A claim still pending is its step's (or the stale-claim sweep's) to settle: never a finding
here. Nothing is refunded or edited to make a difference go away.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db.models import Q

from agent.effects import config
from agent.effects.payments import idempotency_key
from agent.effects.shopify import NAME as SHOPIFY
from agent.effects.shopify import key_of_note, refunds_at_shopify
from agent.ledger.findings import report
from agent.models.effects import FindingKind
from agent.models.ledger import LedgerEntry, LedgerState
from deskhand.domain.desk.models import Merchant, Order, Refund
from deskhand.domain.desk.money import format_cents
from deskhand.domain.store import shopify
from deskhand.domain.store.mirror import parse_time
from deskhand.domain.store.models import ShopifyOrder

log = logging.getLogger(__name__)


def reconciles_at_shopify(merchant: Merchant, since: dt.datetime) -> bool:
    return (
        merchant.order_source == SHOPIFY
        or LedgerEntry.objects.filter(
            merchant=merchant, adapter=SHOPIFY, created_at__gte=since
        ).exists()
    )


def _amount(entry: LedgerEntry) -> int | None:
    recorded = (
        Refund.objects.filter(ledger_entry=entry).values_list("amount_cents", flat=True).first()
    )
    if recorded is not None:
        return recorded
    value = (entry.arguments or {}).get("amount_cents")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def reconcile_shopify(
    merchant: Merchant, *, now: dt.datetime, since: dt.datetime
) -> dict[str, int]:
    """Compare the ledger's Shopify refunds with the mirrored orders' refunds at Shopify."""
    counts: dict[str, int] = {
        FindingKind.PROVIDER_ONLY: 0,
        FindingKind.AMOUNT_DIFFERS: 0,
        FindingKind.LEDGER_ONLY: 0,
    }
    entries = list(
        LedgerEntry.objects.filter(
            merchant=merchant, adapter=SHOPIFY, created_at__gte=since - dt.timedelta(days=1)
        )
    )
    by_key = {idempotency_key(e.key): e for e in entries}
    refunded_orders = Refund.objects.filter(ledger_entry__in=entries).values("order_id")
    held = ShopifyOrder.objects.filter(merchant=merchant).filter(
        Q(seen_at__gte=since) | Q(order_id__in=refunded_orders)
    )
    orders = Order.objects.filter(pk__in=held.values("order_id")).order_by("pk")
    seen: set[str] = set()
    compared: set[int] = set()
    for order in orders:
        try:
            refunds = refunds_at_shopify(order)
        except (shopify.ShopifyError, config.NotConfigured) as exc:
            log.warning(
                "reconciliation of %s at Shopify skipped %s: %s",
                merchant.slug,
                order.reference,
                config.redact(str(exc)),
            )
            continue
        compared.add(order.pk)
        for r in refunds:
            seen.add(r.gid)
            at = parse_time(r.created_at)
            if at is not None and at < since:
                continue
            key = key_of_note(r.note)
            entry = by_key.get(key or "")
            money = format_cents(r.amount, r.currency)
            if entry is not None and entry.state == LedgerState.PENDING:
                continue
            if (
                entry is None
                or entry.state != LedgerState.DONE
                or entry.provider_ref not in ("", r.gid)
            ):
                counts[FindingKind.PROVIDER_ONLY] += 1
                report(
                    merchant.pk,
                    FindingKind.PROVIDER_ONLY,
                    f"provider_only:{r.gid}",
                    now,
                    ledger_entry=entry,
                    provider_ref=r.gid,
                    provider_amount_cents=r.amount,
                    detail=(
                        f"Shopify refunded {money} against {order.reference} ({r.gid}) and the "
                        + (
                            "ledger has no entry for it (made outside Deskhand"
                            + (f": {r.note[:120]!r}" if r.note else "")
                            + ")"
                            if entry is None
                            else f"ledger has no settled entry for it ({entry.key}: {entry.state})"
                        )
                        + "."
                    ),
                )
                continue
            ours = _amount(entry)
            if ours != r.amount:
                counts[FindingKind.AMOUNT_DIFFERS] += 1
                report(
                    merchant.pk,
                    FindingKind.AMOUNT_DIFFERS,
                    f"amount_differs:{r.gid}",
                    now,
                    ledger_entry=entry,
                    provider_ref=r.gid,
                    ledger_amount_cents=ours,
                    provider_amount_cents=r.amount,
                    detail=(
                        f"refund {r.gid} against {order.reference}: Shopify says {r.amount}, "
                        f"the ledger {ours} (minor units of {r.currency})."
                    ),
                )
    for entry in entries:
        if (
            entry.state != LedgerState.DONE
            or entry.provider_ref in seen
            or entry.created_at < since
        ):
            continue
        order_id = (
            Refund.objects.filter(ledger_entry=entry).values_list("order_id", flat=True).first()
        )
        if order_id not in compared:
            continue  # its order could not be read: nothing is concluded
        counts[FindingKind.LEDGER_ONLY] += 1
        report(
            merchant.pk,
            FindingKind.LEDGER_ONLY,
            f"ledger_only:{entry.key}",
            now,
            ledger_entry=entry,
            provider_ref=entry.provider_ref,
            ledger_amount_cents=_amount(entry),
            detail=(
                f"ledger entry {entry.key} records a refund ({entry.provider_ref or 'no id'}) "
                "that Shopify does not list on its order."
            ),
        )
    return counts
