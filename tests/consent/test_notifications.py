"""People told when they are needed: an outbox written with the event, sent at least once."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from django.core import mail
from django.utils import timezone

from agent.consent.gate import gate_request
from approvals.escalation import approvals_escalate_due
from approvals.models import Approval, Notification, WebhookDelivery, WebhookEndpoint
from approvals.notifications import notify_expiring_due
from approvals.outbox import outbox_send_due
from deskhand.infra.retry import backoff
from tests.consent.conftest import bare_run, gate_call, restart
from tests.console.conftest import free_port
from tests.durability.helpers import start
from tests.fixtures.dbos import wait_parked
from tests.support.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)

APPROVERS = ["agent@northwind.test", "owner@northwind.test"]  # not the viewer


@pytest.fixture
def requested(tseeded) -> Approval:
    run = bare_run()
    return Approval.objects.get(pk=gate_request(str(run.id), 1, gate_call(3800)).approval_id)


def test_an_approval_requested_emails_each_approver_once_with_a_link_and_no_customer_words(
    requested, mailoutbox
):
    rows = Notification.objects.filter(approval=requested, event="approval.requested")
    assert sorted(rows.values_list("recipient", flat=True)) == APPROVERS
    assert mailoutbox == []  # written with the request, sent by the sweep

    assert outbox_send_due() == {"sent": 2, "failed": 0}
    assert outbox_send_due() == {"sent": 0, "failed": 0}  # sent once
    assert sorted(m.to[0] for m in mailoutbox) == APPROVERS
    by_id = {str(r.id): r for r in rows}
    for message in mailoutbox:
        msg_id = message.extra_headers["Message-ID"]
        row = by_id[msg_id.strip("<>").split("@")[0]]
        assert row.recipient == message.to[0] and row.sent_at is not None
        assert f"#approval-{requested.id}" in message.body
        assert "NW-1" in message.subject and "a refund" in message.subject
        customer = requested.run.ticket.customer
        for private in (customer.name, customer.email, "stale beans", "NW-1042"):
            assert private not in message.body + message.subject


def test_an_escalation_emails_the_owners_once(requested, mailoutbox):
    outbox_send_due()
    mailoutbox.clear()
    later = requested.requested_at + dt.timedelta(
        seconds=requested.merchant.approval_sla_seconds + 1
    )
    assert len(approvals_escalate_due(now=later)) == 1
    assert approvals_escalate_due(now=later) == []
    outbox_send_due()
    assert [(m.to, m.subject.split("]")[1].strip()[:10]) for m in mailoutbox] == [
        (["owner@northwind.test"], "Escalated:")
    ]


def test_an_approval_about_to_expire_warns_its_approvers_once(requested, mailoutbox):
    soon = requested.expires_at - dt.timedelta(minutes=10)
    assert notify_expiring_due(now=requested.requested_at) == 0  # not yet within the window
    assert notify_expiring_due(now=soon) == 1
    assert notify_expiring_due(now=soon) == 0
    outbox_send_due(now=soon)
    expiring = [m for m in mailoutbox if "Expiring soon" in m.subject]
    assert sorted(m.to[0] for m in expiring) == APPROVERS


def test_a_failed_send_is_kept_and_retried_after_its_backoff(requested, mailoutbox, settings):
    settings.MAILERS = {"default": {"BACKEND": "tests.consent.test_notifications.RefusingBackend"}}
    now = timezone.now()
    assert outbox_send_due(now=now) == {"sent": 0, "failed": 2}
    row = Notification.objects.filter(approval=requested).first()
    assert row.attempts == 1 and row.sent_at is None and "refused" in row.last_error
    assert row.next_attempt_at == now + backoff(1)
    assert outbox_send_due(now=now + backoff(1) - dt.timedelta(seconds=1))["failed"] == 0
    settings.MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
    assert outbox_send_due(now=now + backoff(1))["sent"] == 2
    assert len(mail.outbox) == 2


class RefusingBackend:
    """A mail server that is down."""

    def __init__(self, **kwargs: Any) -> None:
        pass

    def send_messages(self, messages: list[Any]) -> int:
        raise ConnectionRefusedError("refused by the test's mail server")


# --- webhooks --------------------------------------------------------------------------


class Receiver(http.server.ThreadingHTTPServer):
    def __init__(self, fail_first: int) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.fail_first = fail_first
        self.seen: list[tuple[dict[str, str], bytes, int]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hook"


class Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        code = 500 if len(self.server.seen) < self.server.fail_first else 204
        self.server.seen.append((dict(self.headers), body, code))
        self.send_response(code)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[Any]:
    def make(fail_first: int = 0) -> Receiver:
        server = Receiver(fail_first)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        made.append(server)
        return server

    made: list[Receiver] = []
    yield make
    for server in made:
        server.shutdown()
        server.server_close()


def _valid(headers: dict[str, str], body: bytes, secret: str) -> bool:
    mac = hmac.new(
        secret.encode(), headers["X-Deskhand-Timestamp"].encode() + b"." + body, hashlib.sha256
    )
    return hmac.compare_digest(headers["X-Deskhand-Signature"], f"sha256={mac.hexdigest()}")


def test_a_webhook_receiver_sees_each_event_signed_with_one_delivery_id(tseeded, receiver):
    server = receiver()
    WebhookEndpoint.objects.create(merchant=bare_run().merchant, url=server.url, secret="s3cret")
    approval = Approval.objects.get(
        pk=gate_request(str(bare_run("NW-4").id), 1, gate_call(900, order="NW-1101")).approval_id
    )
    later = approval.requested_at + dt.timedelta(seconds=approval.merchant.approval_sla_seconds + 1)
    approvals_escalate_due(now=later)
    outbox_send_due(now=later)

    events = [json.loads(body) for _, body, _ in server.seen]
    assert [e["event"] for e in events] == ["approval.requested", "approval.escalated"]
    for headers, body, _ in server.seen:
        assert _valid(headers, body, "s3cret")
        assert not _valid(headers, body, "another secret")
        assert headers["X-Deskhand-Delivery"] == json.loads(body)["delivery_id"]
    assert len({h["X-Deskhand-Delivery"] for h, _, _ in server.seen}) == 2
    assert all(e["approval"]["id"] == str(approval.id) for e in events)
    assert "Ben" not in server.seen[0][1].decode()  # no customer content


def test_a_webhook_that_fails_twice_is_received_on_the_third_try_with_the_same_delivery_id(
    requested, receiver
):
    server = receiver(fail_first=2)
    hook = WebhookEndpoint.objects.create(
        merchant=requested.merchant, url=server.url, secret="topsecret"
    )
    from approvals.notifications import NotificationEvent, notify_approval

    notify_approval(requested, NotificationEvent.ESCALATED)  # a second event, now with the hook
    row = Notification.objects.get(transport="webhook")
    clock = timezone.now()
    for attempt in (1, 2, 3):
        outbox_send_due(now=clock)
        row.refresh_from_db()
        assert row.attempts == attempt
        clock = row.next_attempt_at
    assert [code for _, _, code in server.seen] == [500, 500, 204]
    assert {h["X-Deskhand-Delivery"] for h, _, _ in server.seen} == {str(row.id)}
    assert all(_valid(h, b, hook.secret) for h, b, _ in server.seen)
    assert row.sent_at is not None
    log = list(WebhookDelivery.objects.filter(notification=row).order_by("attempt"))
    assert [(d.attempt, d.status_code, d.ok) for d in log] == [
        (1, 500, False),
        (2, 500, False),
        (3, 204, True),
    ]
    # The waits doubled: the second retry waited twice as long as the first.
    assert backoff(2) == 2 * backoff(1)


# --- a worker killed between the request and the send ------------------------------------


class Inbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        from email import message_from_bytes

        parsed = message_from_bytes(envelope.content)
        self.messages.append((envelope.rcpt_tos[0], parsed["Message-ID"]))
        return "250 OK"


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    yield inbox, port
    controller.stop()


@pytest.mark.crash
def test_a_worker_killed_before_and_after_the_send_still_delivers_every_email_with_one_message_id(
    worker_process, smtp
):
    inbox, port = smtp
    env = {
        "DESKHAND_EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "DESKHAND_EMAIL_HOST": "127.0.0.1",
        "DESKHAND_EMAIL_PORT": str(port),
    }
    # Dies at the first send attempt: after the request committed, before anything was sent.
    worker = worker_process("notify-kill", faults="before_send:email", env=env).start()
    run = start("NW-1", "owner@northwind.test")
    wait_parked(str(run.id))
    until("the worker to die at its first send", lambda: worker.proc.poll() is not None)
    assert worker.proc.returncode == -9 and inbox.messages == []
    rows = list(Notification.objects.filter(approval__run=run, transport="email"))
    assert len(rows) == 2 and all(r.sent_at is None for r in rows)

    # Dies right after the mail server accepted the first one, before it was marked sent.
    restart(worker, faults="after_send:email")
    until("the worker to die after the first send", lambda: worker.proc.poll() is not None)
    assert worker.proc.returncode == -9 and len(inbox.messages) == 1

    restart(worker, faults="")
    until(
        "every notification marked sent",
        lambda: not Notification.objects.filter(approval__run=run, sent_at__isnull=True).exists(),
        seen=lambda: list(Notification.objects.filter(approval__run=run).values("sent_at")),
    )
    ids = {f"<{r.id}@deskhand.local>": r.recipient for r in rows}
    # At least once: the interrupted one twice, under the same Message-ID; every one arrived.
    assert len(inbox.messages) == 3
    assert {m for _, m in inbox.messages} == set(ids)
    for rcpt, msg_id in inbox.messages:
        assert ids[msg_id] == rcpt
    worker.stop()


def test_an_owner_sets_the_webhook_from_the_cli_and_the_secret_is_printed_once(tseeded):
    from io import StringIO

    from django.core.management import call_command
    from django.core.management.base import CommandError

    from approvals.models import AuditEvent

    out = StringIO()
    call_command(
        "webhook",
        "northwind",
        "--as",
        "owner@northwind.test",
        "--url",
        "http://127.0.0.1:9/h",
        "--json",
        stdout=out,
    )
    printed = json.loads(out.getvalue())
    hook = WebhookEndpoint.objects.get(merchant__slug="northwind")
    assert printed["secret"] == hook.secret and len(hook.secret) >= 32 and hook.active
    with pytest.raises(CommandError, match="only an owner may change the notification webhook"):
        call_command("webhook", "northwind", "--as", "agent@northwind.test", "--off")
    with pytest.raises(CommandError, match="is not an http"):
        call_command("webhook", "northwind", "--as", "owner@northwind.test", "--url", "ftp://x")
    call_command("webhook", "northwind", "--as", "owner@northwind.test", "--off", stdout=StringIO())
    hook.refresh_from_db()
    assert not hook.active
    assert AuditEvent.objects.filter(action="webhook.change").count() == 2
