"""A finding: one row per difference between the ledger and another system, seen again or not.

Written by reconciliation (``provider_reconciliation``) and by a provider's webhook events
(``provider_events``) alike, under one fingerprint, so the same difference found both
ways is one row.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from agent.models.effects import EffectFinding

log = logging.getLogger(__name__)


def report(
    merchant_id: int, kind: str, fingerprint: str, now: dt.datetime, **fields: Any
) -> EffectFinding:
    """The finding under ``fingerprint``: made the first time, its ``last_seen_at`` moved on after."""
    finding, created = EffectFinding.objects.get_or_create(
        fingerprint=fingerprint,
        defaults={
            "merchant_id": merchant_id,
            "kind": kind,
            "found_at": now,
            "last_seen_at": now,
            **fields,
        },
    )
    if not created:
        EffectFinding.objects.filter(pk=finding.pk).update(last_seen_at=now)
    else:
        log.warning("reconciliation finding %s: %s", kind, fields.get("detail", ""))
    return finding
