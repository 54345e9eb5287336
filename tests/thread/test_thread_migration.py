"""The data migration: a database of the old shape (bare messages beside an outbox) ends up
with every ticket's messages and emails on its thread.

Run with Django's ``MigrationExecutor`` on the test database taken back to the last
migration before the thread, seeded with rows of that shape, then migrated forward.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from deskhand.domain.desk.models import Merchant, OutboundEmail, Ticket, TicketMessage

BEFORE = [("desk", "0003_retention_and_erasure")]


def _latest() -> list[tuple[str, str]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


@pytest.fixture
def old_shape(transactional_db):
    """The database as it was before the thread; put back to the latest state afterwards."""
    latest = _latest()
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    try:
        yield executor.loader.project_state(BEFORE).apps
    finally:
        MigrationExecutor(connection).migrate(latest)


def test_existing_messages_and_emails_become_each_tickets_thread(old_shape):
    apps = old_shape
    M = apps.get_model("desk", "Merchant")
    C = apps.get_model("desk", "Customer")
    T = apps.get_model("desk", "Ticket")
    TM = apps.get_model("desk", "TicketMessage")
    E = apps.get_model("desk", "OutboundEmail")
    now = timezone.now()

    nw = M.objects.create(slug="northwind", name="Northwind Coffee")
    lu = M.objects.create(slug="lumen", name="Lumen Audio")
    dana = C.objects.create(merchant=nw, name="Dana", email="dana@example.com")
    gone = C.objects.create(
        merchant=lu,
        name="[erased]",
        email="erased-9@erased.invalid",
        erased_at=now,
    )
    t1 = T.objects.create(merchant=nw, customer=dana, reference="NW-1", subject="Stale beans")
    T.objects.create(merchant=nw, customer=dana, reference="NW-7", subject="Another")
    t2 = T.objects.create(merchant=lu, customer=gone, reference="LU-3", subject="[erased]")

    TM.objects.create(ticket=t1, kind="customer", body="The beans were stale.")
    sent = E.objects.create(
        merchant=nw,
        customer=dana,
        ticket=t1,
        subject="Your refund",
        body="We refunded 38.00 USD.",
        message_id="<abc.deskhand@northwind.test>",
    )
    TM.objects.create(
        ticket=t1, kind="agent", body="Subject: Your refund\n\nWe refunded 38.00 USD."
    )
    TM.objects.create(ticket=t1, kind="note", body="Refunded NW-1042 in full.")
    # An email whose thread copy never was written (made by hand, or by an older version).
    bare = E.objects.create(
        merchant=nw, customer=dana, ticket=t1, subject="Follow-up", body="Anything else?"
    )
    E.objects.filter(pk=bare.pk).update(sent_at=now + dt.timedelta(minutes=5))
    TM.objects.create(ticket=t2, kind="customer", body="[erased]")
    E.objects.create(merchant=lu, customer=gone, ticket=t2, subject="[erased]", body="[erased]")
    orphan = E.objects.create(merchant=nw, customer=dana, ticket=None, subject="x", body="y")

    MigrationExecutor(connection).migrate(_latest())

    thread = list(
        TicketMessage.objects.filter(ticket__reference="NW-1").order_by("created_at", "id")
    )
    assert [(m.kind, m.channel, m.direction) for m in thread] == [
        ("customer", "email", "in"),
        ("agent", "email", "out"),
        ("note", "web", "internal"),
        ("agent", "email", "out"),
    ]
    customer, reply, note, follow_up = thread
    assert (customer.from_address, customer.received_at) == (
        "dana@example.com",
        customer.created_at,
    )
    assert reply.email_id == sent.pk and reply.subject == "Your refund"
    assert (reply.message_id, reply.to_address) == (
        "<abc.deskhand@northwind.test>",
        "dana@example.com",
    )
    assert reply.sent_at == OutboundEmail.objects.get(pk=sent.pk).sent_at
    assert note.from_address == note.to_address == "" and note.email_id is None
    # The email with no copy got one, where it happened and saying what was sent.
    assert follow_up.email_id == bare.pk
    assert follow_up.body == "Subject: Follow-up\n\nAnything else?"
    assert (
        follow_up.created_at == follow_up.sent_at == OutboundEmail.objects.get(pk=bare.pk).sent_at
    )

    # An erased customer's thread gains no address back.
    lu_thread = TicketMessage.objects.filter(ticket__reference="LU-3")
    assert lu_thread.count() == 2
    assert set(lu_thread.values_list("from_address", "to_address")) == {("", "")}

    # Every email on a ticket is on its thread exactly once; one with no ticket stays outbox-only.
    for email in OutboundEmail.objects.exclude(ticket=None):
        assert TicketMessage.objects.filter(email=email, ticket_id=email.ticket_id).count() == 1
    assert not TicketMessage.objects.filter(email_id=orphan.pk).exists()

    # Prefixes from the references, so the next ticket is NW-8 / LU-4.
    assert dict(Merchant.objects.values_list("slug", "ticket_prefix")) == {
        "northwind": "NW",
        "lumen": "LU",
    }
    from deskhand.domain.desk.thread import ticket_reference_next

    assert ticket_reference_next(Merchant.objects.get(slug="northwind")) == "NW-8"
    assert Ticket.objects.count() == 3
