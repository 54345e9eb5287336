"""Reading effects: reconciliation's open findings, and which adapter a merchant uses.

``findings_summary`` is the plain function ``manage.py health --json`` reports (the lead
wires it there): it reads rows, never the provider, so health stays cheap and never
hangs on another system.
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Any

from django.db.models import Count

from agent.effects import config
from agent.models.effects import EffectFinding
from agent.models.ledger import LedgerEntry, LedgerState


def open_findings(merchant_id: int | None = None) -> list[EffectFinding]:
    qs = EffectFinding.objects.filter(resolved_at__isnull=True).select_related("merchant")
    if merchant_id is not None:
        qs = qs.filter(merchant_id=merchant_id)
    return list(qs.order_by("-found_at", "-pk")[:200])


def findings_summary(merchant_id: int | None = None) -> dict[str, Any]:
    """Open reconciliation findings (by kind, by merchant, the oldest) and claims still pending.

    ``ok`` is false while any finding is open: each is money the ledger and the provider
    disagree about, and only a person settles it.
    """
    qs = EffectFinding.objects.filter(resolved_at__isnull=True)
    pending = LedgerEntry.objects.filter(state=LedgerState.PENDING)
    if merchant_id is not None:
        qs, pending = qs.filter(merchant_id=merchant_id), pending.filter(merchant_id=merchant_id)
    by_kind = {
        row["kind"]: row["n"] for row in qs.order_by().values("kind").annotate(n=Count("id"))
    }
    by_merchant = {
        row["merchant__slug"]: row["n"]
        for row in qs.order_by().values("merchant__slug").annotate(n=Count("id"))
    }
    oldest = qs.order_by("found_at").values_list("found_at", flat=True).first()
    total = sum(by_kind.values())
    return {
        "ok": total == 0,
        "open": total,
        "by_kind": by_kind,
        "by_merchant": by_merchant,
        "oldest_found_at": oldest.isoformat() if oldest else None,
        "pending_claims": pending.count(),
    }


def _host(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return parts.netloc or url


def merchant_adapters(merchant: Any) -> list[dict[str, Any]]:
    """What the console's merchant page says about where this merchant's effects happen.

    Names the kind of system, its address and whether a credential is configured — read
    from the environment at the time of asking, never shown.
    """
    rows: list[dict[str, Any]] = []
    if merchant.refund_adapter == "payments":
        names = config.payments_key_names(merchant.slug)
        key_name = next((n for n in names if os.environ.get(n)), None)
        rows.append(
            {
                "effect": "Refunds",
                "adapter": "payments",
                "label": merchant.get_refund_adapter_display(),
                "where": _host(config.payments_url()),
                "credential": f"set ({key_name})" if key_name else f"missing ({names[1]})",
                "ready": bool(key_name),
            }
        )
    else:
        rows.append(_in_database("Refunds", merchant.get_refund_adapter_display()))
    if merchant.mail_adapter == "smtp":
        host = os.environ.get("DESKHAND_SMTP_HOST", "")
        port = os.environ.get("DESKHAND_SMTP_PORT", "587")
        user = os.environ.get("DESKHAND_SMTP_USER", "")
        password = bool(os.environ.get("DESKHAND_SMTP_PASSWORD"))
        rows.append(
            {
                "effect": "Customer email",
                "adapter": "smtp",
                "label": merchant.get_mail_adapter_display(),
                "where": f"{host}:{port}" if host else "not configured (DESKHAND_SMTP_HOST)",
                "credential": (
                    "login set (DESKHAND_SMTP_USER, DESKHAND_SMTP_PASSWORD)"
                    if user and password
                    else "no login configured"
                ),
                "ready": bool(host),
            }
        )
    else:
        rows.append(_in_database("Customer email", merchant.get_mail_adapter_display()))
    return rows


def _in_database(effect: str, label: str) -> dict[str, Any]:
    return {
        "effect": effect,
        "adapter": "database",
        "label": label,
        "where": "this database",
        "credential": "none needed",
        "ready": True,
    }
