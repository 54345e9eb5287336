"""Changing a merchant's settings: the owner's in the console, the operator's limits by command.

Two sets, two people. **The owner's** (``OWNER_FIELDS``) shape how the desk works for their
store: time zone, how long an approval waits and when it escalates, the refund ceilings,
automatic runs, the reply window and reminder, messages per customer per day, the ticket
prefix, and where the store's orders are read (``order_source``). **The operator's** (``OPERATOR_FIELDS``) protect the deployment: the daily model
spend cap, inbound volume limits, how long words are kept, and which refund and mail
adapters a merchant may use — so an owner can never route refunds through the deployment's
own payment key. ``manage.py merchant limits`` changes those.

A change is one transaction with one audit event naming each field with its value before
and after (``merchant.settings_changed`` by the owner, ``merchant.limits_changed`` by the
operator). Runs already going keep the bounds they started with (a run snapshots its bounds
at its start, ``agent.run.bounds``); new runs use the new values. That holds for the order
source too (choosing Shopify needs a connected store, ``approvals.store_connection``;
``StoreRefused`` says so): a run reads orders from the source it started with (``Run.order_source``), so
its open approvals stay about the facts it read, and nothing is withdrawn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction

from approvals.audit import audit_record
from approvals.models import Channel
from approvals.store_connection import StoreRefused, shopify_source_refused
from deskhand.domain.desk.models import Merchant
from deskhand.domain.desk.permissions import require_owner

OWNER_FIELDS = (
    "timezone",
    "approval_ttl_seconds",
    "approval_sla_seconds",
    "run_refund_ceiling_cents",
    "daily_refund_ceiling_cents",
    "auto_runs",
    "reply_window_seconds",
    "reply_reminder",
    "max_customer_messages_per_day",
    "ticket_prefix",
    "order_source",
)
OPERATOR_FIELDS = (
    "daily_spend_cap_micros",
    "inbound_per_sender_per_hour",
    "inbound_per_address_per_hour",
    "retention_days",
    "refund_adapter",
    "mail_adapter",
)


def _apply(
    merchant: Merchant, values: Mapping[str, Any], allowed: tuple[str, ...]
) -> tuple[Merchant, dict[str, list[Any]]]:
    unknown = set(values) - set(allowed)
    if unknown:  # a programming error, not input: the forms only post known fields
        raise ValueError(f"not settings of this kind: {sorted(unknown)}")
    locked = Merchant.locked(merchant.pk)
    changed = {
        name: [getattr(locked, name), value]
        for name, value in values.items()
        if getattr(locked, name) != value
    }
    for name, (_, value) in changed.items():
        setattr(locked, name, value)
    if changed:
        locked.save(update_fields=list(changed))
    return locked, changed


def settings_change(
    *, merchant: Merchant, values: Mapping[str, Any], by: Any
) -> dict[str, list[Any]]:
    """Apply an owner's validated settings; what changed, as ``{field: [before, after]}``."""
    require_owner(by, merchant.pk, "change the merchant's settings")
    with transaction.atomic():
        current = Merchant.locked(merchant.pk)  # a disconnect waits for this, and we for it
        source = values.get("order_source")
        if source and source != current.order_source:
            refused = shopify_source_refused(current, source)
            if refused:
                raise StoreRefused(refused, "order_source")
        _, changed = _apply(merchant, values, OWNER_FIELDS)
        if changed:
            audit_record(
                merchant_id=merchant.pk,
                actor=by,
                action="merchant.settings_changed",
                channel=Channel.WEB,
                detail={"changed": changed},
            )
    return changed


def limits_change(*, merchant: Merchant, values: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Apply the operator's limits (``manage.py merchant limits``); what changed."""
    with transaction.atomic():
        _, changed = _apply(merchant, values, OPERATOR_FIELDS)
        if changed:
            audit_record(
                merchant_id=merchant.pk,
                action="merchant.limits_changed",
                channel=Channel.CLI,
                detail={"changed": changed},
            )
    return changed
