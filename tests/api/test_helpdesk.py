"""A help desk's signed webhook: verified (Standard Webhooks), once per webhook-id and per
external_id, customer lines on the thread the way mail adds them."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from django.test import Client
from standardwebhooks import Webhook

from deskhand.domain.apikeys.helpdesk import source_create
from deskhand.domain.apikeys.models import ExternalTicket
from deskhand.domain.desk.models import Merchant, Ticket, TicketMessage
from deskhand.web.api.webhooks import DeskReply, HelpdeskAccepted, HelpdeskTicketCreated
from tests.consent.test_notifications import receiver
from tests.console.conftest import NW_OWNER, NW_VIEWER, user

__all__ = ["receiver"]

pytestmark = pytest.mark.django_db
URL = "/api/v1/helpdesk/northwind/zendesk"


def signed(secret: str, payload: dict, *, webhook_id: str = "", age: int = 0) -> dict:
    body = json.dumps(payload).encode()
    webhook_id = webhook_id or f"msg_{uuid.uuid4().hex}"
    when = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=age)
    return {
        "data": body,
        "content_type": "application/json",
        "HTTP_WEBHOOK_ID": webhook_id,
        "HTTP_WEBHOOK_TIMESTAMP": str(int(when.timestamp())),
        "HTTP_WEBHOOK_SIGNATURE": Webhook(secret).sign(webhook_id, when, body),
    }


def new_ticket(external_id: str = "ZD-1001") -> dict:
    return {
        "type": "ticket.created",
        "external_id": external_id,
        "customer": {"email": "ada@example.com", "name": "Ada"},
        "subject": "Refund for a broken mug",
        "body": "The mug from order NW-1042 arrived broken.",
    }


@pytest.fixture
def secret(seeded) -> str:
    _, made = source_create(
        merchant=Merchant.objects.get(slug="northwind"), user=user(NW_OWNER), slug="zendesk"
    )
    return made


def test_a_signed_ticket_is_stored_once_per_webhook_id_and_per_external_id(secret):
    HelpdeskTicketCreated.model_validate(new_ticket())  # the document's body for it
    first = Client().post(URL, **signed(secret, new_ticket(), webhook_id="msg_1"))
    assert first.status_code == 201, first.content
    HelpdeskAccepted.model_validate(first.json(), strict=False)
    ref = first.json()["ticket"]
    again = Client().post(URL, **signed(secret, new_ticket(), webhook_id="msg_1"))
    assert again.status_code == 200 and again.json() == {**first.json(), "duplicate": True}
    other_id = Client().post(URL, **signed(secret, new_ticket(), webhook_id="msg_2"))
    assert other_id.json()["ticket"] == ref
    assert ExternalTicket.objects.filter(external_id="ZD-1001").count() == 1
    ticket = Ticket.objects.get(reference=ref, merchant__slug="northwind")
    assert ticket.customer.email == "ada@example.com"
    line = TicketMessage.objects.filter(ticket=ticket).first()
    assert line is not None and line.channel == "helpdesk" and line.kind == "customer"


def test_a_customer_message_joins_the_ticket_the_desk_named(secret):
    ref = Client().post(URL, **signed(secret, new_ticket())).json()["ticket"]
    reply = {"type": "message.created", "external_id": "ZD-1001", "body": "Any news?"}
    r = Client().post(URL, **signed(secret, reply))
    assert r.status_code == 201 and r.json()["ticket"] == ref
    bodies = list(
        TicketMessage.objects.filter(ticket__reference=ref, ticket__merchant__slug="northwind")
        .order_by("id")
        .values_list("body", flat=True)
    )
    assert bodies == ["The mug from order NW-1042 arrived broken.", "Any news?"]
    unknown = {**reply, "external_id": "ZD-9"}
    r = Client().post(URL, **signed(secret, unknown))
    assert r.status_code == 404 and r.json()["field"] == "external_id"


def test_a_bad_or_stale_signature_stores_nothing(secret):
    wrong = "whsec_" + "QUJD" * 8
    r = Client().post(URL, **signed(wrong, new_ticket()))
    assert r.status_code == 401 and r["Content-Type"] == "application/problem+json"
    r = Client().post(URL, **signed(secret, new_ticket(), age=600))
    assert r.status_code == 401
    tampered = signed(secret, new_ticket())
    tampered["data"] = tampered["data"].replace(b"broken", b"fine!!")
    assert Client().post(URL, **tampered).status_code == 401
    assert not ExternalTicket.objects.exists()


def test_bad_payloads_are_problems_naming_the_field(secret):
    cases = [
        ({"type": "ticket.deleted", "external_id": "x", "body": "b"}, "type"),
        ({"type": "ticket.created", "external_id": "x", "body": "b"}, "customer"),
        ({**new_ticket(), "body": "a\x00b"}, "body"),
        ({**new_ticket(), "external_id": 7}, "external_id"),
    ]
    for payload, field in cases:
        r = Client().post(URL, **signed(secret, payload))
        assert r.status_code == 422 and r.json()["field"] == field, (payload, r.content)
    assert Client().get(URL).status_code == 405


def test_only_an_owner_connects_a_help_desk(seeded):
    from deskhand.domain.desk.permissions import NotAllowed

    with pytest.raises(NotAllowed):
        source_create(
            merchant=Merchant.objects.get(slug="northwind"), user=user(NW_VIEWER), slug="front"
        )


def test_the_agents_reply_reaches_the_desk_signed_once_under_a_stable_id(secret, receiver):
    from deskhand.domain.apikeys.models import HelpdeskReply, HelpdeskSource
    from deskhand.domain.apikeys.relay import replies_relay
    from deskhand.domain.desk.services import email_send

    desk = receiver(fail_first=1)
    HelpdeskSource.objects.filter(slug="zendesk").update(reply_url=desk.url)
    ref = Client().post(URL, **signed(secret, new_ticket())).json()["ticket"]
    ticket = Ticket.objects.get(reference=ref, merchant__slug="northwind")
    email_send(
        ticket=ticket,
        subject="Your refund",
        body="Refunded 19.00.",
        run_id=None,
        ledger_entry_id=None,
    )
    first = replies_relay()
    assert first["helpdesk_replies_claimed"] == 1 and first["helpdesk_replies_failed"] == 1
    later = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
    assert replies_relay(now=later)["helpdesk_replies_sent"] == 1
    assert replies_relay(now=later + dt.timedelta(hours=2)) == {
        "helpdesk_replies_claimed": 0,
        "helpdesk_replies_sent": 0,
        "helpdesk_replies_failed": 0,
    }
    assert len(desk.seen) == 2
    ids = set()
    for headers, body, _ in desk.seen:
        lowered = {k.lower(): v for k, v in headers.items()}
        payload = Webhook(secret).verify(body, lowered)
        assert (
            payload["external_id"] == "ZD-1001" and "Refunded 19.00." in payload["message"]["body"]
        )
        DeskReply.model_validate(payload)  # what openapi.json's webhooks say
        ids.add(lowered["webhook-id"])
    assert len(ids) == 1 and HelpdeskReply.objects.get().attempts == 2
