"""``python manage.py mail_receiver [--host 127.0.0.1] [--port 2525]``: the local SMTP receiver."""

from __future__ import annotations

import signal
import threading
from typing import Any

from aiosmtpd.controller import Controller

from deskhand.domain.cli import CliError, DeskhandCommand
from deskhand.domain.mail.smtp import InboundHandler, smtp_options


class Command(DeskhandCommand):
    help = (
        "Receive customers' mail over SMTP and thread it onto tickets (docs/inbound-mail.md). "
        "Listens on loopback unless told otherwise; it authenticates nobody, so put a real "
        "mail server in front of it for anything but a demo."
    )
    not_done = "no mail was received"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
        parser.add_argument("--port", type=int, default=2525, help="port to listen on")

    def handle(self, *args: Any, **options: Any) -> None:
        host, port = options["host"], options["port"]
        if not 0 < port < 65536:
            raise CliError(f"--port must be between 1 and 65535, not {port}.", code="usage")
        controller = Controller(InboundHandler(), hostname=host, port=port, **smtp_options())
        try:
            controller.start()
        except (OSError, RuntimeError) as exc:
            raise CliError(f"Cannot listen on {host}:{port} ({exc}).", code="error") from None
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        self.stdout.write(f"Receiving mail on {host}:{port} (SMTP); Ctrl-C stops.")
        self.stdout.flush()
        try:
            stop.wait()
        finally:
            controller.stop()
