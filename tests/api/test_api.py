"""The JSON API in-process: scopes, isolation, problems, idempotency, the rate limit, erasure.

The real-server tests (``test_real_server_api.py``) drive the same rules over uvicorn;
these are the quick ones, with DBOS's client faked (no worker picks the runs up).
"""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from agent.models import Run
from approvals.models import Approval, AuditEvent
from deskhand.domain.apikeys.models import ApiKey, StoredResponse
from deskhand.domain.apikeys.services import key_revoke
from tests.api.conftest import api_client, bearer, new_key
from tests.console.conftest import NW_OWNER, NW_VIEWER, make_approval, make_run, user

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


def post(path: str, token: str, body: dict, **headers: str):
    return api_client().post(
        path, json.dumps(body), content_type="application/json", **bearer(token), **headers
    )


def test_it_refuses_a_request_without_a_key_as_a_problem(seeded):
    r = api_client().get("/api/v1/tickets")
    assert r.status_code == 401
    assert r["Content-Type"] == PROBLEM
    body = r.json()
    assert body["type"] == "urn:deskhand:problem:unauthenticated"
    assert body["detail"].endswith(".")
    assert "Bearer" in r["WWW-Authenticate"]


def test_a_revoked_key_is_refused_at_once(seeded):
    token = new_key(["read"])
    assert api_client().get("/api/v1/tickets", **bearer(token)).status_code == 200
    key_revoke(key=ApiKey.objects.get(name="northwind read"), user=user(NW_OWNER))
    assert api_client().get("/api/v1/tickets", **bearer(token)).status_code == 401


def test_a_key_is_stored_hashed_and_its_last_use_is_kept(seeded):
    token = new_key(["read"])
    key = ApiKey.objects.get(name="northwind read")
    assert token not in (key.digest, key.prefix) and key.last_used_at is None
    api_client().get("/api/v1/usage", **bearer(token))
    key.refresh_from_db()
    assert key.last_used_at is not None


def test_a_read_key_cannot_write_or_decide(seeded):
    token = new_key(["read"])
    run = make_run("NW-1", status="awaiting_approval")
    approval = make_approval(run)
    r = post(
        f"/api/v1/approvals/{approval.pk}/decide",
        token,
        {"decision": "approve", "member": NW_OWNER},
    )
    assert r.status_code == 403 and r.json()["type"] == "urn:deskhand:problem:scope"
    r = post("/api/v1/runs", token, {"ticket": "NW-2"})
    assert r.status_code == 403
    approval.refresh_from_db()
    assert approval.status == "pending"


def test_another_merchants_key_gets_404_for_every_id_of_ours(seeded):
    lumen = new_key(["read", "write", "decide"], merchant="lumen")
    run = make_run("NW-1", status="awaiting_approval")
    approval = make_approval(run)
    for path in (
        "/api/v1/tickets/NW-1",
        f"/api/v1/runs/{run.pk}",
        f"/api/v1/approvals/{approval.pk}",
    ):
        r = api_client().get(path, **bearer(lumen))
        assert r.status_code == 404, path
        assert r["Content-Type"] == PROBLEM
    for path, body in (
        ("/api/v1/tickets/NW-1/messages", {"body": "hi"}),
        (f"/api/v1/runs/{run.pk}/cancel", {}),
        (f"/api/v1/runs/{run.pk}/steer", {"body": "hi"}),
        (f"/api/v1/approvals/{approval.pk}/decide", {"decision": "approve", "member": NW_OWNER}),
        ("/api/v1/runs", {"ticket": "NW-1"}),
    ):
        assert post(path, lumen, body).status_code == 404, path
    listed = api_client().get("/api/v1/runs", **bearer(lumen)).json()["items"]
    assert str(run.pk) not in {r["id"] for r in listed}


def test_a_decision_names_the_member_and_the_audit_names_the_key(seeded, fake_dbos):
    token = new_key(["read", "decide"])
    run = make_run("NW-1", status="awaiting_approval")
    approval = make_approval(run)
    r = post(
        f"/api/v1/approvals/{approval.pk}/decide",
        token,
        {"decision": "approve", "member": NW_VIEWER},
    )
    assert r.status_code == 403 and r.json()["field"] == "member"
    r = post(
        f"/api/v1/approvals/{approval.pk}/decide", token, {"decision": "deny", "member": NW_OWNER}
    )
    assert r.status_code == 422 and r.json()["field"] == "reason"
    r = post(
        f"/api/v1/approvals/{approval.pk}/decide",
        token,
        {"decision": "approve", "member": "nobody@northwind.test"},
    )
    assert r.status_code == 422 and r.json()["field"] == "member"
    r = post(
        f"/api/v1/approvals/{approval.pk}/decide",
        token,
        {"decision": "approve", "member": NW_OWNER},
    )
    assert r.status_code == 201, r.content
    assert r.json()["status"] == "approved" and r.json()["decided_by"] == NW_OWNER
    decided = Approval.objects.get(pk=approval.pk)
    assert decided.decided_by == user(NW_OWNER) and decided.channel == "api"
    event = AuditEvent.objects.get(action="api.approval.decide")
    assert event.actor == user(NW_OWNER) and event.detail["key"].startswith("northwind read+decide")
    again = post(
        f"/api/v1/approvals/{approval.pk}/decide",
        token,
        {"decision": "approve", "member": NW_OWNER},
    )
    assert again.status_code == 409


def test_a_narrower_call_is_approved_and_a_wider_one_refused(seeded, fake_dbos):
    token = new_key(["decide"])
    approval = make_approval(make_run("NW-1", status="awaiting_approval"), amount_cents=1900)
    body = {"decision": "approve", "member": NW_OWNER, "changes": {"amount_cents": 5000}}
    r = post(f"/api/v1/approvals/{approval.pk}/decide", token, body)
    assert r.status_code == 422 and r.json()["field"] == "changes"
    body["changes"] = {"amount_cents": 1000}
    r = post(f"/api/v1/approvals/{approval.pk}/decide", token, body)
    assert r.status_code == 201, r.content
    assert r.json()["approved_arguments"]["amount_cents"] == 1000


def test_a_ticket_opened_and_answered_through_the_api_is_one_thread(seeded):
    token = new_key(["read", "write"])
    r = post(
        "/api/v1/tickets",
        token,
        {"customer_email": "new@example.com", "subject": "Where is it?", "body": "Order NW-1042?"},
    )
    assert r.status_code == 201, r.content
    ref = r.json()["reference"]
    r = post(f"/api/v1/tickets/{ref}/messages", token, {"body": "Any news?"})
    assert r.status_code == 201
    thread = api_client().get(f"/api/v1/tickets/{ref}", **bearer(token)).json()
    assert [m["body"] for m in thread["messages"]] == ["Order NW-1042?", "Any news?"]
    assert {m["channel"] for m in thread["messages"]} == {"api"}


def test_tickets_page_by_an_opaque_cursor_and_a_forged_one_is_refused_naming_it(seeded):
    token = new_key(["read"])
    first = api_client().get("/api/v1/tickets?limit=1", **bearer(token)).json()
    assert len(first["items"]) == 1 and first["next_cursor"]
    second = (
        api_client()
        .get(f"/api/v1/tickets?limit=1&cursor={first['next_cursor']}", **bearer(token))
        .json()
    )
    assert second["items"][0]["reference"] != first["items"][0]["reference"]
    r = api_client().get("/api/v1/tickets?cursor=AAAA", **bearer(token))  # base64url, not ours
    assert r.status_code == 400 and r.json()["field"] == "cursor"
    r = api_client().get("/api/v1/tickets?cursor=%%%", **bearer(token))  # not even base64url
    assert r.status_code == 422 and r.json()["field"] == "cursor"


def test_bad_input_is_a_problem_naming_the_field_never_a_500(seeded):
    token = new_key(["read", "write"])
    r = post("/api/v1/tickets", token, {"customer_email": "x@y", "subject": ""})
    assert r.status_code == 422 and r["Content-Type"] == PROBLEM
    assert r.json()["field"] in ("subject", "body")
    r = api_client().post(
        "/api/v1/tickets", b"{not json", content_type="application/json", **bearer(token)
    )
    assert r.status_code in (400, 422) and r["Content-Type"] == PROBLEM
    r = api_client().get("/api/v1/runs/not-a-uuid", **bearer(token))
    assert r.status_code == 422 and r["Content-Type"] == PROBLEM
    r = api_client().get("/api/v1/nowhere", **bearer(token))
    assert r.status_code == 404 and r["Content-Type"] == PROBLEM
    r = api_client().delete("/api/v1/tickets", **bearer(token))
    assert r.status_code == 405 and r["Content-Type"] == PROBLEM


def test_the_same_idempotency_key_replays_and_another_body_is_refused(seeded, fake_dbos):
    token = new_key(["write"])
    first = post("/api/v1/runs", token, {"ticket": "NW-2"}, HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == 201, first.content
    again = post("/api/v1/runs", token, {"ticket": "NW-2"}, HTTP_IDEMPOTENCY_KEY="k-1")
    assert again.status_code == 200 and again["Idempotent-Replayed"] == "true"
    assert again.json()["id"] == first.json()["id"]
    assert Run.objects.filter(ticket__reference="NW-2", merchant__slug="northwind").count() == 1
    other = post("/api/v1/runs", token, {"ticket": "NW-3"}, HTTP_IDEMPOTENCY_KEY="k-1")
    assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key"


def test_a_stored_response_is_erased_with_its_customer(seeded):
    from agent.privacy.erasure import customer_erase, erasure_for

    token = new_key(["write"])
    r = post(
        "/api/v1/tickets",
        token,
        {"customer_email": "gone@example.com", "subject": "Forget me", "body": "Please."},
        HTTP_IDEMPOTENCY_KEY="erase-1",
    )
    assert r.status_code == 201
    stored = StoredResponse.objects.get(idempotency_key="erase-1")
    assert "gone@example.com" in json.dumps(stored.body)
    erasure = erasure_for(email="gone@example.com", user=user(NW_OWNER))
    counts = customer_erase(erasure, user=user(NW_OWNER))
    assert counts["api_stored_responses"] == 1
    stored.refresh_from_db()
    assert "gone@example.com" not in json.dumps(stored.body)
    replay = post(
        "/api/v1/tickets",
        token,
        {"customer_email": "gone@example.com", "subject": "Forget me", "body": "Please."},
        HTTP_IDEMPOTENCY_KEY="erase-1",
    )
    assert replay.status_code == 410 and "gone@" not in replay.content.decode()


@override_settings(DESKHAND_API_KEY_LIMIT=3, DESKHAND_API_KEY_LIMIT_PERIOD_SEC=60)
def test_each_key_is_rate_limited_with_429_and_retry_after(seeded):
    token, other = new_key(["read"]), new_key(["read"], name="second")
    codes = [api_client().get("/api/v1/usage", **bearer(token)).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    r = api_client().get("/api/v1/usage", **bearer(token))
    assert r.status_code == 429 and 1 <= int(r["Retry-After"]) <= 60
    assert r["Content-Type"] == PROBLEM
    assert api_client().get("/api/v1/usage", **bearer(other)).status_code == 200


def test_the_openapi_document_is_served_and_names_every_resource(seeded):
    doc = api_client().get("/api/v1/openapi.json").json()
    assert {
        "/api/v1/tickets",
        "/api/v1/runs/{run_id}/steer",
        "/api/v1/approvals/{approval_id}/decide",
        "/api/v1/usage",
        "/api/v1/tickets/{reference}/messages",
    } <= set(doc["paths"])
    decide = doc["paths"]["/api/v1/approvals/{approval_id}/decide"]["post"]
    assert "application/problem+json" in decide["responses"]["403"]["content"]


def test_the_docs_page_is_served_from_here_with_no_cdn(seeded):
    page = api_client().get("/api/v1/docs")
    assert page.status_code == 200 and b"/static/ninja/swagger-ui-bundle.js" in page.content
    assert b"cdn" not in page.content.lower()
    assert api_client().get("/static/ninja/swagger-ui-bundle.js").status_code == 200
    assert api_client().post("/api/v1/openapi.json").status_code == 405
