"""Every kind of bad or unwelcome mail has an outcome on record, and nothing is lost.

Each test shows where the message went (its row's status and reason) and that its bytes
(or, over the size limit, its first bytes) are stored.
"""

from __future__ import annotations

from deskhand.domain.desk import services
from deskhand.domain.desk.models import Merchant, Ticket, TicketMessage
from deskhand.domain.mail.intake import HEAD_BYTES
from deskhand.domain.mail.models import Automated, InboundEmail, InboundStatus
from deskhand.domain.mail.parse import Verdicts
from tests.mail.conftest import DANA, NORTHWIND, mail, received


def receive(raw: bytes, *, envelope_sender: str | None = "x@example.org", **kwargs) -> InboundEmail:
    row = received(raw, envelope_sender=envelope_sender, **kwargs)
    stored = InboundEmail.objects.get(pk=row.pk)
    assert bytes(stored.raw) == raw[: len(bytes(stored.raw))] and stored.raw_size == len(raw)
    return stored


def tickets() -> int:
    return Ticket.objects.count()


def test_an_auto_reply_to_a_ticket_is_on_its_thread_flagged_and_reopens_nothing(seeded):
    nw1 = Ticket.objects.get(reference="NW-1")
    row = receive(
        mail(
            sender=DANA,
            subject="Out of office: Re: stale beans",
            body="I am away until Monday.",
            headers={
                "Auto-Submitted": "auto-replied",
                "In-Reply-To": nw1.messages.get().message_id,
            },
        )
    )
    assert (row.status, row.automated, row.ticket_id) == (
        InboundStatus.THREADED,
        "auto-reply",
        nw1.pk,
    )
    assert row.starts_no_run and row.thread_message.automated == "auto-reply"


def test_an_auto_reply_that_answers_no_ticket_opens_none(seeded):
    before = tickets()
    for headers in (
        {"Auto-Submitted": "auto-generated"},
        {"X-Autoreply": "yes"},
        {"X-Autorespond": "Out of office"},
        {"Precedence": "auto_reply"},
    ):
        row = receive(mail(headers=headers))
        assert (row.status, row.reason_code, row.automated) == (
            InboundStatus.IGNORED,
            "automated_no_ticket",
            Automated.AUTO_REPLY,
        ), headers
    assert tickets() == before


def test_auto_submitted_no_is_a_person(seeded):
    row = receive(mail(headers={"Auto-Submitted": "no"}))
    assert row.status == InboundStatus.THREADED and row.automated == "" and not row.starts_no_run


def test_bulk_and_list_mail_opens_no_ticket(seeded):
    before = tickets()
    for headers in (
        {"Precedence": "bulk"},
        {"Precedence": "list"},
        {"List-Id": "<news.example.org>"},
    ):
        row = receive(mail(headers=headers))
        assert (row.status, row.automated) == (InboundStatus.IGNORED, Automated.BULK), headers
    assert tickets() == before


def _bounce(original_id: str, *, sender: str = "MAILER-DAEMON@mx.example.com") -> bytes:
    return (
        f"From: Mail Delivery System <{sender}>\r\n"
        f"To: {NORTHWIND}\r\n"
        "Subject: Undelivered Mail Returned to Sender\r\n"
        f"Message-ID: <bounce-{sender.partition('@')[0].lower()}@mx.example.com>\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="B"\r\n\r\n'
        "--B\r\nContent-Type: text/plain\r\n\r\nThe mail could not be delivered.\r\n"
        "--B\r\nContent-Type: message/delivery-status\r\n\r\n"
        "Reporting-MTA: dns; mx.example.com\r\n\r\n"
        "Final-Recipient: rfc822; dana.whitfield@example.com\r\nAction: failed\r\nStatus: 5.1.1\r\n\r\n"
        "--B\r\nContent-Type: text/rfc822-headers\r\n\r\n"
        f"Message-ID: {original_id}\r\nSubject: Your refund\r\n\r\n"
        "--B--\r\n"
    ).encode()


def test_a_bounce_is_stored_linked_to_the_ticket_it_reports_on_and_on_no_thread(seeded):
    nw1 = Ticket.objects.select_related("customer").get(reference="NW-1")
    services.email_send(
        ticket=nw1,
        subject="Your refund",
        body="Refunded.",
        run_id=None,
        ledger_entry_id=None,
        message_id="<abc.deskhand@northwind.test>",
    )
    lines = nw1.messages.count()
    row = receive(_bounce("<abc.deskhand@northwind.test>"), envelope_sender="")
    assert (row.status, row.automated, row.ticket_id) == (InboundStatus.IGNORED, "bounce", nw1.pk)
    assert "NW-1" in row.reason and nw1.messages.count() == lines
    # A postmaster's report about nothing of ours is stored and opens nothing either.
    before = tickets()
    other = receive(_bounce("<nothing@x>", sender="postmaster@example.net"))
    assert (other.status, other.automated, other.ticket_id) == (
        InboundStatus.IGNORED,
        "bounce",
        None,
    )
    assert tickets() == before


def test_a_null_sender_is_a_bounce(seeded):
    row = receive(mail(subject="Delivery Status Notification"), envelope_sender="")
    assert (row.status, row.automated) == (InboundStatus.IGNORED, "bounce")


def test_a_message_over_the_size_limit_is_rejected_with_its_head_kept(seeded, settings):
    settings.DESKHAND_INBOUND_MAX_BYTES = 100_000
    raw = mail(body="x" * 200_000, message_id="<big@example.org>")
    row = receive(raw)
    assert (row.status, row.reason_code, row.raw_truncated) == (
        InboundStatus.REJECTED,
        "too_large",
        True,
    )
    assert len(bytes(row.raw)) == HEAD_BYTES and row.raw_size == len(raw)
    assert row.message_id == "<big@example.org>" and row.merchant.slug == "northwind"
    assert "over the limit of 100,000 bytes" in row.reason and row.ticket_id is None
    # Delivered again: still one row.
    assert receive(raw).pk == row.pk and InboundEmail.objects.count() == 1


def test_broken_mime_is_rejected_and_kept(seeded):
    raw = (
        f"From: sam@example.org\r\nTo: {NORTHWIND}\r\nSubject: hi\r\nMessage-ID: <b@x>\r\n"
        'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="NOPE"\r\n\r\n'
        "no boundary anywhere in here\r\n"
    ).encode()
    row = receive(raw)
    assert (row.status, row.reason_code) == (InboundStatus.REJECTED, "broken_mime")
    assert "StartBoundaryNotFoundDefect" in row.reason and bytes(row.raw) == raw


def test_bytes_that_are_not_mail_at_all_are_rejected_and_kept(seeded):
    raw = b"\xff\xfe\x00garbage with no headers\r\n\r\n" + bytes(range(256))
    row = receive(raw, envelope_recipients=[NORTHWIND])
    assert (row.status, row.reason_code) == (InboundStatus.REJECTED, "broken_mime")
    assert row.message_id_derived and bytes(row.raw) == raw


def test_mail_with_no_from_is_rejected(seeded):
    raw = f"To: {NORTHWIND}\r\nSubject: who am I\r\nMessage-ID: <n@x>\r\n\r\nhello\r\n".encode()
    row = receive(raw)
    assert (row.status, row.reason_code) == (InboundStatus.REJECTED, "no_sender")


def test_mail_to_an_address_no_merchant_owns_is_stored_as_rejected(seeded):
    raw = mail(to="sales@northwind.test")
    row = receive(raw, envelope_recipients=["sales@northwind.test"])
    assert (row.status, row.reason_code, row.merchant_id) == (
        InboundStatus.REJECTED,
        "no_merchant",
        None,
    )
    assert row.recipient == "sales@northwind.test"
    assert receive(raw).pk == row.pk  # re-delivered: still one row


def test_a_sender_that_fails_its_authentication_is_quarantined(seeded):
    before = tickets()
    failed_dmarc = receive(
        mail(sender=DANA), verdicts=Verdicts(spf="pass", dkim="pass", dmarc="fail")
    )
    failed_spf = receive(mail(sender=DANA), verdicts=Verdicts(spf="fail", dkim="none"))
    assert (failed_dmarc.status, failed_dmarc.reason_code) == (
        InboundStatus.QUARANTINED,
        "auth_failed",
    )
    assert "DMARC" in failed_dmarc.reason and failed_spf.status == InboundStatus.QUARANTINED
    # SPF fails on forwarded mail all the time: a passing DKIM signature carries it.
    forwarded = receive(mail(sender=DANA), verdicts=Verdicts(spf="fail", dkim="pass"))
    assert forwarded.status == InboundStatus.THREADED
    assert tickets() == before + 1 and failed_dmarc.thread_message is None


def test_only_a_trusted_servers_authentication_results_are_read(seeded, settings):
    settings.DESKHAND_INBOUND_AUTHSERV_IDS = ["mx.deskhand.test"]
    forged = receive(
        mail(headers={"Authentication-Results": "mx.example.net; dmarc=pass; spf=pass"})
    )
    assert (forged.spf, forged.dmarc) == ("", "")
    trusted = receive(
        mail(
            headers={
                "Authentication-Results": "mx.deskhand.test; spf=pass smtp.mailfrom=x; "
                "dkim=fail header.d=x; dkim=pass header.d=y; dmarc=fail header.from=x"
            }
        )
    )
    assert (trusted.spf, trusted.dkim, trusted.dmarc) == ("pass", "pass", "fail")
    assert trusted.status == InboundStatus.QUARANTINED


def test_inbound_volume_is_limited_per_sender_and_per_support_address(seeded):
    Merchant.objects.filter(slug="northwind").update(
        inbound_per_sender_per_hour=3, inbound_per_address_per_hour=5
    )
    rows = [receive(mail(sender="flood@example.org")) for _ in range(4)]
    assert [r.status for r in rows] == ["threaded"] * 3 + ["quarantined"]
    assert rows[-1].reason_code == "volume_sender" and "3 messages an hour" in rows[-1].reason
    others = [receive(mail(sender=f"p{i}@example.org")) for i in range(2)]
    assert [r.reason_code for r in others] == ["threaded_new", "volume_address"]
    assert InboundEmail.objects.filter(status="quarantined", thread_message=None).count() == 2


def test_a_message_without_a_message_id_gets_one_from_its_bytes(seeded):
    raw = mail(message_id=None)
    row = receive(raw)
    assert row.message_id_derived and row.message_id.endswith("@derived.deskhand.invalid>")
    assert row.message_id == receive(raw).message_id and InboundEmail.objects.count() == 1
    assert TicketMessage.objects.filter(message_id=row.message_id).count() == 1


def test_nul_bytes_never_reach_postgres_text(seeded):
    row = receive(mail(body="before\x00after", subject="nul"))
    assert row.status == InboundStatus.THREADED and row.thread_message.body == "beforeafter"
