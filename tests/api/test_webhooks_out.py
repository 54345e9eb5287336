"""Outbound webhooks are signed with Standard Webhooks: a receiver verifies them with the
``standardwebhooks`` library alone, the webhook-id stays the same on a retry, and a secret
made before the change still verifies (keyed by its own bytes)."""

from __future__ import annotations

import base64
import datetime as dt
import json

from standardwebhooks import Webhook

from approvals.models import Approval
from approvals.notification_models import WebhookEndpoint
from approvals.notifications import webhook_set
from approvals.outbox import outbox_send_due
from deskhand.domain.desk.models import Merchant
from deskhand.web.api import webhooks
from tests.consent.test_notifications import bare_run, gate_call, gate_request, receiver
from tests.console.conftest import NW_OWNER, user

__all__ = ["receiver"]


def _approval() -> Approval:
    return Approval.objects.get(
        pk=gate_request(str(bare_run("NW-4").id), 1, gate_call(900, order="NW-1101")).approval_id
    )


def test_a_receiver_verifies_approval_requested_with_the_standard_library(tseeded, receiver):
    server = receiver(fail_first=1)
    _, secret = webhook_set(
        merchant=Merchant.objects.get(slug="northwind"),
        user=user(NW_OWNER),
        url=server.url,
        channel="cli",
    )
    assert secret.startswith("whsec_")
    _approval()
    outbox_send_due()
    outbox_send_due(now=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    assert len(server.seen) == 2  # failed once, then accepted
    ids = set()
    for headers, body, _ in server.seen:
        lowered = {k.lower(): v for k, v in headers.items()}
        payload = Webhook(secret).verify(body, lowered)
        assert payload["event"] == "approval.requested"
        webhooks.ApprovalEvent.model_validate(payload)  # what openapi.json's webhooks say
        ids.add(lowered["webhook-id"])
        assert lowered["webhook-id"] == payload["delivery_id"]
    assert len(ids) == 1


def test_a_secret_from_before_still_verifies_keyed_by_its_bytes(tseeded, receiver):
    server = receiver()
    WebhookEndpoint.objects.create(
        merchant=Merchant.objects.get(slug="northwind"), url=server.url, secret="s3cret"
    )
    _approval()
    outbox_send_due()
    headers, body, _ = server.seen[0]
    lowered = {k.lower(): v for k, v in headers.items()}
    moved = "whsec_" + base64.b64encode(b"s3cret").decode()
    assert json.loads(body)["event"] == "approval.requested"
    assert Webhook(moved).verify(body, lowered)["event"] == "approval.requested"
    assert "x-deskhand-signature" in lowered  # the old receivers keep working meanwhile


def test_a_finished_run_is_a_signed_run_finished_event_once(tseeded, receiver):
    from agent.models import StopReason
    from agent.run.services import run_mark_failed
    from approvals.notification_models import Notification
    from tests.console.conftest import make_run

    server = receiver()
    _, secret = webhook_set(
        merchant=Merchant.objects.get(slug="northwind"),
        user=user(NW_OWNER),
        url=server.url,
        channel="cli",
    )
    run = make_run("NW-2", status="running")
    assert run_mark_failed(run_id=str(run.pk), reason=StopReason.ENQUEUE_FAILED, detail="test")
    assert not run_mark_failed(run_id=str(run.pk), reason=StopReason.ENQUEUE_FAILED, detail="again")
    assert Notification.objects.filter(run=run, event="run.finished").count() == 1
    outbox_send_due()
    [(headers, body, _)] = server.seen
    payload = Webhook(secret).verify(body, {k.lower(): v for k, v in headers.items()})
    assert payload["event"] == "run.finished"
    webhooks.RunFinishedEvent.model_validate(payload)  # what openapi.json's webhooks say
    assert payload["run"]["id"] == str(run.pk) and payload["run"]["status"] == "failed"
    assert payload["run"]["ticket"] == "NW-2" and "summary" not in payload["run"]
