"""A Shopify Admin GraphQL double on 127.0.0.1, as strict as the real API where Deskhand leans
on it: for the tests and ``make demo SHOP=double``.

A stdlib ``ThreadingHTTPServer`` (port 0) in a daemon thread, like ``payments_api.py``. It
answers ``POST /admin/api/<version>/graphql.json`` (versions ``API_VERSIONS``) for one shop,
authenticated by ``X-Shopify-Access-Token`` (a wrong one is Shopify's 401 with its
``{"errors": "[API] Invalid API key or access token ..."}``), and behaves as shopify.dev
documents:

* **Strict schema.** Every document is parsed and validated with graphql-core
  (``shopify_graphql.py``) against
  ``shopify_admin.graphql``, written from the documented types Deskhand uses (with
  ``directive @idempotent(key: String!) on FIELD``). An unknown field, an unknown argument,
  a literal or variable of the wrong type is refused before anything runs, HTTP 200 with
  ``errors`` (message, locations, ``extensions.code``: ``undefinedField``,
  ``argumentNotAccepted``, ``argumentLiteralsIncompatible``, ``variableMismatch``,
  ``missingRequiredArguments``, ``INVALID_VARIABLE``, ``parseError``; others keep graphql-core's
  rule as the code). A connection asked without ``first`` is refused too, as Shopify does.
* **Calculated query cost** (shopify.dev, "GraphQL Admin API rate limits"; the rules and the
  validation live in ``shopify_graphql.py``), computed on the
  document before it runs: a scalar or enum field costs 0, an object field 1, a connection
  2 + ``first`` * (the cost of one node with its selection), a list of objects with ``first``
  ``first`` * one item, a mutation field 10 plus its payload's selection. A query over
  ``MAX_QUERY_COST`` (1000) is refused (``MAX_COST_EXCEEDED``). The cost is taken from a
  leaky bucket per app and store: ``bucket_size`` points (default 1000, the single-query
  maximum), refilled continuously at ``restore_rate`` points a second (default 100, the
  Standard plan's figure on that page). A request that costs more than is available runs
  nothing and answers ``THROTTLED`` with ``extensions.cost`` (``requestedQueryCost``,
  ``actualQueryCost: null``, ``throttleStatus`` with ``maximumAvailable``,
  ``currentlyAvailable``, ``restoreRate``), which a client reads to know how long to wait.
  Every answer carries ``extensions.cost``. (Real Shopify refunds the difference between the
  requested and the actual cost; the double charges the requested cost, the upper bound.)
* **Money as MoneyBag**: ``shopMoney`` and ``presentmentMoney``, each a decimal string in
  Shopify's own writing (``"38.0"``, ``"4000.0"``) with its ``currencyCode``. The double keeps
  integers of minor units and never a float.
* **refundCreate** refunds against an order's sale by transactions (``kind: REFUND``,
  ``parentId`` the sale, its ``gateway``), and answers ``userErrors`` (HTTP 200, never an
  exception; ``RefundCreatePayload.userErrors`` is ``[UserError!]!``, a field and a message,
  no code) for an unknown order, a transaction that does not name a sale of the order, an
  amount that is not money of the order's currency, or more than is left on the sale: it never
  over-refunds, ``allowOverRefunding`` or not (every request is in ``requests``, so a test can
  assert Deskhand never sets it). ``@idempotent(key:)``, as in "Implementing idempotency":
  the same key with the same input answers the first result and refunds once; the same key
  with other input is a top-level error coded ``IDEMPOTENCY_KEY_PARAMETER_MISMATCH``
  (``refundCreate`` null); a key whose first attempt failed (a userError) is
  ``IDEMPOTENCY_PREVIOUS_ATTEMPT_FAILED`` ("retry with a new idempotency
  key"). Keys are kept ``key_window_seconds`` (24 h by default). From ``2026-04`` a
  ``refundCreate`` without the directive is refused, as Shopify announced.
* **orderCancel** answers a ``Job`` (``done: false``) and ``orderCancelUserErrors``; the job is
  done ``job_seconds`` later (a timer), when the order gets ``cancelledAt`` (and, with
  ``refund: true``, a refund of what is left) and ``orders/cancelled`` is sent. ``job(id:)``
  reads it.
* **Webhooks**: ``webhookSubscriptionCreate`` (an ``https`` address, or ``http`` on loopback
  for tests; a topic and address already taken is a ``userError``) and
  ``webhookSubscriptions``. Deliveries are POSTed from a thread with Shopify's headers:
  ``X-Shopify-Hmac-Sha256`` (base64 HMAC-SHA256 of the raw body keyed with the app's client
  secret), ``X-Shopify-Topic``, ``X-Shopify-Shop-Domain``, ``X-Shopify-Webhook-Id`` (one per
  delivery), ``X-Shopify-Event-Id``, ``X-Shopify-API-Version``, ``X-Shopify-Triggered-At``;
  bodies in the webhook's REST shape. ``orders/updated`` and ``refunds/create`` follow every
  refund, including one made ``refund_directly`` (staff in Shopify's admin), and
  ``customers/redact`` goes to ``compliance_uri`` (privacy webhooks are set in the app's
  configuration, not subscribed) when ``redact_customer`` is called. Each delivery and its
  answer's status is in ``deliveries``; ``redeliver`` sends one again (a retry: same webhook
  id).

Searches (``orders(query:)``, ``customers(query:)``) understand ``email:``, ``name:`` and
``customer_id:`` terms, ANDed; like Shopify, a term it does not know is *ignored* (with a
warning in ``extensions.search``), so a client must check what comes back.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import hashlib
import hmac
import itertools
import json
import re
import secrets
import threading
import time
import urllib.request
from collections.abc import Callable
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from graphql import (
    GraphQLError,
    GraphQLSchema,
    execute,
    parse,
)
from graphql.execution.values import get_variable_values
from graphql.language import (
    OperationDefinitionNode,
)

from deskhand.domain.desk.money import (
    MINOR_DIGITS,
    AmountMalformed,
    format_cents,
    minor_from_decimal,
)
from tests.support.shopify_graphql import (
    MAX_QUERY_COST,
    CostRefused,
    admin_schema,
    idempotency_key,
    operation_of,
    query_cost,
    validation_errors,
)

API_VERSIONS = ("2026-01", "2026-04")
DEFAULT_TOKEN = "shpat_double_0123456789abcdef0123456789abcdef"
DEFAULT_SECRET = "shpss_double_client_secret_for_webhook_hmac"


def shopify_decimal(minor: int, currency: str) -> str:
    """Integer minor units written as Shopify writes an amount: ``3800`` USD -> ``"38.0"``,
    ``3850`` -> ``"38.5"``, ``4000`` JPY -> ``"4000.0"``, ``1250`` KWD -> ``"1.25"``."""
    digits = MINOR_DIGITS.get(currency, 2)
    whole, fraction = divmod(abs(minor), 10**digits)
    frac = f"{fraction:0{digits}d}".rstrip("0") if digits else ""
    return f"{'-' if minor < 0 else ''}{whole}.{frac or '0'}"


def sign(secret: str, body: bytes) -> str:
    """What Shopify puts in ``X-Shopify-Hmac-Sha256``: base64 of HMAC-SHA256(body)."""
    return base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()


def _iso(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _numeric(gid: str) -> int:
    return int(gid.rsplit("/", 1)[1])


@dataclasses.dataclass
class Txn:
    gid: str
    kind: str  # SALE | REFUND | ...
    status: str
    gateway: str
    amount: int  # minor units of the order's currency
    parent: str | None
    at: dt.datetime


@dataclasses.dataclass
class RefundRec:
    gid: str
    note: str
    transactions: list[Txn]
    at: dt.datetime

    @property
    def amount(self) -> int:
        return sum(t.amount for t in self.transactions)


@dataclasses.dataclass
class OrderRec:
    gid: str
    name: str
    email: str
    customer: str | None
    currency: str
    total: int
    line_items: list[dict[str, Any]]
    transactions: list[Txn]
    refunds: list[RefundRec] = dataclasses.field(default_factory=list)
    created: dt.datetime = dataclasses.field(default_factory=_now)
    updated: dt.datetime = dataclasses.field(default_factory=_now)
    cancelled: dt.datetime | None = None
    cancel_reason: str | None = None
    shipped: dt.datetime | None = None  # one fulfillment, shipped then, delivered then
    delivered: dt.datetime | None = None

    @property
    def sales(self) -> list[Txn]:
        return [
            t for t in self.transactions if t.kind in ("SALE", "CAPTURE") and t.status == "SUCCESS"
        ]

    @property
    def refunded(self) -> int:
        return sum(r.amount for r in self.refunds)

    def left_on(self, sale: Txn) -> int:
        taken = sum(t.amount for r in self.refunds for t in r.transactions if t.parent == sale.gid)
        return sale.amount - taken

    @property
    def financial_status(self) -> str:
        received = sum(t.amount for t in self.sales)
        if not received:
            return "PENDING"
        if self.refunded >= received:
            return "REFUNDED"
        return "PARTIALLY_REFUNDED" if self.refunded else "PAID"


@dataclasses.dataclass
class CustomerRec:
    gid: str
    email: str
    first: str
    last: str
    created: dt.datetime = dataclasses.field(default_factory=_now)


@dataclasses.dataclass
class Subscription:
    gid: str
    topic: str
    uri: str
    created: dt.datetime = dataclasses.field(default_factory=_now)


@dataclasses.dataclass
class JobRec:
    gid: str
    order: str
    done: bool = False


@dataclasses.dataclass
class KeyRec:
    fingerprint: str
    at: float
    refund: str | None  # the refund it made, or None if its attempt failed
    errors: list[dict[str, Any]]


@dataclasses.dataclass
class Delivery:
    topic: str
    url: str
    body: bytes
    headers: dict[str, str]
    status: int | None = None  # the receiver's HTTP status; None while in flight or unreachable
    error: str = ""


@dataclasses.dataclass
class Recorded:
    version: str
    token: str
    query: str
    variables: dict[str, Any]
    answer: dict[str, Any]


def _gql_error(message: str, code: str, **extra: Any) -> dict[str, Any]:
    return {"message": message, "extensions": {"code": code, **extra}}


class ShopifyDouble:
    def __init__(
        self,
        *,
        shop_domain: str = "northwind-double.myshopify.com",
        access_token: str = DEFAULT_TOKEN,
        client_secret: str = DEFAULT_SECRET,
        currency: str = "USD",
        bucket_size: float = 1000.0,
        restore_rate: float = 100.0,
        key_window_seconds: float = 86_400.0,
        job_seconds: float = 0.3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.shop_domain = shop_domain
        self.access_token = access_token
        self.client_secret = client_secret
        self.currency = currency
        self.bucket_size = bucket_size
        self.restore_rate = restore_rate
        self.key_window_seconds = key_window_seconds
        self.job_seconds = job_seconds
        self.clock = clock
        self.compliance_uri = ""
        self.schema: GraphQLSchema = admin_schema()
        self.orders: dict[str, OrderRec] = {}
        self.customers: dict[str, CustomerRec] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self.jobs: dict[str, JobRec] = {}
        self.requests: list[Recorded] = []
        self.deliveries: list[Delivery] = []
        self._keys: dict[str, KeyRec] = {}
        self._fail_next: list[str] = []
        self._available = bucket_size
        self._refilled_at = clock()
        self._ids = itertools.count(1001)
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None

    # --- lifecycle -------------------------------------------------------------------

    def start(self, port: int = 0) -> ShopifyDouble:
        double = self

        class Handler(_Handler):
            shop = double

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the double first"
        return f"http://127.0.0.1:{self._server.server_port}"

    def env(self) -> dict[str, str]:
        """Where a process finds this double (the client's base address override)."""
        return {"DESKHAND_SHOPIFY_BASE_URL": self.url}

    # --- the world --------------------------------------------------------------------

    def _gid(self, kind: str) -> str:
        return f"gid://shopify/{kind}/{next(self._ids)}"

    def add_customer(self, email: str, first: str = "", last: str = "") -> str:
        with self._lock:
            gid = self._gid("Customer")
            self.customers[gid] = CustomerRec(gid, email, first, last)
            return gid

    def add_order(
        self,
        name: str,
        email: str,
        total: int,
        *,
        currency: str | None = None,
        gateway: str = "shopify_payments",
        customer: str | None = None,
        line_items: list[tuple[str, int, int]] | list[tuple[str, int, int, str]] | None = None,
        created: dt.datetime | None = None,
        shipped: dt.datetime | None = None,
        delivered: dt.datetime | None = None,
    ) -> str:
        """An order paid in full by one sale of ``total`` minor units; ``line_items`` are
        ``(name, quantity, unit price[, sku])``; ``shipped``/``delivered``: its one fulfillment.
        Answers the order's gid."""
        with self._lock:
            currency = currency or self.currency
            if customer is None:
                customer = next(
                    (c.gid for c in self.customers.values() if c.email == email), None
                ) or self.add_customer(email)
            gid = self._gid("Order")
            sale = Txn(
                self._gid("OrderTransaction"), "SALE", "SUCCESS", gateway, total, None, _now()
            )
            items = [
                {
                    "id": self._gid("LineItem"),
                    "name": line[0],
                    "quantity": line[1],
                    "price": line[2],
                    "sku": line[3] if len(line) > 3 else None,
                }
                for line in (line_items or [(name, 1, total)])
            ]
            self.orders[gid] = OrderRec(gid, name, email, customer, currency, total, items, [sale])
            rec = self.orders[gid]
            rec.created = created or rec.created
            rec.shipped = shipped or delivered
            rec.delivered = delivered
            return gid

    def refund_directly(
        self, order_gid: str, amount: int, note: str = "Refunded in Shopify admin"
    ) -> str:
        """A refund made without Deskhand (staff in Shopify's admin, another app): it is on
        the order at once and its webhooks go out like any other."""
        with self._lock:
            order = self.orders[order_gid]
            sale = order.sales[0]
            if amount > order.left_on(sale):
                raise ValueError("the double never over-refunds, not even for a test")
            return self._make_refund(order, [(sale, amount)], note).gid

    def redact_customer(self, email: str) -> None:
        """The store (or Shopify, for a customer's request) asks for a customer's erasure:
        ``customers/redact`` to the app's compliance address."""
        with self._lock:
            customer = next(c for c in self.customers.values() if c.email == email)
            orders = [_numeric(o.gid) for o in self.orders.values() if o.customer == customer.gid]
            body = {
                "shop_id": 5550001,
                "shop_domain": self.shop_domain,
                "customer": {"id": _numeric(customer.gid), "email": customer.email, "phone": None},
                "orders_to_redact": orders,
            }
        assert self.compliance_uri, "set compliance_uri first (the app's privacy webhook address)"
        self._send(self.compliance_uri, "customers/redact", body)

    def drain(self, to: float = 0.0) -> None:
        """Empty the cost bucket (as another client of the same app and store would)."""
        with self._lock:
            self._available, self._refilled_at = to, self.clock()

    def fail_next_refund(self, message: str = "The payment gateway declined the refund.") -> None:
        """The next refundCreate fails at the gateway: a userError, and its key is spent."""
        with self._lock:
            self._fail_next.append(message)

    def drop_subscriptions(self) -> None:
        """Shopify deletes subscriptions after repeated failed deliveries."""
        with self._lock:
            self.subscriptions.clear()

    def refunds_of(self, order_gid: str) -> list[RefundRec]:
        with self._lock:
            return list(self.orders[order_gid].refunds)

    # --- webhooks ------------------------------------------------------------------------

    def _send(
        self, url: str, topic: str, payload: dict[str, Any], *, version: str = API_VERSIONS[0]
    ) -> Delivery:
        body = json.dumps(payload).encode()
        headers = {
            "Content-Type": "application/json",
            "X-Shopify-Topic": topic,
            "X-Shopify-Hmac-Sha256": sign(self.client_secret, body),
            "X-Shopify-Shop-Domain": self.shop_domain,
            "X-Shopify-Webhook-Id": secrets.token_hex(16),
            "X-Shopify-Event-Id": secrets.token_hex(16),
            "X-Shopify-API-Version": version,
            "X-Shopify-Triggered-At": _iso(_now()),
        }
        delivery = Delivery(topic, url, body, headers)
        with self._lock:
            self.deliveries.append(delivery)
        threading.Thread(target=self._post, args=(delivery,), daemon=True).start()
        return delivery

    def redeliver(self, delivery: Delivery) -> Delivery:
        """Shopify's retry of one delivery: the same body and webhook id, sent again."""
        again = Delivery(delivery.topic, delivery.url, delivery.body, dict(delivery.headers))
        with self._lock:
            self.deliveries.append(again)
        threading.Thread(target=self._post, args=(again,), daemon=True).start()
        return again

    @staticmethod
    def _post(delivery: Delivery) -> None:
        request = urllib.request.Request(
            delivery.url, data=delivery.body, headers=delivery.headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                delivery.status = answer.status
        except urllib.error.HTTPError as exc:
            delivery.status = exc.code
        except OSError as exc:
            delivery.error = str(exc)

    def _topic_out(self, topic: str, payload: dict[str, Any]) -> None:
        enum = topic.upper().replace("/", "_")
        for sub in list(self.subscriptions.values()):
            if sub.topic == enum:
                self._send(sub.uri, topic, payload)

    def _order_payload(self, order: OrderRec) -> dict[str, Any]:
        return {
            "id": _numeric(order.gid),
            "admin_graphql_api_id": order.gid,
            "name": order.name,
            "email": order.email,
            "currency": order.currency,
            "total_price": shopify_decimal(order.total, order.currency),
            "financial_status": order.financial_status.lower(),
            "cancelled_at": _iso(order.cancelled) if order.cancelled else None,
            "updated_at": _iso(order.updated),
            "refunds": [self._refund_payload(order, r) for r in order.refunds],
        }

    def _refund_payload(self, order: OrderRec, refund: RefundRec) -> dict[str, Any]:
        return {
            "id": _numeric(refund.gid),
            "admin_graphql_api_id": refund.gid,
            "order_id": _numeric(order.gid),
            "created_at": _iso(refund.at),
            "note": refund.note,
            "transactions": [
                {
                    "id": _numeric(t.gid),
                    "kind": t.kind.lower(),
                    "status": t.status.lower(),
                    "gateway": t.gateway,
                    "amount": shopify_decimal(t.amount, order.currency),
                    "currency": order.currency,
                    "parent_id": _numeric(t.parent) if t.parent else None,
                }
                for t in refund.transactions
            ],
        }

    # --- money moves ----------------------------------------------------------------------

    def _make_refund(self, order: OrderRec, parts: list[tuple[Txn, int]], note: str) -> RefundRec:
        now = _now()
        txns = [
            Txn(
                self._gid("OrderTransaction"),
                "REFUND",
                "SUCCESS",
                sale.gateway,
                amount,
                sale.gid,
                now,
            )
            for sale, amount in parts
        ]
        refund = RefundRec(self._gid("Refund"), note, txns, now)
        order.refunds.append(refund)
        order.transactions.extend(txns)
        order.updated = now
        self._topic_out("refunds/create", self._refund_payload(order, refund))
        self._topic_out("orders/updated", self._order_payload(order))
        return refund

    def _finish_job(self, job: JobRec, order_gid: str, reason: str, refund: bool) -> None:
        with self._lock:
            order = self.orders[order_gid]
            if refund and order.sales and order.left_on(order.sales[0]):
                self._make_refund(
                    order, [(order.sales[0], order.left_on(order.sales[0]))], "Cancelled"
                )
            order.cancelled = order.updated = _now()
            order.cancel_reason = reason
            job.done = True
            self._topic_out("orders/cancelled", self._order_payload(order))
            self._topic_out("orders/updated", self._order_payload(order))

    # --- the cost bucket --------------------------------------------------------------------

    def _throttle_status(self) -> dict[str, float]:
        return {
            "maximumAvailable": float(self.bucket_size),
            "currentlyAvailable": float(int(self._available)),
            "restoreRate": float(self.restore_rate),
        }

    def _take(self, cost: int) -> bool:
        with self._lock:
            now = self.clock()
            self._available = min(
                self.bucket_size, self._available + (now - self._refilled_at) * self.restore_rate
            )
            self._refilled_at = now
            if cost > self._available:
                return False
            self._available -= cost
            return True

    # --- one request ------------------------------------------------------------------------

    def answer(self, version: str, body: dict[str, Any]) -> dict[str, Any]:
        query = body.get("query")
        variables = body.get("variables") or {}
        if not isinstance(query, str) or not isinstance(variables, dict):
            return {"errors": [_gql_error("Parameter 'query' is required.", "badRequest")]}
        try:
            document = parse(query)
        except GraphQLError as exc:
            return {"errors": [{**exc.formatted, "extensions": {"code": "parseError"}}]}
        errors = validation_errors(self.schema, document)
        if errors:
            return {"errors": errors}
        operation = operation_of(document, body.get("operationName"))
        coerced = get_variable_values(self.schema, operation.variable_definitions or (), variables)
        if isinstance(coerced, list):
            return {
                "errors": [
                    {**e.formatted, "extensions": {"code": "INVALID_VARIABLE"}} for e in coerced
                ]
            }
        try:
            cost = query_cost(
                self.schema, document, operation, dict(getattr(coerced, "coerced", coerced))
            )
        except CostRefused as exc:
            return {"errors": [_gql_error(str(exc), exc.code)]}
        if cost > MAX_QUERY_COST:
            return {
                "errors": [
                    _gql_error(
                        f"Query cost is {cost}, which exceeds the single query max cost limit "
                        f"({MAX_QUERY_COST}).",
                        "MAX_COST_EXCEEDED",
                        cost=cost,
                        maxCost=MAX_QUERY_COST,
                    )
                ]
            }
        if not self._take(cost):
            return {
                "errors": [
                    _gql_error(
                        "Throttled",
                        "THROTTLED",
                        documentation="https://shopify.dev/api/usage/rate-limits",
                    )
                ],
                "extensions": {
                    "cost": {
                        "requestedQueryCost": cost,
                        "actualQueryCost": None,
                        "throttleStatus": self._throttle_status(),
                    }
                },
            }
        root = _Root(self, version, operation)
        result = execute(
            self.schema,
            document,
            root_value=root,
            variable_values=variables,
            operation_name=body.get("operationName"),
        )
        answer: dict[str, Any] = {}
        if result.errors:
            code = "INVALID_VARIABLE" if result.data is None else "INTERNAL_SERVER_ERROR"
            answer["errors"] = [
                {**e.formatted, "extensions": {"code": (e.extensions or {}).get("code", code)}}
                for e in result.errors
            ]
        if result.data is not None:
            answer["data"] = result.data
        with self._lock:
            status = self._throttle_status()
        answer["extensions"] = {
            "cost": {"requestedQueryCost": cost, "actualQueryCost": cost, "throttleStatus": status}
        }
        if root.search_warnings:
            answer["extensions"]["search"] = root.search_warnings
        return answer


def _connection(
    items: list[dict[str, Any]], first: int | None, after: str | None
) -> dict[str, Any]:
    start = int(after) if after and after.isdigit() else 0
    page = items[start : start + (first or 0)]
    return {
        "edges": [{"cursor": str(start + i + 1), "node": n} for i, n in enumerate(page)],
        "nodes": page,
        "pageInfo": {
            "hasNextPage": start + len(page) < len(items),
            "hasPreviousPage": start > 0,
            "startCursor": str(start + 1) if page else None,
            "endCursor": str(start + len(page)) if page else None,
        },
    }


class _Root:
    """Resolvers: graphql-core's default resolver calls a root attribute that is callable
    with ``(info, **arguments)``, and reads nested dicts by key (callables there too)."""

    def __init__(
        self, shop: ShopifyDouble, version: str, operation: OperationDefinitionNode
    ) -> None:
        self.s = shop
        self.version = version
        self.operation = operation
        self.search_warnings: list[dict[str, str]] = []

    # --- views ----------------------------------------------------------------------------

    def _bag(self, minor: int, currency: str) -> dict[str, Any]:
        money = {"amount": shopify_decimal(minor, currency), "currencyCode": currency}
        return {"shopMoney": money, "presentmentMoney": dict(money)}

    def _txn(self, order: OrderRec, t: Txn) -> dict[str, Any]:
        parent = next((p for p in order.transactions if p.gid == t.parent), None)
        return {
            "id": t.gid,
            "kind": t.kind,
            "status": t.status,
            "gateway": t.gateway,
            "amountSet": self._bag(t.amount, order.currency),
            "parentTransaction": self._txn(order, parent) if parent else None,
            "createdAt": _iso(t.at),
            "processedAt": _iso(t.at),
        }

    def _refund(self, order: OrderRec, r: RefundRec) -> dict[str, Any]:
        txns = [self._txn(order, t) for t in r.transactions]
        return {
            "id": r.gid,
            "createdAt": _iso(r.at),
            "updatedAt": _iso(r.at),
            "note": r.note,
            "totalRefundedSet": self._bag(r.amount, order.currency),
            "transactions": lambda info, first=None, after=None: _connection(txns, first, after),
        }

    def _order(self, o: OrderRec) -> dict[str, Any]:
        items = [
            {
                "id": li["id"],
                "name": li["name"],
                "sku": li["sku"],
                "quantity": li["quantity"],
                "originalUnitPriceSet": self._bag(li["price"], o.currency),
            }
            for li in o.line_items
        ]
        received = sum(t.amount for t in o.sales)
        return {
            "id": o.gid,
            "name": o.name,
            "email": o.email,
            "createdAt": _iso(o.created),
            "updatedAt": _iso(o.updated),
            "processedAt": _iso(o.created),
            "cancelledAt": _iso(o.cancelled) if o.cancelled else None,
            "cancelReason": o.cancel_reason,
            "closed": False,
            "currencyCode": o.currency,
            "presentmentCurrencyCode": o.currency,
            "displayFinancialStatus": o.financial_status,
            "totalPriceSet": self._bag(o.total, o.currency),
            "totalReceivedSet": self._bag(received, o.currency),
            "totalRefundedSet": self._bag(o.refunded, o.currency),
            "customer": self._customer(self.s.customers[o.customer])
            if o.customer in self.s.customers
            else None,
            "lineItems": lambda info, first=None, after=None: _connection(items, first, after),
            "refunds": lambda info, first=None: [self._refund(o, r) for r in o.refunds][
                : first or None
            ],
            "transactions": lambda info, first=None: [self._txn(o, t) for t in o.transactions][
                : first or None
            ],
            "fulfillments": lambda info, first=None: self._fulfillments(o)[: first or None],
        }

    def _fulfillments(self, o: OrderRec) -> list[dict[str, Any]]:
        if o.shipped is None:
            return []
        return [
            {
                "id": f"gid://shopify/Fulfillment/{_numeric(o.gid)}",
                "status": "SUCCESS",
                "displayStatus": "DELIVERED" if o.delivered else "IN_TRANSIT",
                "createdAt": _iso(o.shipped),
                "inTransitAt": _iso(o.shipped),
                "deliveredAt": _iso(o.delivered) if o.delivered else None,
            }
        ]

    def _customer(self, c: CustomerRec) -> dict[str, Any]:
        mine = [o for o in self.s.orders.values() if o.customer == c.gid]
        return {
            "id": c.gid,
            "displayName": f"{c.first} {c.last}".strip() or c.email,
            "firstName": c.first or None,
            "lastName": c.last or None,
            "email": c.email,
            "defaultEmailAddress": {"emailAddress": c.email},
            "createdAt": _iso(c.created),
            "updatedAt": _iso(c.created),
            "orders": lambda info, first=None, after=None, reverse=False: _connection(
                [self._order(o) for o in (reversed(mine) if reverse else mine)], first, after
            ),
        }

    def _search(
        self, query: str | None, fields: dict[str, Callable[[Any, str], bool]], rows: list[Any]
    ) -> list[Any]:
        for term in re.findall(r'(\w+):("[^"]*"|\S+)', query or ""):
            name, value = term[0], term[1].strip('"')
            test = fields.get(name)
            if test is None:
                self.search_warnings.append(
                    {"field": name, "message": f"Invalid search field for this query: {name}"}
                )
                continue
            rows = [r for r in rows if test(r, value)]
        return rows

    # --- queries ------------------------------------------------------------------------------

    def shop(self, info: Any) -> dict[str, Any]:
        return {
            "id": "gid://shopify/Shop/5550001",
            "name": "Shopify double",
            "myshopifyDomain": self.s.shop_domain,
            "currencyCode": self.s.currency,
        }

    def order(self, info: Any, id: str) -> dict[str, Any] | None:
        with self.s._lock:
            o = self.s.orders.get(id)
            return self._order(o) if o else None

    def orders(
        self,
        info: Any,
        first: int | None = None,
        after: str | None = None,
        query: str | None = None,
        reverse: bool = False,
        **_: Any,
    ) -> dict[str, Any]:
        with self.s._lock:
            rows = self._search(
                query,
                {
                    "email": lambda o, v: o.email.lower() == v.lower(),
                    "name": lambda o, v: o.name.lower() == v.lower(),
                    "customer_id": lambda o, v: (
                        o.customer is not None and _numeric(o.customer) == int(v)
                    ),
                },
                sorted(self.s.orders.values(), key=lambda o: o.created, reverse=bool(reverse)),
            )
            return _connection([self._order(o) for o in rows], first, after)

    def customer(self, info: Any, id: str) -> dict[str, Any] | None:
        with self.s._lock:
            c = self.s.customers.get(id)
            return self._customer(c) if c else None

    def customers(
        self,
        info: Any,
        first: int | None = None,
        after: str | None = None,
        query: str | None = None,
    ) -> dict[str, Any]:
        with self.s._lock:
            rows = self._search(
                query,
                {"email": lambda c, v: c.email.lower() == v.lower()},
                list(self.s.customers.values()),
            )
            return _connection([self._customer(c) for c in rows], first, after)

    def job(self, info: Any, id: str) -> dict[str, Any] | None:
        with self.s._lock:
            job = self.s.jobs.get(id)
            return {"id": job.gid, "done": job.done} if job else None

    def webhookSubscriptions(
        self,
        info: Any,
        first: int | None = None,
        after: str | None = None,
        topics: list[str] | None = None,
    ) -> dict[str, Any]:
        with self.s._lock:
            subs = [s for s in self.s.subscriptions.values() if not topics or s.topic in topics]
            return _connection([_subscription(s) for s in subs], first, after)

    # --- mutations ------------------------------------------------------------------------------

    def refundCreate(self, info: Any, input: dict[str, Any]) -> dict[str, Any]:
        variables = getattr(
            info.variable_values, "coerced", info.variable_values
        )  # graphql-core 3.3
        key = idempotency_key(self.operation, info.field_name, dict(variables))
        if key is None and self.version >= "2026-04":
            raise GraphQLError(
                "The @idempotent directive is required for this mutation.",
                extensions={"code": "BAD_REQUEST"},
            )
        fingerprint = json.dumps(input, sort_keys=True)
        with self.s._lock:
            if key is not None:
                stored = self.s._keys.get(key)
                if stored is not None and self.s.clock() - stored.at > self.s.key_window_seconds:
                    stored = None
                    del self.s._keys[key]
                if stored is not None:
                    if stored.fingerprint != fingerprint:
                        raise _idempotency_error(
                            "IDEMPOTENCY_KEY_PARAMETER_MISMATCH",
                            "The same idempotency key cannot be used with different operation parameters.",
                        )
                    if stored.refund is None:
                        raise _idempotency_error(
                            "IDEMPOTENCY_PREVIOUS_ATTEMPT_FAILED",
                            "A previous request with this idempotency key failed. Retry with a new idempotency key.",
                        )
                    order = next(
                        o
                        for o in self.s.orders.values()
                        if any(r.gid == stored.refund for r in o.refunds)
                    )
                    refund = next(r for r in order.refunds if r.gid == stored.refund)
                    return {
                        "order": self._order(order),
                        "refund": self._refund(order, refund),
                        "userErrors": [],
                    }
            payload, made = self._refund_create(input)
            if key is not None:
                self.s._keys[key] = KeyRec(
                    fingerprint, self.s.clock(), made.gid if made else None, payload["userErrors"]
                )
            return payload

    def _refund_create(self, input: dict[str, Any]) -> tuple[dict[str, Any], RefundRec | None]:
        order = self.s.orders.get(input["orderId"])
        if order is None:
            return _user_error("Order does not exist", ["orderId"]), None
        if input.get("currency") and input["currency"] != order.currency:
            return _user_error(f"Currency must be {order.currency}", ["currency"]), None
        txns = input.get("transactions") or []
        if not txns:
            return _user_error("A refund needs transactions or line items.", ["transactions"]), None
        parts: list[tuple[Txn, int]] = []
        for i, t in enumerate(txns):
            where = ["transactions", str(i)]
            sale = next((s for s in order.sales if s.gid == t.get("parentId")), None)
            if t["orderId"] != order.gid or t["kind"] != "REFUND" or sale is None:
                return _user_error(
                    "Transaction must refund a sale of this order.", [*where, "parentId"]
                ), None
            if t["gateway"] != sale.gateway:
                return _user_error(f"Gateway must be {sale.gateway}.", [*where, "gateway"]), None
            try:
                amount = minor_from_decimal(str(t["amount"]), order.currency)
            except AmountMalformed:
                return _user_error(
                    f"Amount is not valid {order.currency}.", [*where, "amount"]
                ), None
            if amount <= 0:
                return _user_error("Amount must be greater than 0.", [*where, "amount"]), None
            left = order.left_on(sale) - sum(a for s, a in parts if s is sale)
            if amount > left:
                return (
                    _user_error(
                        f"Refund amount {format_cents(amount, order.currency)} is greater "
                        f"than net payment received {format_cents(left, order.currency)}.",
                        [*where, "amount"],
                    ),
                    None,
                )
            parts.append((sale, amount))
        if self.s._fail_next:
            return _user_error(self.s._fail_next.pop(0), ["transactions"]), None
        refund = self.s._make_refund(order, parts, input.get("note") or "")
        return {
            "order": self._order(order),
            "refund": self._refund(order, refund),
            "userErrors": [],
        }, refund

    def orderCancel(
        self,
        info: Any,
        orderId: str,
        reason: str,
        restock: bool,
        refund: bool | None = None,
        refundMethod: dict[str, Any] | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        refund = bool(refund) or bool((refundMethod or {}).get("originalPaymentMethodsRefund"))
        with self.s._lock:
            order = self.s.orders.get(orderId)
            if order is None:
                return {
                    "job": None,
                    "userErrors": [],
                    "orderCancelUserErrors": [
                        {
                            "field": ["orderId"],
                            "message": "Order does not exist",
                            "code": "NOT_FOUND",
                        }
                    ],
                }
            pending = any(not j.done for j in self.s.jobs.values() if j.order == orderId)
            if order.cancelled or pending:
                return {
                    "job": None,
                    "userErrors": [],
                    "orderCancelUserErrors": [
                        {
                            "field": ["orderId"],
                            "message": "Order has already been cancelled.",
                            "code": "INVALID",
                        }
                    ],
                }
            job = JobRec(self.s._gid("Job"), orderId)
            self.s.jobs[job.gid] = job
        timer = threading.Timer(
            self.s.job_seconds, self.s._finish_job, args=(job, orderId, reason, bool(refund))
        )
        timer.daemon = True
        timer.start()
        return {
            "job": {"id": job.gid, "done": False},
            "orderCancelUserErrors": [],
            "userErrors": [],
        }

    def webhookSubscriptionCreate(
        self, info: Any, topic: str, webhookSubscription: dict[str, Any]
    ) -> dict[str, Any]:
        uri = webhookSubscription["uri"]
        loopback = re.match(r"^http://(127\.0\.0\.1|localhost)(:\d+)?/", uri)
        if not (uri.startswith("https://") or loopback):
            return {
                "webhookSubscription": None,
                "userErrors": [
                    {
                        "field": ["webhookSubscription", "callbackUrl"],
                        "message": "Address protocol http:// is not supported",
                    }
                ],
            }
        with self.s._lock:
            if any(s.topic == topic and s.uri == uri for s in self.s.subscriptions.values()):
                return {
                    "webhookSubscription": None,
                    "userErrors": [
                        {
                            "field": ["webhookSubscription", "callbackUrl"],
                            "message": "Address for this topic has already been taken",
                        }
                    ],
                }
            sub = Subscription(self.s._gid("WebhookSubscription"), topic, uri)
            self.s.subscriptions[sub.gid] = sub
            return {"webhookSubscription": _subscription(sub), "userErrors": []}


def _subscription(s: Subscription) -> dict[str, Any]:
    return {
        "id": s.gid,
        "topic": s.topic,
        "uri": s.uri,
        "format": "JSON",
        "createdAt": _iso(s.created),
        "updatedAt": _iso(s.created),
    }


def _idempotency_error(code: str, message: str) -> GraphQLError:
    """An ``@idempotent`` refusal: a top-level error with its code (the payload's
    ``UserError`` has no code field), ``refundCreate`` itself null."""
    return GraphQLError(message, extensions={"code": code})


def _user_error(message: str, field: list[str] | None = None) -> dict[str, Any]:
    return {
        "order": None,
        "refund": None,
        "userErrors": [{"field": field, "message": message}],
    }


class _Handler(BaseHTTPRequestHandler):
    shop: ShopifyDouble
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("X-Request-Id", secrets.token_hex(8))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        match = re.fullmatch(
            r"/admin/api/([0-9]{4}-[0-9]{2})/graphql\.json", self.path.split("?")[0]
        )
        if match is None or match.group(1) not in API_VERSIONS:
            self._send(404, {"errors": "Not Found"})
            return
        token = self.headers.get("X-Shopify-Access-Token", "")
        if not hmac.compare_digest(token.encode(), self.shop.access_token.encode()):
            self._send(
                401,
                {
                    "errors": "[API] Invalid API key or access token (unrecognized login or wrong password)"
                },
            )
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError
        except ValueError:
            self._send(400, {"errors": {"query": "Required parameter missing or invalid"}})
            return
        answer = self.shop.answer(match.group(1), body)
        with self.shop._lock:
            self.shop.requests.append(
                Recorded(
                    match.group(1),
                    token,
                    str(body.get("query")),
                    dict(body.get("variables") or {}),
                    answer,
                )
            )
        self._send(200, answer)


@dataclasses.dataclass
class Received:
    path: str
    headers: Message  # case-insensitive, as HTTP headers are
    body: bytes


class WebhookInbox:
    """A receiver for the double's deliveries in tests: a real HTTP server on 127.0.0.1 that
    answers ``status`` (200 unless told) and keeps every request as it arrived, raw body
    included, so a test checks the signature over the exact bytes."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.received: list[Received] = []
        inbox = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                inbox.received.append(Received(self.path, self.headers, raw))
                self.send_response(inbox.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def url(self, path: str = "/webhooks/shopify") -> str:
        return f"http://127.0.0.1:{self._server.server_port}{path}"

    def of(self, topic: str) -> list[Received]:
        return [r for r in self.received if r.headers.get("X-Shopify-Topic") == topic]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def mirror_seeded_orders(shop: ShopifyDouble, merchant_slug: str) -> int:
    """Give the double the orders the database holds for one merchant (``make demo
    SHOP=double``: the demo's Northwind, its orders at "Shopify"), each paid in full by one
    sale, named by its reference, under its customer's email, placed, shipped and delivered
    when the row says. Answers how many."""
    from deskhand.domain.desk.models import Order

    n = 0
    orders = Order.objects.filter(merchant__slug=merchant_slug).select_related("customer")
    for order in orders.prefetch_related("items"):
        shop.add_order(
            order.reference,
            order.customer.email,
            order.total_cents,
            currency=order.currency,
            created=order.placed_at,
            shipped=order.placed_at if order.status in ("shipped", "delivered") else None,
            delivered=order.delivered_at,
            line_items=[
                (i.description, i.quantity, i.unit_price_cents, i.sku) for i in order.items.all()
            ]
            or None,
        )
        n += 1
    return n


def main(argv: list[str] | None = None) -> None:
    """``python -m tests.support.shopify_double [--port N]``: the double on its own, until
    Ctrl-C, printing where it listens and its token and client secret (test values)."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--shop", default="northwind-double.myshopify.com")
    args = parser.parse_args(argv)
    shop = ShopifyDouble(shop_domain=args.shop)
    shop.start(port=args.port)
    print(
        json.dumps(
            {
                "url": shop.url,
                "shop_domain": shop.shop_domain,
                "access_token": shop.access_token,
                "client_secret": shop.client_secret,
                "api_versions": list(API_VERSIONS),
            }
        ),
        flush=True,
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        shop.stop()


if __name__ == "__main__":
    main()
