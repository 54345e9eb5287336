"""A refund on an order the store pushed is told back to the store: a signed
``refund.created``, once, shaped as the API document's ``webhooks`` say. A refund on an
order made in Deskhand (``local``) is not: the store has no such order."""

from __future__ import annotations

import datetime as dt

from standardwebhooks import Webhook

from agent.ops.reconciler import notifications_sweep
from approvals.notification_models import Notification
from approvals.notifications import webhook_set
from deskhand.domain.desk.models import Merchant, Refund
from deskhand.web.api import webhooks
from tests.consent.test_notifications import receiver
from tests.console.conftest import NW_OWNER, user
from tests.orders.test_order_sources import push, switch
from tests.tools.helpers import call, start_run

__all__ = ["receiver"]


def test_a_refund_on_a_pushed_order_is_one_signed_refund_created(tseeded, receiver):
    server = receiver(fail_first=1)
    _, secret = webhook_set(
        merchant=Merchant.objects.get(slug="northwind"),
        user=user(NW_OWNER),
        url=server.url,
        channel="cli",
    )
    local = start_run("NW-1")  # started while Northwind read the demo's tables
    push("SO-9", total=10_000)
    switch("pushed")
    pushed = start_run("NW-3")
    Merchant.objects.filter(slug="northwind").update(daily_refund_ceiling_cents=10**9)
    # NW-3's customer is Priya; the pushed order is Dana's: push one of Priya's too.
    push("SO-10", email="priya.nadkarni@example.com", total=6_000)
    call(
        pushed,
        "issue_refund",
        {"order_reference": "SO-10", "amount_cents": 3800, "reason": "stale"},
    )
    call(
        local, "issue_refund", {"order_reference": "NW-1042", "amount_cents": 500, "reason": "late"}
    )

    notifications_sweep(dt.datetime.now(dt.UTC))
    notifications_sweep(dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))  # the retry
    notifications_sweep(dt.datetime.now(dt.UTC) + dt.timedelta(hours=2))  # nothing new
    assert len(server.seen) == 2  # refused once, then taken: one event, at least once
    ids = set()
    for headers, body, _ in server.seen:
        lowered = {k.lower(): v for k, v in headers.items()}
        payload = Webhook(secret).verify(body, lowered)
        event = webhooks.RefundCreatedEvent.model_validate(payload)
        assert (event.refund.order, event.refund.amount_cents) == ("SO-10", 3800)
        assert event.refund.currency == "USD" and event.refund.provider_refund_id is None
        assert lowered["x-deskhand-event"] == "refund.created"
        ids.add(lowered["webhook-id"])
    assert len(ids) == 1
    local_refund = Refund.objects.get(order__reference="NW-1042", amount_cents=500)
    assert not Notification.objects.filter(refund=local_refund).exists()
