"""Erasure covers the thread: the replies the agent sent, their addresses and Message-IDs go
with the customer's words; the money facts stay; an erased customer who writes again is a
new customer on a new ticket, and nothing erased comes back."""

from __future__ import annotations

import pytest

from agent.privacy.erasure import customer_erase, erasure_for
from deskhand.domain.desk.models import Customer, Refund, Ticket, TicketMessage
from tests.customer.test_reply import parked_or_done
from tests.durability.helpers import decide, start, user
from tests.fixtures.dbos import wait_terminal, workflow_settled
from tests.mail.conftest import DANA, mail
from tests.mail.test_smtp import send
from tests.privacy.helpers import where_found

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "owner@northwind.test"


def test_an_erased_customer_who_writes_again_is_a_new_customer_and_nothing_comes_back(
    dbos_executor, receiver
):
    run = parked_or_done(start("NW-1", OWNER))
    decide(run, "agent@northwind.test")
    run = wait_terminal(str(run.id))
    workflow_settled(str(run.id))
    old = Ticket.objects.get(reference="NW-1")
    reply = TicketMessage.objects.get(ticket=old, direction="out")
    assert "Hello Dana" in reply.body and reply.message_id and reply.to_address == DANA

    customer_erase(erasure_for(email=DANA, user=user(OWNER)), user=user(OWNER))
    assert where_found([DANA, "Dana Whitfield", "Hello Dana", reply.message_id]) == []
    assert [r.amount_cents for r in Refund.objects.all()] == [3800]  # the money facts stay

    # Dana answers the reply she was sent: its Message-ID, its [#NW-1], its reply token.
    send(
        receiver,
        mail(
            sender=f"Dana Whitfield <{DANA}>",
            subject="Re: Beans arrived stale [#NW-1]",
            message_id="<dana-after@mail.example.com>",
            headers={"In-Reply-To": reply.message_id or "<gone@x>"},
            body="Hello again, one more question about my order.",
        ),
        sender=DANA,
    )
    line = TicketMessage.objects.get(message_id="<dana-after@mail.example.com>")
    assert line.ticket_id != old.pk and line.ticket.reference != "NW-1"
    fresh = line.ticket.customer
    erased = Customer.objects.get(pk=old.customer_id)
    assert fresh.pk != erased.pk and fresh.erased_at is None and erased.erased_at is not None
    # The erased ticket got nothing, and still holds only the marker.
    assert not TicketMessage.objects.filter(ticket=old, body__icontains="one more question")
    assert not TicketMessage.objects.filter(ticket=old, body__icontains="Dana").exists()
    # The new customer's ticket knows nothing of the old thread or its orders.
    assert fresh.orders.count() == 0 and line.ticket.messages.count() == 1
