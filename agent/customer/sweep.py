"""Waking runs that wait for a customer when their own wake-up cannot come.

A run waiting for a customer sleeps in a durable receive until its reply window ends.
Two things can leave it asleep longer than it should: the wake-up a customer's line sends
was lost (the process that stored the line died before sending), or the window was read
on a clock that moved (``agent.customer.wait.now``, as tests move it). The reconciler
calls ``customer_waits_sweep`` on each pass; every message it sends is keyed (by the
customer's line, by the window, or by the reminder's time when the merchant sends one), so a
run is woken once whatever the sweep repeats.
"""

from __future__ import annotations

import logging

from agent.customer.route import wake_key
from agent.customer.wait import now, reminder_due, reminder_sent
from agent.models import Run, RunStatus
from deskhand.domain.desk.models import MessageDirection, MessageKind, TicketMessage
from deskhand.infra.dbos import client as dbos_client

log = logging.getLogger(__name__)


def customer_waits_sweep(limit: int = 500) -> int:
    """Wake each waiting run whose customer answered, or whose window passed. How many."""
    woken = 0
    clock = now()
    for run in (
        Run.objects.filter(status=RunStatus.AWAITING_CUSTOMER)
        .select_related("merchant")
        .order_by("waiting_until")[:limit]
    ):
        question = (
            TicketMessage.objects.filter(
                ticket_id=run.ticket_id, run_id=run.pk, direction=MessageDirection.OUTBOUND
            )
            .order_by("-pk")
            .values_list("pk", flat=True)
            .first()
        )
        answer = (
            TicketMessage.objects.filter(
                ticket_id=run.ticket_id,
                kind=MessageKind.CUSTOMER,
                direction=MessageDirection.INBOUND,
                automated="",
                pk__gt=question or 0,
            )
            .order_by("pk")
            .values_list("pk", flat=True)
            .first()
        )
        if answer is not None:
            key = wake_key(answer)  # the route's own key: a wake-up it did send is not repeated
        elif run.waiting_until is not None and clock >= run.waiting_until:
            key = f"customer-window:{run.pk}:{run.waiting_until.isoformat()}"
        elif (
            run.merchant.reply_reminder
            and run.waiting_until is not None
            and clock >= reminder_due(run.waiting_until, run.merchant.reply_window_seconds)
            and not reminder_sent(str(run.pk))
        ):
            # The reminder is due and its steps are not in the step log: keyed, it wakes once.
            key = f"customer-reminder:{run.pk}:{run.waiting_until.isoformat()}"
        else:
            continue
        try:
            dbos_client.send_customer_message(run_id=str(run.pk), ticket_id=run.ticket_id, key=key)
            woken += 1
        except Exception:
            log.exception("waking run %s, which waits for its customer, failed", run.pk)
    return woken
