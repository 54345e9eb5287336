"""``refund_totals`` — the three sums a refund's limits are checked against, in one statement —
counts exactly what the three ORM aggregates it replaced counted: the order's refunds ever,
the refunds of every run on the ticket (or one run's, without a ticket), and the merchant's
since midnight on its own calendar; another order, ticket, merchant or day never leaks in."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth import get_user_model
from django.db.models import Sum
from django.utils import timezone

from agent.run.services import run_create
from deskhand.domain.desk.models import Order, Refund, Ticket
from deskhand.domain.desk.selectors import refund_totals
from deskhand.domain.desk.services import merchant_day_start


def _sum(qs) -> int:
    return int(qs.aggregate(t=Sum("amount_cents"))["t"] or 0)


def test_the_three_refund_sums_count_what_the_orm_counts_and_nothing_else(seeded):
    owner = get_user_model().objects.get(email="owner@northwind.test")
    nw1 = Ticket.objects.get(reference="NW-1")
    other_ticket = Ticket.objects.filter(merchant_id=nw1.merchant_id).exclude(pk=nw1.pk).first()
    first, second = run_create(ticket=nw1, user=owner), None
    first.status = "failed"
    first.save(update_fields=["status"])  # one open run per ticket: the second is a re-run
    second = run_create(ticket=nw1, user=owner)
    elsewhere = run_create(ticket=other_ticket, user=owner)
    orders = list(Order.objects.filter(merchant_id=nw1.merchant_id).order_by("pk")[:2])
    stranger = Order.objects.exclude(merchant_id=nw1.merchant_id).first()

    def refund(order, cents, run, days_ago=0):
        r = Refund.objects.create(
            merchant_id=order.merchant_id, order=order, amount_cents=cents, reason="t", run=run
        )
        if days_ago:
            Refund.objects.filter(pk=r.pk).update(
                created_at=timezone.now() - dt.timedelta(days=days_ago)
            )

    refund(orders[0], 100, first)
    refund(orders[0], 250, second, days_ago=3)  # another day: not today's
    refund(orders[1], 70, elsewhere)  # another ticket's run, another order
    refund(orders[1], 5, None)  # a person's refund: no run
    refund(stranger, 999, None)  # another merchant

    merchant = orders[0].merchant
    since = merchant_day_start(merchant)
    got = refund_totals(
        order_id=orders[0].pk, merchant_id=merchant.pk, since=since, ticket_id=nw1.pk
    )
    assert got.order == _sum(Refund.objects.filter(order=orders[0])) == 350
    assert got.runs == _sum(Refund.objects.filter(run__ticket_id=nw1.pk)) == 350
    assert got.today == _sum(Refund.objects.filter(merchant=merchant, created_at__gte=since)) == 175
    one_run = refund_totals(
        order_id=orders[1].pk, merchant_id=merchant.pk, since=since, run_id=elsewhere.pk
    )
    assert (one_run.order, one_run.runs) == (75, 70)
    nothing = refund_totals(
        order_id=stranger.pk + 10_000, merchant_id=merchant.pk + 10_000, since=since, ticket_id=0
    )
    assert (nothing.order, nothing.runs, nothing.today) == (0, 0, 0)
