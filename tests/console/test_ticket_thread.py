"""The ticket page reads as a help-desk conversation: who wrote, when, what the customer
was told, and what is internal."""

from __future__ import annotations

import html
import re

from deskhand.domain.desk import services
from deskhand.domain.desk.models import Ticket
from tests.console.conftest import client_for
from tests.mail.conftest import DANA, mail, received


def test_the_ticket_page_shows_the_thread_as_a_conversation(seeded):
    nw1 = Ticket.objects.select_related("customer").get(reference="NW-1")
    first_id = nw1.messages.get().message_id
    services.ticket_note_add(ticket=nw1, body="Regular customer; refund in full.")
    services.email_send(
        ticket=nw1,
        subject="Your refund",
        body="We refunded 38.00 USD.",
        run_id=None,
        ledger_entry_id=None,
        message_id="<r1.deskhand@northwind.test>",
    )
    received(
        mail(
            sender=f"Dana Whitfield <{DANA}>",
            subject="Re: Your refund",
            body="Thank you!\n\nOn Fri, Northwind Coffee wrote:\n> We refunded 38.00 USD.",
            headers={"In-Reply-To": "<r1.deskhand@northwind.test>", "References": first_id},
            attachments=[("receipt.pdf", "application/pdf", b"%PDF-1.4 tiny")],
        ),
        source="smtp",
        envelope_recipients=["support@northwind.test"],
    )
    received(
        mail(
            sender=DANA,
            subject="Out of office",
            headers={"Auto-Submitted": "auto-replied", "In-Reply-To": first_id},
        ),
        source="smtp",
        envelope_recipients=["support@northwind.test"],
    )

    page = client_for("agent@northwind.test").get("/tickets/NW-1/").content.decode()
    thread = page.split('<ol class="thread">')[1].split("</ol>")[0]
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", thread)).split())
    items = re.findall(r'<li class="msg ([^"]+)">', thread)
    assert items == [
        "d-in k-customer",
        "d-internal k-note",
        "d-out k-agent",
        "d-in k-customer",
        "d-in k-customer automated",
    ]
    assert "Dana Whitfield <dana.whitfield@example.com> wrote by email" in text
    assert "internal note — the customer never sees it" in text
    assert "Agent told the customer by email · to dana.whitfield@example.com" in text
    assert text.count("Subject: Your refund") == 1  # above the body, not again inside it
    assert "<pre>We refunded 38.00 USD.\n\nNorthwind Coffee</pre>" in thread
    # The reader sees the new text; the quoted history and the headers are a click away.
    reply = thread.split('<li class="msg d-in k-customer">')[2]
    assert "<pre>Thank you!</pre>" in reply and "Quoted history and mail headers" in reply
    assert "receipt.pdf" in reply and "application/pdf" in reply
    assert "automatic reply — stored, starts no run" in text
    assert "style=" not in page  # CSP: no inline styles


def test_another_merchant_cannot_read_the_thread(seeded):
    response = client_for("owner@lumen.test").get("/tickets/NW-1/")
    assert response.status_code == 404 and "stale" not in response.content.decode().lower()
