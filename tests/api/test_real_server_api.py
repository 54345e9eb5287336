"""The JSON API over a real web process (``manage.py web``, uvicorn) and a real HTTP client.

One web process for the module, on the test database (``web_process_on_test_database``).
Driven here: a ``read`` key cannot decide, a revoked key is refused at once, another
merchant's key gets 404 for every id of ours, five identical ``Idempotency-Key`` POSTs at
once make one run, one help-desk webhook delivered five times at once makes one
ticket, and schemathesis (``st run``) finds no server error and no answer that
contradicts ``/api/v1/openapi.json``, with a key of each merchant.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.models import Run
from approvals.models import Approval
from deskhand.domain.apikeys.models import ApiKey
from deskhand.domain.apikeys.services import key_revoke
from tests.api.conftest import new_key
from tests.console.conftest import (
    NW_OWNER,
    WebServer,
    make_approval,
    make_run,
    user,
    web_process_on_test_database,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker) -> Iterator[WebServer]:
    env = {"DESKHAND_API_KEY_LIMIT": "100000"}  # schemathesis is not the rate limit's test
    with django_db_blocker.unblock(), web_process_on_test_database("test-api.log", env) as web:
        yield web


def call(
    server: WebServer, method: str, path: str, token: str, body: Any = None, **headers: str
) -> tuple[int, dict[str, str], Any]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        data = json.dumps(body).encode() if body is not None else None
        h = {"Authorization": f"Bearer {token}", **headers}
        if data is not None:
            h["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        raw = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, json.loads(raw or b"null")
    finally:
        conn.close()


def test_a_read_key_cannot_decide_and_a_revoked_key_is_refused_at_once(server, tseeded):
    read = new_key(["read"])
    approval = make_approval(make_run("NW-1", status="awaiting_approval"))
    decide = {"decision": "approve", "member": NW_OWNER}
    status, headers, body = call(
        server, "POST", f"/api/v1/approvals/{approval.pk}/decide", read, decide
    )
    assert status == 403 and headers["content-type"] == "application/problem+json"
    assert body["type"] == "urn:deskhand:problem:scope" and "decide" in body["detail"]
    assert Approval.objects.get(pk=approval.pk).status == "pending"

    assert call(server, "GET", f"/api/v1/approvals/{approval.pk}", read)[0] == 200
    key_revoke(key=ApiKey.objects.get(name="northwind read"), user=user(NW_OWNER))
    status, headers, body = call(server, "GET", f"/api/v1/approvals/{approval.pk}", read)
    assert status == 401 and body["type"] == "urn:deskhand:problem:unauthenticated"


def test_another_merchants_key_gets_404_for_every_id_of_ours(server, tseeded):
    lumen = new_key(["read", "write", "decide"], merchant="lumen")
    run = make_run("NW-1", status="awaiting_approval")
    approval = make_approval(run)
    reads = ["/api/v1/tickets/NW-1", f"/api/v1/runs/{run.pk}", f"/api/v1/approvals/{approval.pk}"]
    for path in reads:
        assert call(server, "GET", path, lumen)[0] == 404, path
    writes = [
        ("/api/v1/tickets/NW-1/messages", {"body": "hello"}),
        ("/api/v1/runs", {"ticket": "NW-1"}),
        (f"/api/v1/runs/{run.pk}/steer", {"body": "stop"}),
        (f"/api/v1/runs/{run.pk}/cancel", {}),
        (f"/api/v1/approvals/{approval.pk}/decide", {"decision": "approve", "member": NW_OWNER}),
    ]
    for path, payload in writes:
        status, headers, body = call(server, "POST", path, lumen, payload)
        assert status == 404, (path, status, body)
        assert headers["content-type"] == "application/problem+json"
    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    assert Approval.objects.get(pk=approval.pk).status == "pending"


def test_five_identical_idempotent_posts_at_once_start_one_run(server, tseeded):
    token = new_key(["write"])

    def start(_: int) -> tuple[int, Any]:
        status, _h, body = call(
            server, "POST", "/api/v1/runs", token, {"ticket": "NW-3"}, **{"Idempotency-Key": "once"}
        )
        return status, body

    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        answers = list(pool.map(start, range(5)))
    assert sorted(s for s, _ in answers) == [200, 200, 200, 200, 201], answers
    assert len({b["id"] for _, b in answers}) == 1
    assert Run.objects.filter(ticket__reference="NW-3", merchant__slug="northwind").count() == 1


def test_five_identical_idempotent_decisions_at_once_decide_once(server, tseeded):
    from approvals.models import AuditEvent

    token = new_key(["decide"])
    approval = make_approval(make_run("NW-1", status="awaiting_approval"))
    decide = {"decision": "approve", "member": NW_OWNER}

    def post(_: int) -> tuple[int, Any]:
        status, _h, body = call(
            server,
            "POST",
            f"/api/v1/approvals/{approval.pk}/decide",
            token,
            decide,
            **{"Idempotency-Key": "approve-once"},
        )
        return status, body

    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        answers = list(pool.map(post, range(5)))
    assert sorted(s for s, _ in answers) == [200, 200, 200, 200, 201], answers
    assert {b["decided_by"] for _, b in answers} == {NW_OWNER}
    assert Approval.objects.get(pk=approval.pk).status == "approved"
    assert AuditEvent.objects.filter(run_id=approval.run_id, action="approval.approve").count() == 1


def test_one_webhook_delivered_five_times_at_once_makes_one_ticket(dbos_executor, server, tseeded):
    from deskhand.domain.apikeys.helpdesk import source_create
    from deskhand.domain.apikeys.models import ExternalTicket
    from deskhand.domain.desk.models import Merchant, TicketMessage
    from tests.api.test_helpdesk import new_ticket, signed
    from tests.mail.conftest import intake_idle

    _, secret = source_create(
        merchant=Merchant.objects.get(slug="northwind"), user=user(NW_OWNER), slug="zendesk"
    )
    delivery = signed(secret, new_ticket("ZD-77"), webhook_id="msg_five")
    headers = {
        "Content-Type": "application/json",
        "webhook-id": delivery["HTTP_WEBHOOK_ID"],
        "webhook-timestamp": delivery["HTTP_WEBHOOK_TIMESTAMP"],
        "webhook-signature": delivery["HTTP_WEBHOOK_SIGNATURE"],
    }

    def post(_: int) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        try:
            conn.request("POST", "/api/v1/helpdesk/northwind/zendesk", delivery["data"], headers)
            r = conn.getresponse()
            return r.status, json.loads(r.read())
        finally:
            conn.close()

    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        answers = list(pool.map(post, range(5)))
    assert sorted(s for s, _ in answers) == [200, 200, 200, 200, 201], answers
    assert len({b["ticket"] for _, b in answers}) == 1
    link = ExternalTicket.objects.get(external_id="ZD-77")
    assert TicketMessage.objects.filter(ticket=link.ticket).count() == 1
    # Northwind answers every customer message with a run: one message, one run, opened by
    # the line's routing workflow (the in-process executor is the worker here).
    intake_idle()
    line = TicketMessage.objects.get(ticket=link.ticket)
    assert line.routing == "opened", line.routing_detail
    assert list(Run.objects.filter(ticket=link.ticket).values_list("pk", flat=True)) == [
        line.routed_run_id
    ]


def test_pushes_of_one_order_at_once_and_out_of_order_keep_the_newest_version(server, tseeded):
    """Versions 1 to 6 of one order pushed at once, in shuffled order, then an old one late:
    whatever order they land in, the stored order is version 6, every push that lost is a
    409 saying so, and none is a 500."""
    from deskhand.domain.desk.models import Order

    token = new_key(["orders"])

    def push(version: int) -> tuple[int, Any]:
        body = {
            "version": version,
            "customer_email": "rosa@example.org",
            "status": "shipped" if version < 6 else "delivered",
            "currency": "USD",
            "total_cents": 1_000 * version,
            "placed_at": "2026-11-20T10:00:00Z",
        }
        status, _h, answer = call(server, "PUT", "/api/v1/orders/SO-77", token, body)
        return status, answer

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(push, [3, 6, 1, 5, 2, 4]))
    statuses = sorted(s for s, _ in answers)
    assert statuses[0] in (200, 201) and set(statuses) <= {200, 201, 409}, answers
    assert statuses.count(201) == 1, answers
    assert all("older than the stored version" in b["detail"] for s, b in answers if s == 409)
    late = push(2)
    assert late[0] == 409 and "stored version 6" in late[1]["detail"]
    order = Order.objects.get(merchant__slug="northwind", reference="SO-77")
    assert (order.version, order.total_cents, order.status) == (6, 6_000, "delivered")


SCHEMATHESIS_SEED = "36"


def test_schemathesis_with_every_check_and_phase_finds_nothing_for_either_merchant(
    server, tseeded, tmp_path
):
    """Every check and every phase (stateful through the document's links), with a pinned
    seed and five examples an operation, so a failure is the same failure on the next run.

    ``schemathesis.toml`` lists the statuses a schema-valid request may rightly get from
    data on the server; ``schemathesis_hooks.py`` gives each request its own
    Idempotency-Key, as a client does. The two keys run one after the other: at once, on two
    shared cores, they took as long and answered slower."""
    from deskhand.domain.apikeys import store
    from deskhand.domain.apikeys.helpdesk import source_create
    from deskhand.domain.desk.models import Merchant

    make_approval(make_run("NW-1", status="awaiting_approval"))
    make_run("LU-1", "lumen", status="succeeded")
    source_create(  # the source schemathesis.toml names: deliveries reach the signature check
        merchant=Merchant.objects.get(slug="northwind"), user=user(NW_OWNER), slug="zendesk"
    )
    env = {
        **os.environ,
        "SCHEMATHESIS_HOOKS": str(HERE / "schemathesis_hooks.py"),
        "DESKHAND_KEY_PATTERN": store.KEY_PATTERN,
        "DESKHAND_KEY_MAX": str(store.KEY_MAX),
    }
    for merchant in ("northwind", "lumen"):
        token = new_key(["read", "write", "decide", "orders"], merchant=merchant)
        started = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "schemathesis.cli",
                "--config-file",
                str(HERE / "schemathesis.toml"),
                "run",
                f"{server.url}/api/v1/openapi.json",
                "--header",
                f"Authorization: Bearer {token}",
                "--checks",
                "all",
                "--phases",
                "examples,coverage,fuzzing,stateful",
                "--seed",
                SCHEMATHESIS_SEED,
                "--max-examples",
                "5",
                "--no-shrink",  # bounded time on a failure too
                "--suppress-health-check",
                "too_slow",  # the machine's load, not the API: a busy CI box trips it
                "--generation-database",
                "none",
                "--workers",
                "2",
                "--request-timeout",
                "40",
                "--no-color",
            ],
            cwd=tmp_path,  # its cache (.schemathesis/) is written there, not in the work tree
            env=env,
            capture_output=True,
            text=True,
            timeout=150,
        )
        took = time.monotonic() - started
        # Kept for a failure's post-mortem, beside the web process's log.
        (ROOT / ".deskhand" / f"test-api-schemathesis-{merchant}.log").write_text(
            f"{took:.1f} s\n{done.stdout}\n{done.stderr}"
        )
        assert done.returncode == 0, f"{merchant}:\n{done.stdout[-6000:]}\n{done.stderr[-2000:]}"
    log = server.log_path.read_text()
    assert "Internal Server Error" not in log and "Exception in ASGI application" not in log
