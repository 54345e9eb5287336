"""The Shopify double behaves as shopify.dev documents the Admin GraphQL API, on the wire.

Each test speaks raw HTTP to the running double (no client of ours in between), so what is
pinned is the double's own behaviour: the schema refuses what Shopify refuses, query cost
and THROTTLED, ``userErrors`` instead of exceptions, ``@idempotent``, jobs, and signed
webhooks that verify with the domain's check.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from deskhand.domain.store.webhooks import shopify_webhook_verified
from tests.support.shopify_double import DEFAULT_TOKEN, ShopifyDouble, WebhookInbox
from tests.support.waiting import until

REFUND = """
mutation R($input: RefundInput!) {
  refundCreate(input: $input) @idempotent(key: "%s") {
    refund { id totalRefundedSet { shopMoney { amount currencyCode } } }
    userErrors { field message }
  }
}"""


@pytest.fixture
def shop():
    double = ShopifyDouble().start()
    yield double
    double.stop()


@pytest.fixture
def inbox():
    box = WebhookInbox()
    yield box
    box.stop()


def gql(
    shop: ShopifyDouble,
    query: str,
    variables: dict[str, Any] | None = None,
    *,
    version: str = "2026-01",
    token: str = DEFAULT_TOKEN,
) -> httpx.Response:
    return httpx.post(
        f"{shop.url}/admin/api/{version}/graphql.json",
        json={"query": query, "variables": variables or {}},
        headers={"X-Shopify-Access-Token": token},
        timeout=10,
    )


def refund_input(shop: ShopifyDouble, order: str, amount: str) -> dict[str, Any]:
    sale = shop.orders[order].sales[0]
    return {
        "input": {
            "orderId": order,
            "transactions": [
                {
                    "orderId": order,
                    "parentId": sale.gid,
                    "kind": "REFUND",
                    "gateway": sale.gateway,
                    "amount": amount,
                }
            ],
        }
    }


def codes(answer: dict[str, Any]) -> list[str]:
    return [e["extensions"]["code"] for e in answer.get("errors", [])]


# --- the schema refuses what Shopify refuses ------------------------------------------------


def test_an_unknown_field_is_refused_before_anything_runs(shop):
    answer = gql(shop, '{ order(id: "gid://shopify/Order/1") { id refundable } }')
    assert answer.status_code == 200  # GraphQL errors are a 200, as at Shopify
    body = answer.json()
    assert "data" not in body
    assert codes(body) == ["undefinedField"]
    assert "refundable" in body["errors"][0]["message"]
    assert body["errors"][0]["locations"]


def test_an_unknown_argument_and_a_wrong_type_are_refused(shop):
    unknown = gql(shop, '{ orders(first: 5, status: "open") { nodes { id } } }').json()
    assert codes(unknown) == ["argumentNotAccepted"]
    wrong = gql(shop, '{ orders(first: "five") { nodes { id } } }').json()
    assert codes(wrong) == ["argumentLiteralsIncompatible"]
    variable = gql(
        shop, "query($n: Int!) { orders(first: $n) { nodes { id } } }", {"n": "five"}
    ).json()
    assert codes(variable) == ["INVALID_VARIABLE"]
    assert "data" not in variable


def test_a_connection_without_first_is_refused(shop):
    body = gql(shop, "{ orders { nodes { id } } }").json()
    assert codes(body) == ["missingFirstOrLast"]


def test_a_wrong_token_is_shopifys_401_and_a_version_it_does_not_serve_a_404(shop):
    refused = gql(shop, "{ shop { name } }", token="shpat_wrong")
    assert refused.status_code == 401
    assert "Invalid API key or access token" in refused.json()["errors"]
    assert gql(shop, "{ shop { name } }", version="2023-01").status_code == 404


# --- money as MoneyBag --------------------------------------------------------------------


def test_amounts_are_decimal_strings_in_a_money_bag(shop):
    shop.add_order("#1001", "dana@example.com", 10000)
    shop.add_order("#2001", "kenji@example.jp", 4000, currency="JPY")
    body = gql(
        shop,
        '{ orders(first: 5, query: "email:kenji@example.jp") { nodes { name'
        " totalPriceSet { shopMoney { amount currencyCode } presentmentMoney { amount } } } } }",
    ).json()
    (node,) = body["data"]["orders"]["nodes"]
    assert node["name"] == "#2001"
    assert node["totalPriceSet"]["shopMoney"] == {"amount": "4000.0", "currencyCode": "JPY"}
    assert node["totalPriceSet"]["presentmentMoney"] == {"amount": "4000.0"}


def test_a_search_term_it_does_not_know_is_ignored_with_a_warning_as_shopify_does(shop):
    shop.add_order("#1001", "dana@example.com", 10000)
    shop.add_order("#1002", "sam@example.org", 5000)
    body = gql(
        shop, '{ orders(first: 5, query: "mail:dana@example.com") { nodes { name } } }'
    ).json()
    assert len(body["data"]["orders"]["nodes"]) == 2  # everything: the filter was ignored
    assert body["extensions"]["search"][0]["field"] == "mail"


# --- query cost and THROTTLED ------------------------------------------------------------


def test_query_cost_follows_the_documented_rules(shop):
    shop.add_order("#1001", "dana@example.com", 10000)
    cost = lambda q: gql(shop, q).json()["extensions"]["cost"]["requestedQueryCost"]  # noqa: E731
    assert cost("{ shop { name currencyCode } }") == 1  # an object 1, scalars and enums 0
    # a connection: 2 + first x (the node 1 + its MoneyBag 1 + MoneyV2 1)
    assert (
        cost("{ orders(first: 10) { nodes { id totalPriceSet { shopMoney { amount } } } } }") == 32
    )
    # a mutation field 10, plus what its payload selects
    gid = next(iter(shop.orders))
    body = gql(shop, REFUND % "k-cost", refund_input(shop, gid, "1.00")).json()
    # (refund 1 + its MoneyBag 1 + MoneyV2 1; the userErrors list of objects 1)
    assert body["extensions"]["cost"]["requestedQueryCost"] == 10 + 3 + 1


def test_a_query_over_the_single_query_maximum_is_refused(shop):
    body = gql(
        shop,
        "{ orders(first: 250) { nodes { id transactions(first: 250) { id } } } }",
    ).json()
    assert codes(body) == ["MAX_COST_EXCEEDED"]


@pytest.fixture
def slow_shop():
    """A store whose bucket refills at 10 points a second: slow enough that an emptied bucket
    is still short when the next request arrives on a loaded machine."""
    double = ShopifyDouble(restore_rate=10.0).start()
    yield double
    double.stop()


def test_an_empty_bucket_answers_throttled_with_its_figures_then_refills(slow_shop):
    shop = slow_shop
    query = "{ orders(first: 10) { nodes { id totalPriceSet { shopMoney { amount } } } } }"
    shop.drain()
    body = gql(shop, query).json()
    assert codes(body) == ["THROTTLED"]
    assert "data" not in body
    cost = body["extensions"]["cost"]
    assert cost["requestedQueryCost"] == 32
    assert cost["actualQueryCost"] is None
    status = cost["throttleStatus"]
    assert (status["maximumAvailable"], status["restoreRate"]) == (1000.0, 10.0)
    assert 0.0 <= status["currentlyAvailable"] < 32
    # The bucket refills at 10 points a second: the same query runs again once it holds 32.
    until("the bucket to refill", lambda: "data" in gql(shop, query).json(), timeout=5)


def test_a_throttled_mutation_makes_no_refund(slow_shop):
    shop = slow_shop
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    shop.drain()
    body = gql(shop, REFUND % "k-throttled", refund_input(shop, gid, "38.00")).json()
    assert codes(body) == ["THROTTLED"]
    assert shop.refunds_of(gid) == []


# --- refundCreate: userErrors, never over-refunding, @idempotent ----------------------------


def test_a_refund_above_what_is_left_is_a_user_error_and_refunds_nothing(shop):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    shop.refund_directly(gid, 2000)
    answer = gql(shop, REFUND % "k-over", refund_input(shop, gid, "80.01"))
    assert answer.status_code == 200
    payload = answer.json()["data"]["refundCreate"]
    assert payload["refund"] is None
    (error,) = payload["userErrors"]
    assert set(error) == {"field", "message"}  # RefundCreatePayload's UserError: no code
    assert error["field"] == ["transactions", "0", "amount"]
    assert "80.00 USD" in error["message"]
    assert sum(r.amount for r in shop.refunds_of(gid)) == 2000


def test_over_refunding_is_refused_even_when_asked_for(shop):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    variables = refund_input(shop, gid, "100.01")
    variables["input"]["allowOverRefunding"] = True
    payload = gql(shop, REFUND % "k-allow", variables).json()["data"]["refundCreate"]
    assert "greater than" in payload["userErrors"][0]["message"]
    assert shop.refunds_of(gid) == []


def test_the_same_key_and_input_refund_once_and_answer_the_same_refund(shop):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    first = gql(shop, REFUND % "ledger-1", refund_input(shop, gid, "38.00")).json()
    again = gql(shop, REFUND % "ledger-1", refund_input(shop, gid, "38.00")).json()
    assert first["data"] == again["data"]
    assert (
        first["data"]["refundCreate"]["refund"]["totalRefundedSet"]["shopMoney"]["amount"] == "38.0"
    )
    assert len(shop.refunds_of(gid)) == 1


def test_the_same_key_with_other_input_is_the_documented_mismatch(shop):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    gql(shop, REFUND % "ledger-2", refund_input(shop, gid, "38.00"))
    body = gql(shop, REFUND % "ledger-2", refund_input(shop, gid, "20.00")).json()
    assert body["data"]["refundCreate"] is None
    assert codes(body) == ["IDEMPOTENCY_KEY_PARAMETER_MISMATCH"]
    assert [r.amount for r in shop.refunds_of(gid)] == [3800]


def test_a_key_whose_attempt_failed_asks_for_a_new_key(shop):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    shop.fail_next_refund("The card network declined the refund.")
    failed = gql(shop, REFUND % "ledger-3", refund_input(shop, gid, "38.00")).json()
    assert failed["data"]["refundCreate"]["userErrors"][0]["message"] == (
        "The card network declined the refund."
    )
    again = gql(shop, REFUND % "ledger-3", refund_input(shop, gid, "38.00")).json()
    assert again["data"]["refundCreate"] is None
    assert codes(again) == ["IDEMPOTENCY_PREVIOUS_ATTEMPT_FAILED"]
    fresh = gql(shop, REFUND % "ledger-4", refund_input(shop, gid, "38.00")).json()
    assert fresh["data"]["refundCreate"]["userErrors"] == []
    assert [r.amount for r in shop.refunds_of(gid)] == [3800]


def test_from_2026_04_a_refund_without_the_directive_is_refused(shop):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    bare = (REFUND % "x").replace(' @idempotent(key: "x")', "")
    refused = gql(shop, bare, refund_input(shop, gid, "1.00"), version="2026-04").json()
    assert refused["data"]["refundCreate"] is None
    assert "@idempotent" in refused["errors"][0]["message"]
    assert shop.refunds_of(gid) == []
    allowed = gql(shop, bare, refund_input(shop, gid, "1.00"), version="2026-01").json()
    assert allowed["data"]["refundCreate"]["userErrors"] == []


def test_the_directive_is_declared_with_a_required_string_key(shop):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    body = gql(
        shop,
        (REFUND % "x").replace('@idempotent(key: "x")', "@idempotent(key: 42)"),
        refund_input(shop, gid, "1.00"),
    ).json()
    assert codes(body) == ["argumentLiteralsIncompatible"]


# --- orderCancel: a job, done later ------------------------------------------------------


def test_a_cancellation_answers_a_job_that_is_done_later(shop):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    cancel = (
        "mutation($id: ID!) { orderCancel(orderId: $id, reason: CUSTOMER, restock: true)"
        " { job { id done } orderCancelUserErrors { code message } } }"
    )
    payload = gql(shop, cancel, {"id": gid}).json()["data"]["orderCancel"]
    assert payload["orderCancelUserErrors"] == []
    assert payload["job"]["done"] is False
    job = payload["job"]["id"]
    again = gql(shop, cancel, {"id": gid}).json()["data"]["orderCancel"]
    assert again["orderCancelUserErrors"][0]["code"] == "INVALID"
    assert "already been cancelled" in again["orderCancelUserErrors"][0]["message"]

    def done() -> bool:
        return gql(shop, "query($id: ID!) { job(id: $id) { done } }", {"id": job}).json()["data"][
            "job"
        ]["done"]

    until("the cancel job to finish", done, timeout=10)
    order = gql(
        shop, "query($id: ID!) { order(id: $id) { cancelledAt cancelReason } }", {"id": gid}
    )
    assert order.json()["data"]["order"]["cancelReason"] == "CUSTOMER"
    assert order.json()["data"]["order"]["cancelledAt"]


# --- webhooks ----------------------------------------------------------------------------


SUBSCRIBE = (
    "mutation($topic: WebhookSubscriptionTopic!, $uri: String!) {"
    " webhookSubscriptionCreate(topic: $topic, webhookSubscription: {uri: $uri})"
    " { webhookSubscription { id topic uri } userErrors { field message } } }"
)


def test_subscriptions_are_created_listed_and_not_taken_twice(shop, inbox):
    made = gql(shop, SUBSCRIBE, {"topic": "ORDERS_UPDATED", "uri": inbox.url()}).json()
    assert made["data"]["webhookSubscriptionCreate"]["userErrors"] == []
    twice = gql(shop, SUBSCRIBE, {"topic": "ORDERS_UPDATED", "uri": inbox.url()}).json()
    assert (
        "already been taken"
        in twice["data"]["webhookSubscriptionCreate"]["userErrors"][0]["message"]
    )
    plain = gql(shop, SUBSCRIBE, {"topic": "ORDERS_UPDATED", "uri": "http://example.com/h"}).json()
    assert plain["data"]["webhookSubscriptionCreate"]["userErrors"]
    listed = gql(shop, "{ webhookSubscriptions(first: 10) { nodes { topic uri } } }").json()
    assert listed["data"]["webhookSubscriptions"]["nodes"] == [
        {"topic": "ORDERS_UPDATED", "uri": inbox.url()}
    ]
    wrong_topic = gql(shop, SUBSCRIBE, {"topic": "ORDERS_EXPLODED", "uri": inbox.url()}).json()
    assert codes(wrong_topic) == ["INVALID_VARIABLE"]


def test_a_refund_made_directly_in_the_admin_is_sent_signed(shop, inbox):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    for topic in ("ORDERS_UPDATED", "REFUNDS_CREATE"):
        gql(shop, SUBSCRIBE, {"topic": topic, "uri": inbox.url()})
    shop.refund_directly(gid, 2000)
    until(
        "both webhooks",
        lambda: inbox.of("refunds/create") and inbox.of("orders/updated"),
        timeout=10,
    )
    (refund,) = inbox.of("refunds/create")
    assert shopify_webhook_verified(
        shop.client_secret, refund.body, refund.headers["X-Shopify-Hmac-Sha256"]
    )
    assert refund.headers["X-Shopify-Shop-Domain"] == shop.shop_domain
    assert refund.headers["X-Shopify-API-Version"] == "2026-01"
    assert refund.headers["X-Shopify-Webhook-Id"]
    body = json.loads(refund.body)
    assert body["transactions"][0]["amount"] == "20.0"
    assert body["transactions"][0]["kind"] == "refund"
    (updated,) = inbox.of("orders/updated")
    assert json.loads(updated.body)["financial_status"] == "partially_refunded"
    # One changed byte, or another secret, and the signature no longer verifies.
    header = refund.headers["X-Shopify-Hmac-Sha256"]
    assert not shopify_webhook_verified(shop.client_secret, refund.body + b" ", header)
    assert not shopify_webhook_verified("another-secret", refund.body, header)
    assert not shopify_webhook_verified(shop.client_secret, refund.body, "not base64!")
    assert not shopify_webhook_verified(shop.client_secret, refund.body, None)


def test_a_redelivery_keeps_its_webhook_id(shop, inbox):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    gql(shop, SUBSCRIBE, {"topic": "ORDERS_UPDATED", "uri": inbox.url()})
    shop.refund_directly(gid, 100)
    until("the first delivery", lambda: inbox.of("orders/updated"), timeout=10)
    shop.redeliver(shop.deliveries[0])
    until("the redelivery", lambda: len(inbox.of("orders/updated")) == 2, timeout=10)
    first, second = inbox.of("orders/updated")
    assert first.headers["X-Shopify-Webhook-Id"] == second.headers["X-Shopify-Webhook-Id"]
    assert first.body == second.body


def test_customers_redact_goes_to_the_compliance_address(shop, inbox):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    shop.compliance_uri = inbox.url("/webhooks/shopify/privacy")
    shop.redact_customer("dana@example.com")
    (delivery,) = until("customers/redact", lambda: inbox.of("customers/redact"), timeout=10)
    body = json.loads(delivery.body)
    assert body["customer"]["email"] == "dana@example.com"
    assert body["orders_to_redact"] == [int(gid.rsplit("/", 1)[1])]
    assert delivery.path == "/webhooks/shopify/privacy"
    assert shopify_webhook_verified(
        shop.client_secret, delivery.body, delivery.headers["X-Shopify-Hmac-Sha256"]
    )


def test_a_cancellation_that_asks_for_a_refund_refunds_what_is_left(shop):
    gid = shop.add_order("#1001", "dana@example.com", 10000)
    shop.refund_directly(gid, 2000)
    cancel = (
        "mutation($id: ID!) { orderCancel(orderId: $id, reason: FRAUD, restock: false,"
        " refundMethod: {originalPaymentMethodsRefund: true}) { job { id } } }"
    )
    job = gql(shop, cancel, {"id": gid}).json()["data"]["orderCancel"]["job"]["id"]
    until(
        "the cancel job",
        lambda: gql(shop, "query($id: ID!) { job(id: $id) { done } }", {"id": job}).json()["data"][
            "job"
        ]["done"],
        timeout=10,
    )
    assert [r.amount for r in shop.refunds_of(gid)] == [2000, 8000]
