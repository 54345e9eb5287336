"""The merchant's usage: model spend and refunds per merchant day, against its caps."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.http import HttpRequest
from ninja import Router

from deskhand.domain.apikeys.models import Scope
from deskhand.web.api import schemas
from deskhand.web.api.core import require_scope
from deskhand.web.console.usage import usage_days

router = Router(tags=["usage"])


@router.get("/usage", response=schemas.UsageOut, summary="Spend and refunds, the last 14 days")
def usage(request: HttpRequest) -> Any:
    key = require_scope(request, Scope.READ)
    merchant = key.merchant
    return {
        "merchant": merchant.slug,
        "timezone": merchant.timezone,
        "daily_spend_cap_micros": merchant.daily_spend_cap_micros,
        "daily_refund_ceiling_cents": merchant.daily_refund_ceiling_cents,
        "days": [dataclasses.asdict(d) for d in usage_days(merchant=merchant)],
    }
