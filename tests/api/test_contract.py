"""The API's contract is the server's (issue 36): what ``openapi.json`` declares is what the
server takes and refuses, in process. Schemathesis attacks the same over a real server
(``test_real_server_api.py``); these pin the rules it found one by one."""

from __future__ import annotations

import json

import pytest

from deskhand.domain.apikeys import store
from deskhand.domain.apikeys.models import StoredResponse
from deskhand.domain.desk.models import Ticket
from tests.api.conftest import api_client, bearer, new_key

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"
TICKET = {"customer_email": "ada@example.com", "subject": "A mug", "body": "It broke."}


def document() -> dict:
    return api_client().get("/api/v1/openapi.json").json()


def send(token: str, body: bytes, content_type: str | None, path: str = "/api/v1/tickets", **h):
    headers = {**bearer(token), **h}
    if content_type is None:
        # The test client always names one; a raw request may not.
        return api_client().generic("POST", path, body, content_type="", **headers)
    return api_client().generic("POST", path, body, content_type=content_type, **headers)


def test_a_retry_with_its_body_written_again_is_a_replay_and_another_body_is_still_refused(
    seeded,
):
    token = new_key(["write"])
    first = send(token, json.dumps(TICKET).encode(), "application/json", HTTP_IDEMPOTENCY_KEY="k")
    assert first.status_code == 201, first.content
    rewritten = json.dumps(dict(reversed(TICKET.items())), indent=2).encode()
    again = send(token, rewritten, "application/json", HTTP_IDEMPOTENCY_KEY="k")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["reference"] == first.json()["reference"]
    other = send(
        token,
        json.dumps({**TICKET, "body": "It broke twice."}).encode(),
        "application/json",
        HTTP_IDEMPOTENCY_KEY="k",
    )
    assert other.status_code == 422 and other.json()["type"].endswith("idempotency-key-reused")
    assert Ticket.objects.filter(subject="A mug").count() == 1


def test_an_answer_kept_under_the_raw_bytes_fingerprint_still_replays(seeded):
    """Rows kept before the canonical fingerprint hashed the raw body; they live 24 hours."""
    token = new_key(["write"])
    raw = json.dumps(TICKET).encode()
    first = send(token, raw, "application/json", HTTP_IDEMPOTENCY_KEY="old")
    assert first.status_code == 201
    kept = StoredResponse.objects.get(idempotency_key="old")
    kept.fingerprint = store.fingerprint("POST", "/api/v1/tickets", raw)  # as stored before
    kept.save(update_fields=["fingerprint"])
    assert kept.fingerprint != store.fingerprints("POST", "/api/v1/tickets", raw)[0]
    again = send(token, raw, "application/json", HTTP_IDEMPOTENCY_KEY="old")
    assert again.status_code == 200 and again.json()["reference"] == first.json()["reference"]


@pytest.mark.parametrize("content_type", ["text/plain", None, "application/x-www-form-urlencoded"])
def test_a_body_that_is_not_sent_as_json_is_415_and_opens_no_ticket(seeded, content_type):
    token = new_key(["write"])
    before = Ticket.objects.count()
    r = send(token, json.dumps(TICKET).encode(), content_type)
    assert r.status_code == 415 and r["Content-Type"] == PROBLEM
    assert r.json()["type"] == "urn:deskhand:problem:unsupported-media-type"
    assert Ticket.objects.count() == before
    ok = send(token, json.dumps(TICKET).encode(), "application/json; charset=utf-8")
    assert ok.status_code == 201


@pytest.mark.parametrize(
    "path", ["/api/v1/", "/api/v1", "/api/v1/tickets/NW-1/nowhere", "/api/v1/v2/"]
)
def test_every_path_under_api_v1_answers_a_problem_never_a_page(seeded, path):
    r = api_client().get(path, **bearer(new_key(["read"])))
    assert r.status_code == 404 and r["Content-Type"] == PROBLEM
    assert r.json()["type"] == "urn:deskhand:problem:not-found"


def test_the_page_size_and_the_idempotency_key_are_taken_exactly_as_declared(seeded):
    token = new_key(["read", "write"])
    doc = document()
    limit = next(
        p for p in doc["paths"]["/api/v1/tickets"]["get"]["parameters"] if p["name"] == "limit"
    )["schema"]
    assert (limit["minimum"], limit["maximum"]) == (1, 100)
    for n, status in ((0, 422), (1, 200), (100, 200), (101, 422)):
        got = api_client().get(f"/api/v1/tickets?limit={n}", **bearer(token)).status_code
        assert got == status, n
    key = next(
        p
        for p in doc["paths"]["/api/v1/tickets"]["post"]["parameters"]
        if p["name"] == "Idempotency-Key"
    )["schema"]
    assert key["maxLength"] == store.KEY_MAX
    body = json.dumps(TICKET).encode()
    for value, status in (("a" * 255, 201), ("a b", 201), ("a" * 256, 400), ("é", 400)):
        r = send(token, body, "application/json", HTTP_IDEMPOTENCY_KEY=value)
        assert r.status_code == status, value
        assert (r.status_code == 400) == (store.key_valid(value) is False)


def test_the_document_declares_the_replay_the_415_the_help_desk_and_the_events(seeded):
    doc = document()
    create = doc["paths"]["/api/v1/tickets"]["post"]["responses"]
    assert create["200"]["content"] == create["201"]["content"] != {}
    assert "Idempotent-Replayed" in create["200"]["headers"]
    assert PROBLEM in create["415"]["content"]
    assert (
        create["201"]["links"]["ReadTheTicket"]["operationId"]
        == (doc["paths"]["/api/v1/tickets/{reference}"]["get"]["operationId"])
    )
    desk = doc["paths"]["/api/v1/helpdesk/{merchant}/{source}"]["post"]
    assert desk["security"] == [{"StandardWebhooks": []}]
    assert {"201", "200", "401"} <= set(desk["responses"])
    from approvals.notification_models import WEBHOOK_EVENTS

    assert {str(e) for e in WEBHOOK_EVENTS} | {"helpdesk.reply"} == set(doc["webhooks"])
    for event in doc["webhooks"].values():
        names = {p["name"] for p in event["post"]["parameters"]}
        assert {"webhook-id", "webhook-timestamp", "webhook-signature"} <= names
