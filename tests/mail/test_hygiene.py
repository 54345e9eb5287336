"""What the model reads of a message, and which messages a machine wrote (no database)."""

from __future__ import annotations

import pytest

from deskhand.domain.mail.hygiene import automated, html_to_text, trim_quoted
from deskhand.domain.mail.parse import Verdicts, content, message_from_bytes
from tests.mail.conftest import mail


@pytest.mark.parametrize(
    ("text", "new"),
    [
        ("Thanks!\n\nOn Mon, 30 Nov 2026, Northwind <s@n.test> wrote:\n> old\n> older", "Thanks!"),
        (
            "Thanks!\nOn Mon, 30 Nov 2026 at 10:00, Northwind Coffee\n<s@n.test> wrote:\n> old",
            "Thanks!",
        ),
        (
            "See below.\n\n________________________________\nFrom: Northwind <s@n.test>\n"
            "Sent: Monday, 30 November 2026 10:00\nTo: Dana\nSubject: Re: beans\n\nold text",
            "See below.",
        ),
        ("Fine.\n-----Original Message-----\nFrom: x\nold", "Fine."),
        ("> which order?\nNW-1042\n> and the item?\nthe grinder", "NW-1042\nthe grinder"),
        ("> only a quote\n> nothing new", "> only a quote\n> nothing new"),
        (
            "From: my neighbour told me to write.\nThe beans were stale.",
            "From: my neighbour told me to write.\nThe beans were stale.",
        ),
    ],
)
def test_quoted_history_is_trimmed_from_what_the_model_reads(text, new):
    assert trim_quoted(text) == new


def test_html_becomes_text_with_quotes_marked_and_scripts_dropped():
    html = (
        "<style>.x{}</style><p>Hi&amp;bye</p><blockquote><p>quoted <i>line</i></p></blockquote>"
        "<script>steal()</script><table><tr><td>a</td><td>b</td></tr></table>"
    )
    assert html_to_text(html) == "Hi&bye\n\n> quoted line\n\nab"


def _msg(**headers: str):
    return message_from_bytes(mail(headers=headers))


@pytest.mark.parametrize(
    ("headers", "sender", "expected"),
    [
        ({}, "dana@example.com", ""),
        ({"Auto-Submitted": "auto-replied"}, "dana@example.com", "auto-reply"),
        ({"Auto-Submitted": "No"}, "dana@example.com", ""),
        ({"X-Autoreply": "yes"}, "dana@example.com", "auto-reply"),
        ({"X-Autorespond": "x"}, "dana@example.com", "auto-reply"),
        ({"Precedence": "junk"}, "dana@example.com", "bulk"),
        ({"List-Unsubscribe": "<mailto:u@x>"}, "dana@example.com", "bulk"),
        ({}, "MAILER-DAEMON@mx.example.com", "bounce"),
        ({}, "postmaster@example.com", "bounce"),
    ],
)
def test_mail_a_machine_wrote_is_told_apart(headers, sender, expected):
    assert automated(_msg(**headers), from_address=sender.lower()) == expected


def test_an_unknown_charset_still_reads_and_a_forwarded_message_is_an_attachment():
    raw = (
        b"From: a@example.org\r\nTo: support@northwind.test\r\nSubject: x\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="M"\r\n\r\n'
        b'--M\r\nContent-Type: text/plain; charset="x-unheard-of"\r\n\r\nhello \xe9\r\n'
        b"--M\r\nContent-Type: message/rfc822\r\n\r\nFrom: b@example.org\r\nSubject: fwd\r\n\r\ninner\r\n"
        b"--M--\r\n"
    )
    found = content(message_from_bytes(raw))
    assert found.text.startswith("hello ")
    [forwarded] = found.attachments
    assert forwarded.content_type == "message/rfc822" and b"inner" in forwarded.content


@pytest.mark.parametrize(
    ("verdicts", "held"),
    [
        (Verdicts(), False),
        (Verdicts(spf="softfail"), False),
        (Verdicts(spf="fail", dkim="pass"), False),
        (Verdicts(spf="fail"), True),
        (Verdicts(spf="pass", dkim="pass", dmarc="fail"), True),
        (Verdicts(spf="fail", dkim="fail", dmarc="pass"), False),
    ],
)
def test_which_verdicts_hold_a_message(verdicts, held):
    assert bool(verdicts.failure()) is held
