"""The README's two one-liners, pasted as a new user would: a ticket, then a reply on it."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from pathlib import Path

from deskhand.domain.desk.models import Ticket
from deskhand.domain.mail.models import InboundEmail
from tests.mail.conftest import intake_idle

ROOT = Path(__file__).resolve().parents[2]


def readme_command(marker: str) -> str:
    text = (ROOT / "README.md").read_text()
    found = re.search(rf"<!-- mail-demo:{marker} -->\n```sh\n(.+?)\n```", text, re.S)
    assert found, f"README.md has no mail-demo:{marker} block"
    return found.group(1)


def test_the_demo_prints_the_readmes_one_liner():
    spec = importlib.util.spec_from_file_location("demo_script", ROOT / "scripts" / "demo.py")
    assert spec and spec.loader
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    assert demo.mail_one_liner(2525) == readme_command("first")


def test_the_readmes_one_liners_open_a_ticket_and_thread_the_reply(dbos_executor, receiver):
    for marker in ("first", "reply"):
        argv = shlex.split(readme_command(marker).replace("2525", str(receiver)))
        assert argv[:2] == ["python3", "-c"] and len(argv) == 3
        done = subprocess.run(
            [sys.executable, *argv[1:]],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
    intake_idle()  # stored when answered, in order; threaded by the worker a moment later
    first, reply = InboundEmail.objects.order_by("pk")
    assert first.opened_ticket and not reply.opened_ticket
    ticket = Ticket.objects.get(pk=first.ticket_id)
    assert ticket.merchant.slug == "northwind" and reply.ticket_id == ticket.pk
    # (Northwind's automatic run asks a question in between: only the customer's lines here.)
    customer_lines = ticket.messages.filter(kind="customer").order_by("created_at", "id")
    assert [m.body for m in customer_lines] == [
        "Hello, my order has not arrived yet.",
        "It was order NW-1077, the 1 kg bag.",
    ]
