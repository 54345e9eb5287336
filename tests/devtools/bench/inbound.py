"""What one inbound message costs: parsing it, and storing and threading it (issue 30, point 5).

Mail arrives one message at a time from strangers, so its cost is per message, apart from
the agent's per-step budget. Four shapes a support inbox sees — a plain first message, an
HTML-only one, a reply quoting the thread, one with a PDF attached — each:

* ``parse_cpu_ms``: the bytes read into a message, its structure checked, its text and
  attachments taken out, the auto-reply headers read and the quoted history trimmed (what
  ``deskhand.mail.process`` does before it writes anything), CPU of this thread, median;
* ``intake_ms`` / ``intake_cpu_ms``: ``inbound_received`` as the SMTP receiver calls it —
  stored once, routed to its merchant, a customer found or made, a line on the ticket's
  thread — call to return, wall and CPU, median and p95 for the wall.

Automatic runs are turned off first, so a message's cost is its own and not a run's, and
the hourly volume limits raised, since the bench is the flood they are there to stop.
"""

from __future__ import annotations

import secrets
import time
from email.message import EmailMessage
from email.utils import format_datetime
from typing import Any

from django.utils import timezone

from tests.devtools.bench.probes import median, pct

TO = "support@northwind.test"
QUOTED = "\n".join(f"> line {i} of what we wrote before, quoted back to us" for i in range(40))


def _mail(shape: str, n: int) -> bytes:
    msg = EmailMessage()
    msg["From"] = f"Bench Customer {n} <bench-{n}@example.org>"
    msg["To"] = TO
    msg["Subject"] = "Re: My order" if shape == "reply" else "My order has not arrived"
    msg["Date"] = format_datetime(timezone.now())
    msg["Message-ID"] = f"<{secrets.token_hex(8)}.{n}@mail.example.org>"
    text = "Hello, my order has not arrived yet. Could you look into it, please?"
    if shape == "html":
        msg.set_content(f"<html><body><p>{text}</p><p><b>Thanks</b>, Sam</p></body></html>", "html")
    elif shape == "reply":
        msg.set_content(f"{text}\n\nOn Fri, Northwind Coffee wrote:\n{QUOTED}\n")
    else:
        msg.set_content(text)
    if shape == "attachment":
        msg.add_attachment(
            b"%PDF-1.4\n" + secrets.token_bytes(20_000),
            maintype="application",
            subtype="pdf",
            filename="receipt.pdf",
        )
    return msg.as_bytes()


SHAPES = ("plain", "html", "reply", "attachment")


def _parse(raw: bytes) -> None:
    from deskhand.mail import hygiene, parse

    msg = parse.message_from_bytes(raw)
    parse.structure_problem(msg)
    parse.content(msg)  # text (HTML made text), the quoted history trimmed, attachments
    hygiene.automated(msg, from_address=parse.sender(msg)[1])


def measure(samples: int) -> dict[str, Any]:
    from deskhand.desk.models import Merchant
    from deskhand.mail.intake import inbound_received
    from deskhand.mail.models import InboundStatus

    Merchant.objects.update(
        auto_runs="off", inbound_per_sender_per_hour=10**6, inbound_per_address_per_hour=10**6
    )
    out: dict[str, Any] = {"samples": samples}
    made = 0
    for shape in SHAPES:
        parse_cpu, wall, cpu = [], [], []
        for _ in range(3):  # warm: imports, compiled patterns, prepared statements
            _parse(_mail(shape, made))
            made += 1
        for _ in range(samples):
            raw = _mail(shape, made)
            made += 1
            c0 = time.thread_time()
            _parse(raw)
            parse_cpu.append(time.thread_time() - c0)
        for _ in range(samples):
            raw = _mail(shape, made)
            made += 1
            t0, c0 = time.perf_counter(), time.thread_time()
            row = inbound_received(raw=raw, source="smtp", envelope_recipients=[TO])
            wall.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
            if row.status != InboundStatus.THREADED:
                raise RuntimeError(f"a {shape} bench message was {row.status}: {row.reason}")
        out[shape] = {
            "bytes": len(raw),
            "parse_cpu_ms": round(median(parse_cpu) * 1000, 2),
            "intake_ms": round(median(wall) * 1000, 1),
            "intake_p95_ms": round(pct(wall, 95) * 1000, 1),
            "intake_cpu_ms": round(median(cpu) * 1000, 1),
        }
    return out
