"""Fixtures for effects that leave the database: the payments double and a loopback SMTP server."""

from __future__ import annotations

import dataclasses
import socket
import threading
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from deskhand.domain.desk.models import Merchant
from tests.support.payments_api import PaymentsApi, charge_seeded_orders

SMTP_USER = "deskhand-mailer"
SMTP_PASSWORD = "smtp-pw-Zq9!never-in-a-log"


@pytest.fixture
def payments(monkeypatch) -> Iterator[PaymentsApi]:
    """The payments double, started, its address and key in this process's environment."""
    api = PaymentsApi().start()
    for name, value in api.env().items():
        monkeypatch.setenv(name, value)
    # Small retry waits: a test's budget, not production's.
    monkeypatch.setenv("DESKHAND_EFFECT_BUDGET_SECONDS", "8")
    yield api
    api.stop()


@pytest.fixture
def northwind_pays_at_the_provider(request, payments) -> PaymentsApi:
    """The seeded world with Northwind refunding through the double (which knows its charges)."""
    if "seeded" not in request.fixturenames:
        request.getfixturevalue("tseeded")
    Merchant.objects.filter(slug="northwind").update(refund_adapter="payments")
    charge_seeded_orders(payments)
    return payments


@dataclasses.dataclass
class Mailbox:
    messages: list[Message] = dataclasses.field(default_factory=list)
    envelopes: list[Any] = dataclasses.field(default_factory=list)
    logins: list[str] = dataclasses.field(default_factory=list)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.lock:
            self.envelopes.append(envelope)
            self.messages.append(message_from_bytes(envelope.original_content))
        return "250 Message accepted for delivery"

    def message_ids(self) -> list[str]:
        with self.lock:
            return [str(m["Message-ID"]) for m in self.messages]


class _Auth:
    def __init__(self, box: Mailbox) -> None:
        self.box = box

    def __call__(
        self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any
    ) -> AuthResult:
        ok = (
            isinstance(auth_data, LoginPassword)
            and auth_data.login.decode() == SMTP_USER
            and auth_data.password.decode() == SMTP_PASSWORD
        )
        if ok:
            self.box.logins.append(SMTP_USER)
        return AuthResult(success=ok, handled=False)


@pytest.fixture
def smtp_server(monkeypatch) -> Iterator[Mailbox]:
    """A loopback SMTP server (aiosmtpd) that wants a login; the mail adapter's env points at it."""
    box = Mailbox()
    with socket.socket() as probe:  # aiosmtpd checks its own port, so it cannot take port 0
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(
        box,
        hostname="127.0.0.1",
        port=port,
        authenticator=_Auth(box),
        auth_required=True,
        auth_require_tls=False,
    )
    controller.start()
    env = {
        "DESKHAND_SMTP_HOST": "127.0.0.1",
        "DESKHAND_SMTP_PORT": str(port),
        "DESKHAND_SMTP_USER": SMTP_USER,
        "DESKHAND_SMTP_PASSWORD": SMTP_PASSWORD,
        "DESKHAND_SMTP_STARTTLS": "0",
        "DESKHAND_MAIL_FROM": "support@northwind.example",
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    box.env = env  # type: ignore[attr-defined]
    yield box
    controller.stop()
