"""A mail loop against an auto-responder stops at the merchant's daily cap per ticket.

Northwind opens a run on every customer message and its replies leave over real SMTP. The
customer is a bot that answers every message it gets. A well-behaved one says so
(``Auto-Submitted``), and its answer starts no run: the exchange stops at once. A plain one
looks like a person, so each answer opens a run that replies again, until the ticket's
customer was sent ``Merchant.max_customer_messages_per_day`` messages: then nothing more
leaves, no run opens, and the ticket is on the attention queue saying why.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from agent.customer.route import customer_line_route
from agent.models import Run
from deskhand.domain.desk.models import Merchant, MessageDirection, Ticket, TicketMessage
from deskhand.web.console.attention import attention_items
from tests.fixtures.dbos import wait_for_run
from tests.mail.conftest import mail
from tests.mail.test_smtp import send

pytestmark = pytest.mark.django_db(transaction=True)

BOT = "orders-bot@shop.example"
CAP = 3


def settled(ticket: Ticket) -> None:
    for run in Run.objects.filter(ticket=ticket):
        run = wait_for_run(str(run.id), lambda r: not r.is_active)
        assert run.status == "succeeded", (run.status, run.summary)


def loop(receiver: int, smtp_server, headers: dict[str, str]) -> Ticket:
    """The bot writes once, then answers every message it gets, up to twice the cap."""
    send(
        receiver,
        mail(
            sender=f"Orders Bot <{BOT}>",
            subject="Do you sell gift cards?",
            message_id="<bot-0@shop.example>",
            body="Hello, do you sell gift cards for your coffee subscriptions?",
        ),
        sender=BOT,
    )
    ticket = Ticket.objects.get(customer__email=BOT)
    for answered in range(1, CAP * 2):
        settled(ticket)
        if answered > len(smtp_server.messages):
            break  # nothing new came: the bot has nothing to answer
        got = smtp_server.messages[answered - 1]
        send(
            receiver,
            mail(
                sender=BOT,
                subject=f"Re: {got['Subject']}",
                message_id=f"<bot-{answered}@shop.example>",
                headers={"In-Reply-To": got["Message-ID"], **headers},
                body="Thank you for your message. This mailbox is not monitored.",
            ),
            sender=BOT,
        )
    settled(ticket)
    return ticket


def test_a_bot_that_says_it_is_one_gets_one_reply(dbos_executor, receiver, smtp_server):
    Merchant.objects.filter(slug="northwind").update(
        mail_adapter="smtp", auto_runs="every_message", max_customer_messages_per_day=CAP
    )
    ticket = loop(receiver, smtp_server, {"Auto-Submitted": "auto-replied"})
    assert len(smtp_server.messages) == 1
    assert Run.objects.filter(ticket=ticket).count() == 1
    assert ticket.messages.filter(automated__gt="").count() == 1


def test_a_plain_bot_loop_stops_at_the_daily_cap_on_the_attention_queue(
    dbos_executor, receiver, smtp_server
):
    northwind = Merchant.objects.get(slug="northwind")
    Merchant.objects.filter(pk=northwind.pk).update(
        mail_adapter="smtp", auto_runs="every_message", max_customer_messages_per_day=CAP
    )
    ticket = loop(receiver, smtp_server, {})

    # Exactly the cap left, each to the bot; its last answer opened no run.
    assert len(smtp_server.messages) == CAP
    outbound = TicketMessage.objects.filter(ticket=ticket, direction=MessageDirection.OUTBOUND)
    assert outbound.count() == CAP
    assert Run.objects.filter(ticket=ticket).count() == CAP
    last = ticket.messages.filter(direction=MessageDirection.INBOUND).order_by("pk").last()
    said = customer_line_route(last.pk).detail  # what its routing recorded
    assert "daily limit" in said and "attention queue" in said, said
    assert Run.objects.filter(ticket=ticket).count() == CAP

    # The ticket is on the attention queue with a sentence saying why.
    items = [i for i in attention_items(merchant_id=northwind.pk, now=timezone.now())]
    [item] = [i for i in items if i.kind == "reply_cap"]
    assert item.ticket == ticket.reference
    assert f"sent this customer {CAP} messages today" in item.title
    assert "auto-responder" in item.title

    # Tomorrow (the merchant's day) the limit is new and the ticket leaves the queue.
    TicketMessage.objects.filter(pk__in=outbound.values("pk")).update(
        created_at=timezone.now() - dt.timedelta(days=2)
    )
    assert not [
        i
        for i in attention_items(merchant_id=northwind.pk, now=timezone.now())
        if i.kind == "reply_cap"
    ]
