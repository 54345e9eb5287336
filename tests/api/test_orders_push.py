"""``PUT /api/v1/orders/{reference}``: the store pushes its orders, ordered by its version.

A new order is 201, a newer version 200 (replaced), the same version and content 200
(unchanged), an older version 409 with the newer order kept; the ``orders`` scope alone
opens it; ``Idempotency-Key`` replays as on every write. Concurrent pushes over a real
server are in ``test_real_server_api.py``.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from approvals.models import AuditEvent
from deskhand.domain.desk.models import Order, OrderSourceKind
from tests.api.conftest import api_client, bearer, new_key

pytestmark = pytest.mark.django_db

PROBLEM = "application/problem+json"


def order_body(version: int, **over: Any) -> dict[str, Any]:
    return {
        "version": version,
        "customer_email": "rosa@example.org",
        "customer_name": "Rosa Diaz",
        "status": "delivered",
        "currency": "USD",
        "total_cents": 10_000,
        "placed_at": "2026-11-20T10:00:00Z",
        "delivered_at": "2026-11-24T15:30:00+01:00",
        "items": [
            {
                "sku": "KETTLE",
                "description": "Gooseneck kettle",
                "quantity": 1,
                "unit_price_cents": 10_000,
            }
        ],
        **over,
    }


def put(token: str, reference: str, body: Any, **headers: str):
    return api_client().generic(
        "PUT",
        f"/api/v1/orders/{reference}",
        json.dumps(body).encode(),
        content_type="application/json",
        **bearer(token),
        **headers,
    )


def test_a_new_order_is_created_then_a_newer_version_replaces_it(seeded):
    token = new_key(["orders"])
    first = put(token, "SO-1", order_body(1))
    assert first.status_code == 201, first.content
    assert first.json()["outcome"] == "created"
    newer = put(token, "SO-1", order_body(2, status="cancelled", items=[]))
    assert newer.status_code == 200 and newer.json()["outcome"] == "updated"
    order = Order.objects.get(merchant__slug="northwind", reference="SO-1")
    assert (order.source, order.version, order.status) == (OrderSourceKind.PUSHED, 2, "cancelled")
    assert order.items.count() == 0 and order.customer.email == "rosa@example.org"
    assert AuditEvent.objects.filter(action="api.order.put").count() == 2


def test_an_older_version_after_a_newer_one_is_409_and_the_newer_is_kept(seeded):
    token = new_key(["orders"])
    assert put(token, "SO-2", order_body(5, total_cents=7_000)).status_code == 201
    older = put(token, "SO-2", order_body(4, total_cents=1))
    assert older.status_code == 409 and older["Content-Type"] == PROBLEM
    assert older.json()["type"] == "urn:deskhand:problem:stale-version"
    assert "older than the stored version 5" in older.json()["detail"]
    assert Order.objects.get(reference="SO-2").total_cents == 7_000


def test_the_same_version_again_is_unchanged_and_with_other_content_is_409(seeded):
    token = new_key(["orders"])
    assert put(token, "SO-3", order_body(1)).status_code == 201
    again = put(token, "SO-3", order_body(1))
    assert again.status_code == 200 and again.json()["outcome"] == "unchanged"
    other = put(token, "SO-3", order_body(1, total_cents=5))
    assert other.status_code == 409
    assert other.json()["type"] == "urn:deskhand:problem:version-reused"
    assert Order.objects.get(reference="SO-3").total_cents == 10_000


def test_only_a_key_of_the_orders_scope_may_push(seeded):
    for scopes in (["write"], ["read", "decide"]):
        r = put(new_key(scopes), "SO-4", order_body(1))
        assert r.status_code == 403 and "'orders' scope" in r.json()["detail"]
    assert not Order.objects.filter(reference="SO-4").exists()


def test_an_order_made_in_deskhand_is_never_replaced_by_a_push(seeded):
    local = Order.objects.get(merchant__slug="northwind", reference="NW-1042")
    r = put(new_key(["orders"]), "NW-1042", order_body(99, total_cents=1))
    assert r.status_code == 409 and r.json()["type"] == "urn:deskhand:problem:not-pushed"
    assert Order.objects.get(pk=local.pk).total_cents == local.total_cents


def test_an_order_pushed_to_one_merchant_is_not_another_merchants(seeded):
    assert put(new_key(["orders"], merchant="lumen"), "SO-5", order_body(1)).status_code == 201
    assert put(new_key(["orders"]), "SO-5", order_body(1, total_cents=3)).status_code == 201
    totals = dict(
        Order.objects.filter(reference="SO-5").values_list("merchant__slug", "total_cents")
    )
    assert totals == {"lumen": 10_000, "northwind": 3}


@pytest.mark.parametrize(
    "over, field",
    [
        ({"currency": "usd"}, "currency"),
        ({"placed_at": "2026-11-20T10:00:00"}, "placed_at"),
        ({"total_cents": -1}, "total_cents"),
        ({"status": "lost"}, "status"),
        ({"items": [{"sku": "A", "quantity": 0, "unit_price_cents": 1}]}, "items.0.quantity"),
    ],
)
def test_a_bad_order_is_422_naming_the_field_and_stores_nothing(seeded, over, field):
    r = put(new_key(["orders"]), "SO-6", order_body(1, **over))
    assert r.status_code == 422 and r["Content-Type"] == PROBLEM
    assert r.json()["field"] == field, r.json()
    assert not Order.objects.filter(reference="SO-6").exists()


def test_a_retry_with_its_idempotency_key_replays_the_first_answer(seeded):
    token = new_key(["orders"])
    first = put(token, "SO-7", order_body(1), HTTP_IDEMPOTENCY_KEY="push-1")
    again = put(token, "SO-7", order_body(1), HTTP_IDEMPOTENCY_KEY="push-1")
    assert first.status_code == 201 and again.status_code == 200
    assert again["Idempotent-Replayed"] == "true" and again.json() == first.json()
    reused = put(token, "SO-7", order_body(2), HTTP_IDEMPOTENCY_KEY="push-1")
    assert reused.status_code == 422
    assert Order.objects.get(reference="SO-7").version == 1


def test_the_document_describes_the_push_its_scope_rule_and_its_replay(seeded):
    doc = api_client().get("/api/v1/openapi.json").json()
    op = doc["paths"]["/api/v1/orders/{reference}"]["put"]
    assert {"200", "201", "409", "422", "403"} <= set(op["responses"])
    assert "Idempotent-Replayed" in op["responses"]["200"]["headers"]
    body = doc["components"]["schemas"]["OrderIn"]
    assert "version" in body["required"] and "below the stored one" in body["description"]
