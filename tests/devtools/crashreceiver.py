"""The crash receiver: a real ``manage.py mail_receiver`` that SIGKILLs itself at a named point.

Usage: ``python -m tests.devtools.crashreceiver PORT [SPEC]``

``SPEC`` is a comma-separated list of ``point:target[:nth]`` from ``deskhand.infra.crashpoints``:
``after_store:inbound:5`` dies the fifth time a message is committed and not yet handed to
its workflow; ``after_enqueue:inbound:5`` once it is handed on and its sender not yet
answered. The intake crash sweep (``tests/devtools/crash_intake.py``) runs it as
``tests/devtools/crashworker.py`` runs a worker, and talks to it with ``Mta``: a sending
server that sends again whatever got no 250, as a real one does.

Nothing in the product reads a flag, a setting or an environment variable for this: only
this launcher installs crash points, in its own process, before the command starts.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import smtplib
import sys
import threading
from typing import Protocol

from tests.devtools.crashworker import ROOT, CrashProcess, database_url


def install(spec: str) -> None:
    from deskhand.infra import crashpoints

    for item in filter(None, spec.split(",")):
        point, target, *rest = item.split(":")
        crashpoints.kill_at(point, target, int(rest[0]) if rest else 1)


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")
    import django

    django.setup()
    from django.core.management import call_command

    port, spec = int(argv[1]), argv[2] if len(argv) > 2 else ""
    install(spec)
    call_command("mail_receiver", port=port)


class Receiver(CrashProcess):
    """``python -m tests.devtools.crashreceiver``: the SMTP receiver on one port, which a
    schedule may kill and start again on the same port (a sending server retries there)."""

    module = "tests.devtools.crashreceiver"

    def __init__(self, name: str, port: int) -> None:
        super().__init__(f"{name}-receiver")
        self.port = port

    def start(self, spec: str = "") -> Receiver:
        env = dict(os.environ, DATABASE_URL=database_url(), PYTHONUNBUFFERED="1")
        self._launch([str(self.port), spec], spec, env, f"Receiving mail on 127.0.0.1:{self.port}")
        return self


# --- the other end: a sending server --------------------------------------------------------

SENDERS = 3  # concurrent deliveries, as a mail server makes them
RESEND_PAUSE = 0.1  # its retry interval, shortened


@dataclasses.dataclass
class Letter:
    """One customer's message and what its sending server was told."""

    sender: str
    message_id: str
    raw: bytes
    attempts: int = 0
    accepted: bool = False
    answer: str = ""  # the last thing the server said (or how the connection ended)
    done: bool = False

    @property
    def resent(self) -> bool:
        return self.attempts > 1


class Sendable(Protocol):
    attempts: int
    done: bool


class RetryingSender[T: Sendable]:
    """``SENDERS`` threads delivering ``items`` to one port as a sending server would: each is
    done once ``_attempt`` says its answer was final; anything else is tried again after a
    pause, unless ``resend`` is False (the sender gave up). The SMTP ``Mta`` and the webhook
    ``Sender`` (``tests/devtools/crashweb.py``) differ only in what one attempt is."""

    resend = True

    def __init__(self, port: int, items: list[T]) -> None:
        self.port, self.items = port, items
        self.unsent: queue.Queue[T] = queue.Queue()
        for item in items:
            self.unsent.put(item)
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._deliver, daemon=True) for _ in range(SENDERS)]

    def start(self) -> RetryingSender[T]:
        for t in self.threads:
            t.start()
        return self

    @property
    def done(self) -> bool:
        return all(item.done for item in self.items)

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(30)

    def _attempt(self, item: T) -> bool:
        """One attempt; True when the answer is final."""
        raise NotImplementedError

    def _deliver(self) -> None:
        while not self.stopping.is_set() and not self.done:
            try:
                item = self.unsent.get(timeout=0.05)
            except queue.Empty:
                continue
            item.attempts += 1
            if self._attempt(item) or not self.resend:
                item.done = True
            else:
                self.stopping.wait(RESEND_PAUSE)
                self.unsent.put(item)


class Mta(RetryingSender[Letter]):
    """A mail server delivering ``letters``: each is done at a 250 or a 5xx; a dropped or
    refused connection, or a 4xx, is tried again, unless ``resend`` is False."""

    def __init__(self, port: int, to: str, letters: list[Letter], *, resend: bool) -> None:
        super().__init__(port, letters)
        self.to, self.letters, self.resend = to, letters, resend

    def _attempt(self, letter: Letter) -> bool:
        return self._send(letter)

    def _send(self, letter: Letter) -> bool:
        """One attempt; True when the answer is final (a 250 or a 5xx)."""
        wire = letter.raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        try:
            smtp = smtplib.SMTP("127.0.0.1", self.port, timeout=30)
        except OSError as exc:
            letter.answer = f"connect: {exc}"
            return False
        try:
            smtp.sendmail(letter.sender, [self.to], wire)
            letter.accepted, letter.answer = True, "250"
        except smtplib.SMTPResponseException as exc:
            letter.answer = f"{exc.smtp_code} {exc.smtp_error!r}"
            return exc.smtp_code >= 500
        except (smtplib.SMTPException, OSError) as exc:
            letter.answer = f"{type(exc).__name__}: {exc}"
            return False
        finally:
            try:
                smtp.quit()
            except (smtplib.SMTPException, OSError):
                smtp.close()
        return True


if __name__ == "__main__":
    main(sys.argv)
