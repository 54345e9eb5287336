"""Usage per merchant day: model spend and refunds against the merchant's daily caps.

A "day" is the merchant's own calendar day (its timezone), the same day the
bounds and the refund ceiling reset on, so this page and the refusals agree.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from agent.models import Run
from deskhand.domain.desk.models import Merchant, Refund, RefundStatus
from deskhand.web.console import present

DAYS = 14


@dataclasses.dataclass(frozen=True)
class UsageDay:
    day: dt.date
    runs: int
    spend_micros: int
    refunds_cents: int  # money moved and confirmed
    refund_count: int
    spend_pct: int  # of the daily spend cap, clipped to 100 for the bar
    refund_pct: int  # of the daily refund ceiling, money in flight included (it counts)
    in_flight_cents: int = 0  # claimed at a payment provider, not yet confirmed

    @property
    def spend(self) -> str:
        return present.dollars(self.spend_micros)

    @property
    def refunds(self) -> str:
        return present.cents(self.refunds_cents)

    @property
    def in_flight(self) -> str:
        return present.cents(self.in_flight_cents)

    @property
    def over_spend(self) -> bool:
        return self.spend_pct >= 100

    @property
    def over_refunds(self) -> bool:
        return self.refund_pct >= 100


def _pct(value: int, cap: int) -> int:
    if cap <= 0:
        return 100 if value > 0 else 0
    return min(100, (value * 100 + cap - 1) // cap) if value > 0 else 0


def usage_days(
    *, merchant: Merchant, days: int = DAYS, now: dt.datetime | None = None
) -> list[UsageDay]:
    """The last ``days`` merchant days, newest first, zero-filled."""
    zone = ZoneInfo(merchant.timezone)
    today = (now or timezone.now()).astimezone(zone).date()
    first = today - dt.timedelta(days=days - 1)
    since = dt.datetime.combine(first, dt.time.min, tzinfo=zone)
    spend: dict[dt.date, dict[str, Any]] = {
        r["day"]: dict(r)
        for r in Run.objects.filter(merchant_id=merchant.pk, created_at__gte=since)
        .annotate(day=TruncDate("created_at", tzinfo=zone))
        .values("day")
        .annotate(spend=Sum("cost_micros"), n=Count("id"))
    }
    refunds: dict[dt.date, dict[str, Any]] = {
        r["day"]: dict(r)
        for r in Refund.objects.filter(merchant_id=merchant.pk, created_at__gte=since)
        .annotate(day=TruncDate("created_at", tzinfo=zone))
        .values("day")
        .annotate(
            total=Sum("amount_cents", filter=~Q(status=RefundStatus.PENDING)),
            in_flight=Sum("amount_cents", filter=Q(status=RefundStatus.PENDING)),
            n=Count("id", filter=~Q(status=RefundStatus.PENDING)),
        )
    }
    out = []
    for i in range(days):
        day = today - dt.timedelta(days=i)
        s = spend.get(day, {})
        r = refunds.get(day, {})
        spend_micros = int(s.get("spend") or 0)
        refund_cents = int(r.get("total") or 0)
        in_flight = int(r.get("in_flight") or 0)
        out.append(
            UsageDay(
                day=day,
                runs=int(s.get("n") or 0),
                spend_micros=spend_micros,
                refunds_cents=refund_cents,
                refund_count=int(r.get("n") or 0),
                spend_pct=_pct(spend_micros, merchant.daily_spend_cap_micros),
                refund_pct=_pct(refund_cents + in_flight, merchant.daily_refund_ceiling_cents),
                in_flight_cents=in_flight,
            )
        )
    return out
