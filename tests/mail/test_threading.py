"""Mail to a support address becomes a ticket's thread: opened, joined, never crossed."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth.models import User
from django.utils import timezone

from agent.privacy.erasure import customer_erase, erasure_for
from deskhand.domain.desk.models import Customer, Ticket, TicketMessage, TicketStatus
from deskhand.domain.desk.thread import reply_address
from deskhand.domain.mail.models import InboundAttachment, InboundEmail, InboundStatus
from deskhand.domain.mail.process import inbound_process
from tests.mail.conftest import DANA, LUMEN, NORTHWIND, mail, received


def receive(raw: bytes, **kwargs) -> InboundEmail:
    return received(raw, envelope_sender="x@example.org", **kwargs)


def test_a_first_mail_opens_a_ticket_for_a_new_customer_at_the_right_merchant(seeded):
    row = receive(mail(to=LUMEN, sender="Sam Rivera <Sam@Example.org>", subject="Headphones hiss"))
    assert row.status == InboundStatus.THREADED and row.opened_ticket
    ticket = Ticket.objects.select_related("merchant", "customer").get(pk=row.ticket_id)
    assert (ticket.merchant.slug, ticket.reference, ticket.subject) == (
        "lumen",
        "LU-3",
        "Headphones hiss",
    )
    assert (ticket.customer.name, ticket.customer.email) == ("Sam Rivera", "sam@example.org")
    [line] = ticket.messages.all()
    assert (line.kind, line.channel, line.direction) == ("customer", "email", "in")
    assert (line.from_address, line.to_address) == ("sam@example.org", LUMEN)
    assert line.message_id == row.message_id and line.received_at == row.received_at
    assert line.body == "Hello, my order has not arrived."
    assert not Ticket.objects.filter(
        merchant__slug="northwind", customer__email="sam@example.org"
    ).exists()


def test_the_support_address_matches_whatever_its_case(seeded):
    row = receive(mail(to="SUPPORT@Northwind.TEST"))
    assert row.merchant.slug == "northwind" and row.status == InboundStatus.THREADED


def test_a_reply_joins_its_ticket_by_in_reply_to_then_references(seeded):
    first = receive(mail(sender=DANA, message_id="<m1@example.com>"))
    ticket = Ticket.objects.get(pk=first.ticket_id)
    second = receive(mail(sender=DANA, headers={"In-Reply-To": "<m1@example.com>"}))
    third = receive(
        mail(sender=DANA, headers={"References": "<unknown@x> <m1@example.com>"}, subject="Re: x")
    )
    assert second.ticket_id == third.ticket_id == ticket.pk
    assert (second.reason_code, third.reason_code) == ("threaded_headers", "threaded_headers")
    assert ticket.messages.count() == 3 and not second.opened_ticket


def test_a_reply_joins_a_seeded_ticket_by_the_message_id_it_was_written_under(seeded):
    nw1 = Ticket.objects.get(reference="NW-1")
    original = nw1.messages.get().message_id
    row = receive(mail(sender=DANA, headers={"In-Reply-To": original}))
    assert row.ticket_id == nw1.pk and nw1.messages.count() == 2


def test_without_headers_a_reply_finds_its_ticket_by_the_reply_token_or_the_subject(seeded):
    nw1 = Ticket.objects.get(reference="NW-1")
    by_token = receive(mail(sender=DANA, to=reply_address(nw1, NORTHWIND), subject="no ref"))
    by_subject = receive(mail(sender=DANA, subject="Re: stale beans [#NW-1]"))
    assert (by_token.ticket_id, by_token.reason_code) == (nw1.pk, "threaded_token")
    assert (by_subject.ticket_id, by_subject.reason_code) == (nw1.pk, "threaded_subject")
    # A token with a wrong MAC is no token.
    forged = receive(mail(sender=DANA, to="support+nw-1.0000000000@northwind.test", subject="hi"))
    assert forged.opened_ticket and forged.ticket_id != nw1.pk


def test_a_stranger_cannot_write_into_someone_elses_ticket(seeded):
    nw1 = Ticket.objects.get(reference="NW-1")
    row = receive(
        mail(
            sender="mallory@example.net",
            subject="[#NW-1] refund me instead",
            headers={"In-Reply-To": nw1.messages.get().message_id},
        )
    )
    assert row.opened_ticket and row.ticket_id != nw1.pk
    assert "comes from another address" in row.reason
    assert nw1.messages.count() == 1


def test_processing_a_message_twice_adds_one_line(seeded):
    row = receive(mail(sender=DANA))
    InboundEmail.objects.filter(pk=row.pk).update(status=InboundStatus.RECEIVED)
    inbound_process(row.pk)
    inbound_process(row.pk)
    assert TicketMessage.objects.filter(message_id=row.message_id).count() == 1
    assert Ticket.objects.filter(customer__email=DANA).count() == 2  # NW-1, and this one


def test_the_same_message_delivered_again_is_stored_once(seeded):
    raw = mail(message_id="<same@example.org>")
    first, again = receive(raw), receive(raw)
    assert first.pk == again.pk
    assert (
        InboundEmail.objects.count() == 1
        and TicketMessage.objects.filter(message_id="<same@example.org>").count() == 1
    )


def test_a_reply_to_a_resolved_ticket_reopens_it(seeded):
    nw1 = Ticket.objects.get(reference="NW-1")
    Ticket.objects.filter(pk=nw1.pk).update(status=TicketStatus.RESOLVED)
    receive(mail(sender=DANA, subject="Re: [#NW-1]"))
    assert Ticket.objects.get(pk=nw1.pk).status == TicketStatus.OPEN


def test_the_model_reads_the_new_text_and_the_thread_keeps_the_quoted_history(seeded):
    body = (
        "Yes, the grinder from order NW-1042.\n\n"
        "On Tue, 1 Dec 2026 at 09:14, Northwind Coffee <support@northwind.test> wrote:\n"
        "> Which item was it?\n"
        "> Thanks"
    )
    row = receive(mail(sender=DANA, body=body))
    line = row.thread_message
    assert line.body == "Yes, the grinder from order NW-1042."
    assert line.body_full == body


def test_html_only_mail_becomes_text(seeded):
    html = (
        "<html><head><style>p{color:red}</style><script>alert(1)</script></head><body>"
        "<p>My order&nbsp;<b>NW-1077</b> is late.</p><ul><li>one bag</li><li>two mugs</li></ul>"
        "<div class='gmail_quote'>On Mon, Ann wrote:<blockquote>old text</blockquote></div>"
        "</body></html>"
    )
    row = receive(mail(body=None, html=html))
    line = row.thread_message
    assert line.body == "My order NW-1077 is late.\n\n- one bag\n\n- two mugs"
    assert (
        "> old text" in line.body_full
        and "alert" not in line.body_full
        and "color" not in line.body_full
    )


def test_attachments_are_kept_by_size_and_type_and_never_in_the_text(seeded, settings):
    settings.DESKHAND_INBOUND_ATTACHMENT_MAX_BYTES = 1000
    small = b"\x89PNG" + b"0" * 100
    big = b"%PDF" + b"1" * 5000
    row = receive(
        mail(
            body="Photo attached.",
            attachments=[("bag.png", "image/png", small), ("receipt.pdf", "application/pdf", big)],
        )
    )
    photo, receipt = InboundAttachment.objects.filter(inbound=row)
    assert (photo.filename, photo.content_type, photo.size, bytes(photo.content)) == (
        "bag.png",
        "image/png",
        len(small),
        small,
    )
    assert (receipt.filename, receipt.size, receipt.content, receipt.kept) == (
        "receipt.pdf",
        len(big),
        None,
        False,
    )
    assert row.thread_message.body == "Photo attached."
    assert "PNG" not in row.thread_message.body_full and "PDF" not in row.thread_message.body_full


def test_an_erased_customer_who_writes_again_is_a_new_customer(seeded):
    owner = User.objects.get(username="owner@northwind.test")
    nw1 = Ticket.objects.get(reference="NW-1")
    old_id = nw1.messages.get().message_id
    customer_erase(erasure_for(email=DANA, user=owner), user=owner, now=timezone.now())
    row = receive(mail(sender=DANA, subject="[#NW-1] hello again", headers={"In-Reply-To": old_id}))
    assert row.opened_ticket and row.ticket_id != nw1.pk
    new = Customer.objects.get(pk=row.customer_id)
    assert new.email == DANA and new.erased_at is None
    erased = Ticket.objects.get(pk=nw1.pk).customer
    assert erased.erased_at is not None and erased.pk != new.pk
    assert Ticket.objects.get(pk=nw1.pk).messages.count() == 1


def test_a_message_date_is_kept_as_the_senders_claim_and_received_is_ours(seeded):
    row = receive(mail())
    line = row.thread_message
    assert line.sent_at is not None and abs(line.sent_at - row.received_at) < dt.timedelta(
        minutes=1
    )
    assert line.received_at == row.received_at
