"""A reply on a help-desk ticket leaves only through the desk, even with SMTP configured.

A real run (DBOS in the test process) on a ticket a help desk opened over its signed
webhook; the merchant's mail adapter is SMTP, pointed at a real loopback server that wants
a login. Northwind's rule approves the reply; the worker's sweep relays it to the desk as one
signed webhook, and the mail server receives nothing.
"""

from __future__ import annotations

import pytest
from django.test import Client
from standardwebhooks import Webhook

from agent.models.ledger import LedgerEntry
from agent.providers import clear_overrides, install_override
from agent.providers.scripted import ScriptedProvider, call, say
from agent.run.services import run_start
from deskhand.domain.apikeys.helpdesk import source_create
from deskhand.domain.apikeys.relay import replies_relay
from deskhand.domain.desk.models import (
    Merchant,
    MessageDirection,
    MessageKind,
    Ticket,
    TicketMessage,
)
from tests.api.test_helpdesk import URL, new_ticket, signed
from tests.consent.test_notifications import receiver
from tests.console.conftest import NW_OWNER, user
from tests.effects.conftest import smtp_server
from tests.fixtures.dbos import wait_terminal

__all__ = ["receiver", "smtp_server"]

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = "Your refund for the broken mug is on its way: 5-10 business days."


@pytest.fixture
def scripted_reply():
    yield lambda ref: install_override(
        "*",
        ScriptedProvider(
            [[call("reply_to_customer", reference=ref, body=WORDS)], [say("Replied.")]]
        ),
    )
    clear_overrides()


def test_a_reply_on_a_help_desk_ticket_reaches_the_desk_and_never_the_mail_server(
    dbos_executor, smtp_server, receiver, scripted_reply
):
    northwind = Merchant.objects.get(slug="northwind")
    Merchant.objects.filter(pk=northwind.pk).update(mail_adapter="smtp", auto_runs="off")
    desk = receiver()
    _, secret = source_create(
        merchant=northwind, user=user(NW_OWNER), slug="zendesk", reply_url=desk.url
    )
    answer = Client().post(URL, **signed(secret, new_ticket()))
    assert answer.status_code == 201, answer.content
    ticket = Ticket.objects.get(reference=answer.json()["ticket"], merchant=northwind)

    scripted_reply(ticket.reference)
    run = wait_terminal(str(run_start(ticket=ticket, user=user(NW_OWNER)).id))
    assert run.status == "succeeded", run.summary  # Northwind's rule approves replies

    # Claimed once in the ledger, in the database: the SMTP adapter was never asked.
    entry = LedgerEntry.objects.get(run=run, tool="reply_to_customer")
    assert entry.ok and entry.adapter == "database"
    line = TicketMessage.objects.get(
        ticket=ticket, kind=MessageKind.AGENT, direction=MessageDirection.OUTBOUND
    )
    assert WORDS in line.body

    replies_relay()  # the worker's sweep
    assert len(desk.seen) == 1
    headers, body, _ = desk.seen[0]
    payload = Webhook(secret).verify(body, {k.lower(): v for k, v in headers.items()})
    assert payload["external_id"] == "ZD-1001" and WORDS in payload["message"]["body"]
    assert smtp_server.messages == []


def test_without_a_reply_url_the_reply_still_leaves_by_email(
    dbos_executor, smtp_server, scripted_reply
):
    """A desk that takes no replies cannot carry one: then the customer is emailed."""
    northwind = Merchant.objects.get(slug="northwind")
    Merchant.objects.filter(pk=northwind.pk).update(mail_adapter="smtp", auto_runs="off")
    _, secret = source_create(merchant=northwind, user=user(NW_OWNER), slug="zendesk")
    answer = Client().post(URL, **signed(secret, new_ticket()))
    ticket = Ticket.objects.get(reference=answer.json()["ticket"], merchant=northwind)

    scripted_reply(ticket.reference)
    run = wait_terminal(str(run_start(ticket=ticket, user=user(NW_OWNER)).id))
    assert run.status == "succeeded", run.summary
    assert LedgerEntry.objects.get(run=run, tool="reply_to_customer").adapter == "smtp"
    assert len(smtp_server.messages) == 1
    assert smtp_server.messages[0]["To"].endswith("<ada@example.com>")
