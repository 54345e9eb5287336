"""Mailgun's signed inbound webhook, through django-anymail: through the test client, and
over real HTTP to a uvicorn process on the test database."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from agent.models import Run
from deskhand.domain.desk.models import Ticket, TicketMessage
from deskhand.domain.mail.models import InboundEmail, InboundStatus
from tests.mail.conftest import (
    LUMEN,
    SIGNING_KEY,
    intake_idle,
    intake_now,
    mail,
    mailgun_mime,
    mailgun_parsed,
    mailgun_sign,
    received,
)

# The server under test holds the signing key the posts are signed with.
pytestmark = pytest.mark.usefixtures("signing_key")
URL = "/inbound/mailgun/"


def test_a_signed_parsed_post_opens_a_ticket(seeded, client):
    response = client.post(URL, data=mailgun_parsed())
    assert response.status_code == 200, response.content
    assert (
        InboundEmail.objects.get().status == InboundStatus.RECEIVED
    )  # stored; a worker threads it
    row = intake_now(InboundEmail.objects.get())
    assert (row.source, row.status, row.spf, row.dkim, row.dmarc) == (
        "mailgun",
        InboundStatus.THREADED,
        "pass",
        "pass",
        "",
    )
    assert row.envelope_recipients == ["support@northwind.test"]
    ticket = Ticket.objects.get(pk=row.ticket_id)
    assert ticket.subject == "Grinder arrived broken" and ticket.reference == "NW-5"
    assert row.thread_message.body == "The burr grinder arrived with a cracked hopper."
    assert row.message_id == "<CAEPk3R+4Zr@mail.example.org>"


def test_a_signed_raw_mime_post_is_stored_byte_for_byte(seeded, client):
    raw = mail(to=LUMEN, subject="Warranty question", message_id="<raw-1@example.org>")
    response = client.post(URL + "mime", data=mailgun_mime(raw, recipient=LUMEN))
    assert response.status_code == 200, response.content
    row = intake_now(InboundEmail.objects.get())
    assert bytes(row.raw) == raw and row.merchant.slug == "lumen"
    assert Ticket.objects.get(pk=row.ticket_id).reference == "LU-3"


def test_a_forged_signature_is_refused_in_a_sentence_and_stores_nothing(seeded, client):
    post = mailgun_parsed()
    post["signature"] = "0" * 64
    response = client.post(URL, data=post)
    assert response.status_code == 403
    assert (
        response.content.decode().strip()
        == "The Mailgun signature does not match; nothing was stored."
    )
    signed_elsewhere = mailgun_sign({k: v for k, v in mailgun_parsed().items()}, key="key-not-ours")
    assert client.post(URL, data=signed_elsewhere).status_code == 403
    assert not InboundEmail.objects.exists()


def test_a_stale_signature_is_refused_in_a_sentence_and_stores_nothing(seeded, client, settings):
    settings.DESKHAND_INBOUND_WEBHOOK_TOLERANCE_SECONDS = 600
    fields = {
        k: v for k, v in mailgun_parsed().items() if k not in ("timestamp", "token", "signature")
    }
    response = client.post(URL, data=mailgun_sign(fields, at=int(time.time()) - 3600))
    assert response.status_code == 403
    assert "more than 600 seconds old" in response.content.decode()
    assert len(response.content.decode().strip().splitlines()) == 1
    assert not InboundEmail.objects.exists()


def test_without_a_signing_key_the_webhook_is_not_there(seeded, settings, client):
    settings.ANYMAIL = {"MAILGUN_WEBHOOK_SIGNING_KEY": ""}
    response = client.post(URL, data=mailgun_parsed())
    assert response.status_code == 404 and "not set up" in response.content.decode()
    assert not InboundEmail.objects.exists()


def test_a_tracking_event_posted_to_the_inbound_url_is_a_400_not_a_500(seeded, client):
    post = mailgun_sign(
        {"event": "delivered", "recipient": "x@example.org", "message-headers": "[]"}
    )
    response = client.post(URL, data=post)
    assert response.status_code == 400 and "not a Mailgun inbound post" in response.content.decode()
    assert not InboundEmail.objects.exists()


def test_mail_to_no_merchants_address_is_stored_and_answered_406(seeded, client):
    response = client.post(URL, data=mailgun_parsed(recipient="nobody@elsewhere.test"))
    assert response.status_code == 406  # Mailgun's "rejected: do not retry"
    assert "no address a merchant here owns" in response.content.decode()
    row = InboundEmail.objects.get()
    assert (row.status, row.reason_code) == (InboundStatus.REJECTED, "no_merchant")


def test_failing_verdicts_from_mailgun_quarantine_the_message(seeded, client):
    response = client.post(URL, data=mailgun_parsed(spf="Fail", dkim="Fail"))
    assert response.status_code == 200
    row = intake_now(InboundEmail.objects.get())
    assert (row.status, row.spf, row.dkim) == (InboundStatus.QUARANTINED, "fail", "fail")


def test_the_same_message_by_webhook_and_by_smtp_is_one_message(seeded, client):
    raw = mail(message_id="<both-ways@example.org>")
    received(raw, envelope_recipients=["support@northwind.test"])
    assert client.post(URL + "mime", data=mailgun_mime(raw)).status_code == 200
    assert InboundEmail.objects.count() == 1
    assert TicketMessage.objects.filter(message_id="<both-ways@example.org>").count() == 1


# --- over real HTTP ---------------------------------------------------------------------


def _post(url: str, fields: dict[str, str]) -> tuple[int, str]:
    data = urllib.parse.urlencode(fields).encode()
    request = urllib.request.Request(url, data=data, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_over_http_the_same_webhook_delivered_five_times_at_once_is_one_message(
    dbos_executor, tseeded, monkeypatch
):
    from tests.console.conftest import web_process_on_test_database

    monkeypatch.setenv("DESKHAND_MAILGUN_WEBHOOK_SIGNING_KEY", SIGNING_KEY)
    post = mailgun_parsed(message_id="<five-times@mail.example.org>")
    with web_process_on_test_database("test-web-inbound.log") as server:
        forged = dict(post, signature="f" * 64)
        assert _post(server.url + URL, forged)[0] == 403
        results: list[tuple[int, str]] = []
        barrier = threading.Barrier(5)

        def deliver() -> None:
            barrier.wait()
            results.append(_post(server.url + URL, post))

        threads = [threading.Thread(target=deliver) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert [code for code, _ in results] == [200] * 5, (results, server.log())
    intake_idle()  # the in-process executor is the worker
    assert InboundEmail.objects.count() == 1
    row = InboundEmail.objects.get()
    assert row.status == InboundStatus.THREADED
    assert TicketMessage.objects.filter(message_id="<five-times@mail.example.org>").count() == 1
    assert Ticket.objects.filter(customer__email="sam@example.org").count() == 1
    # Northwind opens a run on every customer message (the seed): one message, one run.
    assert Run.objects.filter(ticket__customer__email="sam@example.org").count() == 1
