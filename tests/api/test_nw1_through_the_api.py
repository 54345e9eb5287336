"""A whole NW-1, driven by other systems only, over a real web process and a real worker.

A help desk posts the customer's ticket (Standard Webhooks-signed); a key starts the run;
the merchant's webhook hears ``approval.requested``; a ``decide`` key approves for a named
owner; the run finishes and the webhook hears ``run.finished``. (The policy reader answers
NW-1 with a staff note, so no reply goes to the desk; the relay of a reply is
``test_helpdesk.py``'s.) The model is the keyless
policy reader; everything else is the real thing (uvicorn, ``manage.py worker``, DBOS,
Postgres, HTTP both ways).
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

from standardwebhooks import Webhook

from approvals.notifications import webhook_set
from deskhand.domain.apikeys.helpdesk import source_create
from deskhand.domain.desk.models import Merchant
from tests.api.conftest import new_key
from tests.api.test_helpdesk import signed
from tests.api.test_real_server_api import call, server
from tests.consent.test_notifications import receiver
from tests.console.conftest import NW_OWNER, user
from tests.support.waiting import PATIENCE_S, until

__all__ = ["receiver", "server"]

NW1 = (
    "Hello, order NW-1042 reached me last week and both bags taste flat and papery, as if they "
    "had been on a shelf for months. The roast date printed on the bags is almost six weeks "
    "before the order shipped. Could I get a refund for the coffee?"
)


def test_nw1_from_a_help_desk_to_a_decision_through_the_api_only(
    server, tseeded, worker_process, receiver
):
    northwind = Merchant.objects.get(slug="northwind")
    desk = receiver()
    _, desk_secret = source_create(
        merchant=northwind, user=user(NW_OWNER), slug="zendesk", reply_url=desk.url
    )
    hook = receiver()
    _, hook_secret = webhook_set(
        merchant=northwind, user=user(NW_OWNER), url=hook.url, channel="cli"
    )
    token = new_key(["read", "write", "decide"], name="sidebar")
    worker_process("api-worker").start()

    # 1. The help desk hands over the ticket.
    delivery = signed(
        desk_secret,
        {
            "type": "ticket.created",
            "external_id": "ZD-4242",
            "customer": {"email": "dana.whitfield@example.com", "name": "Dana Whitfield"},
            "subject": "Beans arrived stale",
            "body": NW1,
        },
    )
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    conn.request(
        "POST",
        "/api/v1/helpdesk/northwind/zendesk",
        delivery["data"],
        {
            "Content-Type": "application/json",
            "webhook-id": delivery["HTTP_WEBHOOK_ID"],
            "webhook-timestamp": delivery["HTTP_WEBHOOK_TIMESTAMP"],
            "webhook-signature": delivery["HTTP_WEBHOOK_SIGNATURE"],
        },
    )
    answer = conn.getresponse()
    assert answer.status == 201
    reference = json.loads(answer.read())["ticket"]
    conn.close()

    # 2. Northwind answers every customer message with a run (its automatic runs setting):
    # the desk's ticket started one, so a key asking for another is told it is open (409).
    def ticket_runs() -> list[dict[str, Any]]:
        return call(server, "GET", f"/api/v1/tickets/{reference}", token)[2]["runs"]

    run_id = until("the automatic run", ticket_runs)[0]["id"]
    status, _, refused = call(
        server, "POST", "/api/v1/runs", token, {"ticket": reference}, **{"Idempotency-Key": "nw1"}
    )
    assert status == 409 and refused["type"].endswith(":conflict"), refused
    assert run_id in refused["detail"]

    def run_now() -> dict[str, Any]:
        return call(server, "GET", f"/api/v1/runs/{run_id}", token)[2]

    until("the run to park", lambda: run_now()["status"] == "awaiting_approval")

    # 3. The merchant's webhook hears it, signed with Standard Webhooks.
    def events() -> list[dict[str, Any]]:
        out = []
        for headers, body, _ in list(hook.seen):
            lowered = {k.lower(): v for k, v in headers.items()}
            out.append(Webhook(hook_secret).verify(body, lowered))
        return out

    requested = until(
        "approval.requested",
        lambda: [e for e in events() if e["event"] == "approval.requested"],
        timeout=60,
    )
    approval_id = requested[0]["approval"]["id"]
    assert requested[0]["approval"]["ticket"] == reference

    # 4. A decide key approves, for a named owner; further approvals of the run likewise.
    decided: set[str] = set()
    deadline = time.monotonic() + PATIENCE_S
    while True:
        assert time.monotonic() < deadline, f"the run did not finish within {PATIENCE_S:.0f} s"
        state = run_now()
        if state["status"] not in ("awaiting_approval", "running", "queued"):
            break
        for a in state["approvals"]:
            if a["status"] == "pending" and a["id"] not in decided:
                status, _, body = call(
                    server,
                    "POST",
                    f"/api/v1/approvals/{a['id']}/decide",
                    token,
                    {"decision": "approve", "member": NW_OWNER},
                )
                assert status == 201 and body["decided_by"] == NW_OWNER, body
                decided.add(a["id"])
        time.sleep(0.25)
    assert approval_id in decided
    assert state["status"] == "succeeded", state

    # 5. The end is heard once.
    finished = until(
        "run.finished",
        lambda: [e for e in events() if e["event"] == "run.finished"],
        timeout=60,
    )
    assert [e["run"]["id"] for e in finished] == [run_id]
    assert finished[0]["run"]["status"] == "succeeded"

    # 6. The agent's reply to Dana reaches the desk once, signed with the desk's secret.
    thread = call(server, "GET", f"/api/v1/tickets/{reference}", token)[2]["messages"]
    replies = [m for m in thread if m["kind"] == "agent"]
    assert len(replies) == 1, thread
    until("the reply relayed to the desk", lambda: desk.seen)
    time.sleep(3)  # a reconciler pass or more: nothing is relayed twice
    assert len(desk.seen) == 1, desk.seen
    headers, body, _ = desk.seen[0]
    relayed = Webhook(desk_secret).verify(body, {k.lower(): v for k, v in headers.items()})
    assert relayed, relayed
