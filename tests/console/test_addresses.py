"""Support addresses an owner adds: unverified until a routing check comes back through
intake (its mail held, never a ticket, until then); the check itself never a ticket; checks
rate-limited; an address of another merchant refused with a sentence."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.core import mail
from django.test import Client
from django.utils import timezone

from approvals.models import AuditEvent
from approvals.notification_models import Notification
from approvals.outbox import outbox_send_due
from approvals.support_addresses import (
    CHECKS_PER_HOUR,
    AddressRefused,
    address_check_start,
    address_make_primary,
    address_remove,
)
from deskhand.domain.desk.models import SupportAddress, Ticket
from deskhand.domain.mail.models import InboundStatus
from tests.console.conftest import LU_OWNER, NW_AGENT, NW_OWNER, NW_VIEWER, client_for, user
from tests.mail.conftest import mail as a_mail
from tests.mail.conftest import received

pytestmark = pytest.mark.django_db

URL = "/merchant/addresses/"
NEW = "help@northwind-coffee.example"


def _add(address: str = NEW) -> SupportAddress:
    r = client_for(NW_OWNER).post(URL, {"address": address})
    assert r.status_code == 201, r.content.decode()
    return SupportAddress.objects.get(address=address)


def _check_sent() -> str:
    """Send the outbox as the worker does; the check message's text, as the address gets it."""
    outbox_send_due(now=timezone.now() + dt.timedelta(seconds=1))
    return mail.outbox[-1].body


def test_mail_to_a_new_address_is_held_until_its_routing_check_comes_back(seeded):
    address = _add()
    assert address.verified_at is None and not address.primary
    held = received(a_mail(to=NEW, message_id="<early@example.org>"))
    assert (held.status, held.reason_code) == (InboundStatus.QUARANTINED, "address_unverified")
    assert held.ticket is None
    # The mail server routes the check back: the address is verified, and no ticket is opened.
    body = _check_sent()
    token = re.search(r"deskhand-check-\S+", body).group(0)
    tickets = Ticket.objects.count()
    back = received(
        a_mail(to=NEW, sender="Deskhand <deskhand@localhost>", subject="check", body=body)
    )
    assert (back.status, back.reason_code) == (InboundStatus.IGNORED, "routing_check")
    address.refresh_from_db()
    assert address.verified_at is not None and Ticket.objects.count() == tickets
    # Only the token's hash is stored; the outbox dropped its copy once sent.
    assert not any(token in str(n.payload) + n.body for n in Notification.objects.all())
    page = client_for(NW_VIEWER).get(URL).content.decode()
    assert "reaches Deskhand" in page and "came back" in page
    # From now on its mail is threaded as any.
    ok = received(a_mail(to=NEW, message_id="<later@example.org>"))
    assert ok.status == InboundStatus.THREADED and ok.ticket is not None


def test_a_forged_or_another_addresses_check_verifies_nothing(seeded):
    address = _add()
    body = _check_sent()
    other = _add("orders@northwind-coffee.example")
    wrong = received(a_mail(to=other.address, body=body))  # the right token, the wrong address
    assert wrong.reason_code == "address_unverified"
    forged = received(a_mail(to=NEW, body="deskhand-check-" + "A" * 43))
    assert forged.reason_code == "address_unverified"
    address.refresh_from_db()
    assert address.verified_at is None


@pytest.mark.parametrize(
    ("address", "said"),
    [
        ("HELP@Lumen.test", "belongs to another merchant"),
        ("Support@Northwind.test", "already one of Northwind"),
        ("not-an-address", "not an email address"),
        ("support+vip@northwind-coffee.example", "without a +tag"),
    ],
)
def test_an_address_taken_or_malformed_is_refused_with_a_sentence(seeded, address, said):
    before = SupportAddress.objects.count()
    r = client_for(NW_OWNER).post(URL, {"address": address})
    assert r.status_code == 400 and said in r.content.decode()
    assert SupportAddress.objects.count() == before
    assert "Lumen Audio" not in r.content.decode()  # whose it is stays unsaid


def test_routing_checks_are_rate_limited(seeded):
    address = _add()  # the first check
    owner = user(NW_OWNER)
    for _ in range(CHECKS_PER_HOUR - 1):
        address_check_start(address=address, by=owner)
    with pytest.raises(AddressRefused, match="in the last hour"):
        address_check_start(address=address, by=owner)
    assert address.checks.count() == CHECKS_PER_HOUR


def test_only_a_verified_address_can_be_primary_and_removing_the_primary_passes_it_on(seeded):
    owner = user(NW_OWNER)
    address = _add()
    with pytest.raises(AddressRefused, match="routing check"):
        address_make_primary(address=address, by=owner)
    address.verified_at = timezone.now()
    address.save()
    old = SupportAddress.objects.get(address="support@northwind.test")
    address_make_primary(address=address, by=owner)
    assert SupportAddress.objects.get(pk=old.pk).primary is False
    address_remove(address=SupportAddress.objects.get(pk=address.pk), by=owner)
    assert SupportAddress.objects.get(pk=old.pk).primary is True
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"address.added", "address.check_sent", "address.primary", "address.removed"} <= actions


def test_only_an_owner_changes_addresses(seeded):
    northwind = SupportAddress.objects.get(address="support@northwind.test")
    for email in (NW_AGENT, NW_VIEWER):
        c = client_for(email)
        assert c.get(URL).status_code == 200
        assert c.post(URL, {"address": NEW}).status_code == 403
        assert c.post(f"{URL}{northwind.pk}/remove").status_code == 403
    assert client_for(LU_OWNER).post(f"{URL}{northwind.pk}/remove").status_code == 404
    assert Client().post(URL, {"address": NEW}).status_code == 302
    assert client_for(NW_OWNER).post(f"{URL}{northwind.pk}/explode").status_code == 404
    assert SupportAddress.objects.filter(pk=northwind.pk).exists()
    assert not SupportAddress.objects.filter(address=NEW).exists()
