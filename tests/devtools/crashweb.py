"""The crash web process: a real ``manage.py web`` that SIGKILLs itself at a named point.

Usage: ``python -m tests.devtools.crashweb PORT [SPEC]``

``SPEC`` is a comma-separated list of ``point:target[:nth]`` from ``deskhand.infra.crashpoints``:
``after_store:inbound:5`` dies the fifth time a webhook's message is committed and not yet
handed to its workflow; ``after_enqueue:inbound:5`` once it is handed on and Mailgun not yet
answered; ``after_store:customer_line:2`` the second time a help desk's line is committed
and its routing workflow not yet enqueued. The intake crash sweep
(``tests/devtools/crash_intake.py``) runs it as ``tests/devtools/crashreceiver.py`` runs the
SMTP receiver, and talks to it with ``Sender``: a webhook sender that posts again whatever
got no 2xx, as Mailgun and a help desk do.

Nothing in the product reads a flag, a setting or an environment variable for this: only
this launcher installs crash points, in its own process, before the command starts.
"""

from __future__ import annotations

import dataclasses
import email
import email.policy
import http.client
import json
import os
import sys
import uuid
from typing import Any
from urllib.parse import urlencode

from tests.devtools.crashreceiver import Letter, RetryingSender, install
from tests.devtools.crashworker import ROOT, CrashProcess, database_url


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")
    import django

    django.setup()
    from django.core.management import call_command

    port, spec = int(argv[1]), argv[2] if len(argv) > 2 else ""
    install(spec)
    call_command("web", host="127.0.0.1", port=port, no_access_log=True)


class Web(CrashProcess):
    """``python -m tests.devtools.crashweb``: the web process on one port, which a schedule
    may kill and start again on the same port (a webhook sender retries the same URL)."""

    module = "tests.devtools.crashweb"

    def __init__(self, name: str, port: int) -> None:
        super().__init__(f"{name}-web")
        self.port = port

    def start(self, spec: str = "") -> Web:
        from tests.mail.conftest import SIGNING_KEY  # the key the tests' Mailgun posts sign with

        env = dict(
            os.environ,
            DATABASE_URL=database_url(),
            PYTHONUNBUFFERED="1",
            DJANGO_SETTINGS_MODULE="deskhand.settings",
            DESKHAND_MAILGUN_WEBHOOK_SIGNING_KEY=SIGNING_KEY,
        )
        env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)  # the server keeps Django's async guard
        self._launch(
            [str(self.port), spec], spec, env, f"Uvicorn running on http://127.0.0.1:{self.port}"
        )
        return self


# --- the other end: a webhook sender -----------------------------------------------------------


@dataclasses.dataclass
class Delivery:
    """One webhook post and what the web process answered to it.

    ``message_id`` is the Message-ID the post's line is stored under: the mail's own for
    Mailgun, the one made of the delivery's ``webhook-id`` for a help desk. The same
    signed post is sent again each time, as both senders do.
    """

    message_id: str
    path: str
    body: bytes
    headers: dict[str, str]
    attempts: int = 0
    status: int = 0  # of the last answer; 0 when the connection ended without one
    answer: str = ""  # the last answer's first words, or how the connection ended
    reply: Any = None  # the accepted answer's JSON, if it was JSON
    done: bool = False

    @property
    def accepted(self) -> bool:
        return 200 <= self.status < 300

    @property
    def resent(self) -> bool:
        return self.attempts > 1

    @classmethod
    def mailgun(cls, letter: Letter, *, parsed: bool) -> Delivery:
        """``letter`` as Mailgun forwards it: the raw MIME (a route ending in ``mime``), or
        its "fully parsed" fields. Signed once: a retry is the same post."""
        from tests.mail.conftest import NORTHWIND, mailgun_mime, mailgun_parsed

        address = letter.sender
        if parsed:
            msg = email.message_from_bytes(letter.raw, policy=email.policy.default)
            text = msg.get_body(("plain",))
            assert text is not None, "a letter of the burst is plain text"
            fields = mailgun_parsed(
                sender=address,
                subject=str(msg["Subject"]),
                body=str(text.get_content()).strip(),
                message_id=letter.message_id,
            )
            path = "/inbound/mailgun/"
        else:
            fields = mailgun_mime(letter.raw, sender=address, recipient=NORTHWIND)
            path = "/inbound/mailgun/mime"
        return cls(
            letter.message_id,
            path,
            urlencode(fields).encode(),
            {"Content-Type": "application/x-www-form-urlencoded"},
        )

    @classmethod
    def helpdesk(cls, url: str, secret: str, payload: dict[str, Any]) -> Delivery:
        """``payload`` as a help desk delivers it: signed under one ``webhook-id``, which a
        retry keeps (the desk's Standard Webhooks signature)."""
        from tests.api.test_helpdesk import signed

        webhook_id = f"msg_{uuid.uuid4().hex}"
        delivery = signed(secret, payload, webhook_id=webhook_id)
        slug = url.rstrip("/").rsplit("/", 1)[-1]
        return cls(
            f"<{webhook_id}@{slug}.helpdesk>",
            url,
            delivery["data"],
            {
                "Content-Type": "application/json",
                "webhook-id": delivery["HTTP_WEBHOOK_ID"],
                "webhook-timestamp": delivery["HTTP_WEBHOOK_TIMESTAMP"],
                "webhook-signature": delivery["HTTP_WEBHOOK_SIGNATURE"],
            },
        )


class Sender(RetryingSender[Delivery]):
    """A webhook sender posting ``deliveries``: a post is done at a 2xx or a 4xx (Mailgun's
    406 is "do not retry"); a connection refused or dropped, or a 5xx, is posted again."""

    def __init__(self, port: int, deliveries: list[Delivery]) -> None:
        super().__init__(port, deliveries)
        self.deliveries = deliveries

    def _attempt(self, delivery: Delivery) -> bool:
        return self._post(delivery)

    def _post(self, delivery: Delivery) -> bool:
        """One attempt; True when the answer is final (a 2xx or a 4xx)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("POST", delivery.path, delivery.body, delivery.headers)
            response = conn.getresponse()
            text = response.read().decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            delivery.status, delivery.answer = 0, f"{type(exc).__name__}: {exc}"
            return False
        finally:
            conn.close()
        delivery.status, delivery.answer = response.status, f"{response.status} {text[:120]!r}"
        if delivery.accepted:
            try:
                delivery.reply = json.loads(text)
            except ValueError:
                delivery.reply = None
        return response.status < 500


if __name__ == "__main__":
    main(sys.argv)
