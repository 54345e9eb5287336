"""Every existing ticket's messages and emails become its thread.

Before the thread, a ticket had bare messages (customer, agent, note) and, beside them, the
outbox rows of the emails sent on it; each email also left an agent message reading
``Subject: <subject>\n\n<body>``. Here:

- a customer message is an inbound email from the customer's address (the seeded tickets
  were written in by mail); an erased customer's address is not copied;
- an agent message that is an email's copy points at its outbox row and takes the email's
  subject, Message-ID, recipient and sending time; an email with no copy on the thread gets
  one (the thread must show everything the customer was told);
- a note is internal, written in Deskhand.

Each merchant's ticket prefix is taken from its references ("NW-1" -> "NW").

Reversing it clears the new columns; the copies it added stay, in the old shape (an agent
message reading ``Subject: …``), which is what sending the email would have written.
"""

import collections
import re

from django.db import migrations

_REF = re.compile(r"^([A-Za-z][A-Za-z0-9]{0,7})-[0-9]+$")


def _copy_body(subject, body):
    return f"Subject: {subject}\n\n{body}"


def forward(apps, schema_editor):
    Merchant = apps.get_model("desk", "Merchant")
    Ticket = apps.get_model("desk", "Ticket")
    TicketMessage = apps.get_model("desk", "TicketMessage")
    OutboundEmail = apps.get_model("desk", "OutboundEmail")

    for merchant in Merchant.objects.filter(ticket_prefix=""):
        prefixes = collections.Counter(
            m.group(1).upper()
            for m in map(_REF.match, Ticket.objects.filter(merchant=merchant).values_list("reference", flat=True))
            if m
        )
        if prefixes:
            merchant.ticket_prefix = prefixes.most_common(1)[0][0]
            merchant.save(update_fields=["ticket_prefix"])

    def address(customer):
        return "" if customer.erased_at else customer.email

    for m in TicketMessage.objects.filter(kind="customer").select_related("ticket__customer"):
        m.channel, m.direction = "email", "in"
        m.from_address = address(m.ticket.customer)
        m.received_at = m.created_at
        m.save(update_fields=["channel", "direction", "from_address", "received_at"])

    TicketMessage.objects.filter(kind="note").update(channel="web", direction="internal")
    TicketMessage.objects.filter(kind="agent").update(channel="web", direction="out")

    unlinked = collections.defaultdict(list)
    for m in TicketMessage.objects.filter(kind="agent", email__isnull=True).order_by("created_at", "id"):
        unlinked[(m.ticket_id, m.run_id, m.body)].append(m)

    emails = OutboundEmail.objects.filter(ticket__isnull=False).select_related("customer")
    for email in emails.order_by("sent_at", "id"):
        candidates = unlinked.get((email.ticket_id, email.run_id, _copy_body(email.subject, email.body)))
        added = not candidates
        if candidates:
            m = candidates.pop(0)
        else:
            m = TicketMessage(ticket_id=email.ticket_id, kind="agent", run_id=email.run_id,
                              body=_copy_body(email.subject, email.body))
        m.channel, m.direction, m.email_id = "email", "out", email.pk
        m.subject = email.subject[:300]
        m.message_id = email.message_id
        m.to_address = address(email.customer)
        m.sent_at = email.sent_at
        m.save()
        if added:
            # created_at is auto_now_add: put the copy where the email happened.
            TicketMessage.objects.filter(pk=m.pk).update(created_at=email.sent_at)


def backward(apps, schema_editor):
    TicketMessage = apps.get_model("desk", "TicketMessage")
    TicketMessage.objects.update(
        channel="web", direction="internal", subject="", from_address="", to_address="",
        message_id="", email=None, sent_at=None, received_at=None,
    )


class Migration(migrations.Migration):

    dependencies = [
        ('desk', '0004_thread_schema'),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
