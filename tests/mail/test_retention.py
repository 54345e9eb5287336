"""Inbound mail is kept as it arrived for a while; then its bytes go and its facts stay."""

from __future__ import annotations

import datetime as dt

from django.utils import timezone

from deskhand.domain.mail.intake import inbound_received
from deskhand.domain.mail.models import InboundEmail
from deskhand.domain.mail.retention import inbound_prune
from tests.mail.conftest import mail, received


def test_raw_mail_is_dropped_after_the_retention_and_its_facts_and_thread_stay(seeded, settings):
    settings.DESKHAND_INBOUND_RAW_RETENTION_DAYS = 30
    raw = mail(message_id="<kept@example.org>")
    threaded = received(raw)
    unowned = received(mail(to="nobody@elsewhere.test"))
    waiting = inbound_received(raw=mail(), source="smtp")  # stored, not yet processed

    assert inbound_prune(now=timezone.now() + dt.timedelta(days=29)) == {"deleted": 0, "emptied": 0}
    later = timezone.now() + dt.timedelta(days=31)
    assert inbound_prune(now=later) == {"deleted": 1, "emptied": 1}

    kept = InboundEmail.objects.get(pk=threaded.pk)
    assert bytes(kept.raw) == b"" and kept.raw_size == len(raw) and kept.raw_sha256
    assert kept.thread_message.body == "Hello, my order has not arrived."
    assert not InboundEmail.objects.filter(pk=unowned.pk).exists()
    assert bytes(InboundEmail.objects.get(pk=waiting.pk).raw)  # never touched while waiting
    # Delivered again after its bytes went: still a duplicate.
    assert inbound_received(raw=raw, source="smtp").pk == threaded.pk
    assert inbound_prune(now=later) == {"deleted": 0, "emptied": 0}
