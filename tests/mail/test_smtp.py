"""Real SMTP over loopback: an in-test receiver (aiosmtpd with our handler), and the
``manage.py mail_receiver`` process the demo runs."""

from __future__ import annotations

import os
import signal
import smtplib
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from deskhand.domain.desk.models import Ticket, TicketMessage
from deskhand.domain.mail.models import InboundEmail, InboundStatus
from tests.mail.conftest import DANA, NORTHWIND, free_port, intake_idle, mail

ROOT = Path(__file__).resolve().parents[2]


def send(
    port: int,
    raw: bytes,
    *,
    to: str = NORTHWIND,
    sender: str = "sam@example.org",
    processed: bool = True,
) -> None:
    """Send over SMTP; with ``processed``, return once the worker has threaded and routed it."""
    # On the wire every line ends in CRLF (smtplib leaves bytes as they are).
    wire = raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
        smtp.sendmail(sender, [to], wire)
    if processed:
        intake_idle()


def test_mail_sent_over_smtp_opens_a_ticket_and_a_reply_joins_it(dbos_executor, receiver):
    send(receiver, mail(message_id="<first@example.org>", subject="Beans never came"))
    row = InboundEmail.objects.get()
    assert (row.source, row.status, row.envelope_sender) == (
        "smtp",
        InboundStatus.THREADED,
        "sam@example.org",
    )
    assert row.envelope_recipients == [NORTHWIND]
    ticket = Ticket.objects.get(pk=row.ticket_id)
    send(
        receiver,
        mail(subject="Re: Beans never came", headers={"In-Reply-To": "<first@example.org>"}),
    )
    assert (
        ticket.messages.count() == 2
        and Ticket.objects.filter(subject="Re: Beans never came").count() == 0
    )


def test_the_answer_comes_after_the_row_is_committed(dbos_executor, receiver):
    # smtplib returns once the server answered DATA: the row is readable at that instant,
    # and a worker threads it a moment later.
    send(
        receiver,
        mail(sender=DANA, message_id="<committed@example.org>"),
        sender=DANA,
        processed=False,
    )
    assert InboundEmail.objects.filter(message_id="<committed@example.org>").exists()
    intake_idle()
    assert InboundEmail.objects.filter(
        message_id="<committed@example.org>", status="threaded"
    ).exists()


def test_refused_mail_gets_a_5xx_with_the_reason_and_is_stored(dbos_executor, receiver, settings):
    with pytest.raises(smtplib.SMTPDataError) as nobody:
        send(receiver, mail(to="nobody@elsewhere.test"), to="nobody@elsewhere.test")
    assert (
        nobody.value.smtp_code == 550
        and b"no address a merchant here owns" in nobody.value.smtp_error
    )

    broken = (
        f"From: sam@example.org\r\nTo: {NORTHWIND}\r\nMessage-ID: <br@x>\r\n"
        'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="Q"\r\n\r\nnone\r\n'
    ).encode()
    with pytest.raises(smtplib.SMTPDataError) as unreadable:
        send(receiver, broken)
    assert unreadable.value.smtp_code == 554

    settings.DESKHAND_INBOUND_MAX_BYTES = 50_000
    with pytest.raises(smtplib.SMTPDataError) as big:
        send(receiver, mail(body=("y" * 70 + "\n") * 1200))
    assert big.value.smtp_code == 552 and b"over the limit" in big.value.smtp_error

    assert sorted(InboundEmail.objects.values_list("reason_code", flat=True)) == [
        "broken_mime",
        "no_merchant",
        "too_large",
    ]
    assert set(InboundEmail.objects.values_list("status", flat=True)) == {"rejected"}


def test_a_held_message_is_accepted_with_250_and_kept(dbos_executor, receiver):
    send(receiver, mail(headers={"Auto-Submitted": "auto-replied"}))
    row = InboundEmail.objects.get()
    assert (row.status, row.automated) == (InboundStatus.IGNORED, "auto-reply")


def test_the_same_mail_sent_twice_is_one_message(dbos_executor, receiver):
    raw = mail(message_id="<twice@example.org>")
    send(receiver, raw)
    send(receiver, raw)
    assert InboundEmail.objects.count() == 1
    assert TicketMessage.objects.filter(message_id="<twice@example.org>").count() == 1


def test_the_mail_receiver_command_takes_mail_over_smtp(dbos_executor, tseeded):
    from tests.fixtures.dbos import test_database_url

    port = free_port()
    env = dict(os.environ, DATABASE_URL=test_database_url(), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, "manage.py", "mail_receiver", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith(f"Receiving mail on 127.0.0.1:{port}"), line
        send(port, mail(sender=DANA, subject="Re: [#NW-1] one more thing"), sender=DANA)
        row = InboundEmail.objects.get()
        assert row.status == "threaded" and row.ticket.reference == "NW-1"
        with pytest.raises(smtplib.SMTPDataError) as refused:
            send(port, mail(to="nobody@elsewhere.test"), to="nobody@elsewhere.test")
        assert refused.value.smtp_code == 550
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0].decode()
    assert proc.returncode == 0, out
    assert "Traceback" not in out


def test_the_mail_receiver_refuses_a_port_it_cannot_have_in_a_sentence(db):
    from tests.fixtures.dbos import test_database_url

    # The test's own database, in both modes: with DATABASE_URL set, the inherited one names a
    # database the tests never create, and the receiver would refuse for that reason first.
    env = dict(os.environ, DATABASE_URL=test_database_url())
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "manage.py", "mail_receiver", "--port", str(port)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=60,
        )
    err = done.stderr.decode()
    assert done.returncode == 1 and err.startswith("CommandError: Cannot listen on")
    assert err.count("\n") == 1, err
