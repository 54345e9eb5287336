"""Shopify's GraphQL Admin API, the part Deskhand needs: a small typed client over httpx.

One store per client: ``https://<shop>/admin/api/<API_VERSION>/graphql.json`` with the custom
app's ``X-Shopify-Access-Token``. The version is pinned (``API_VERSION``): Shopify releases
one a quarter and each is a contract of its own, so moving to a newer one is a change to
test, never something that happens on its own.

What it does, and why each way:

* **Orders by the customer's email and by name**, and one order by id: amounts arrive as
  decimal strings in ``MoneyBag``s and become integer minor units of their currency
  (``minor_from_decimal``), never a float. An order's *remainder* is what is left on its sale
  — the sale's amount less the refund transactions against it — read from Shopify at the
  time it is asked, because staff, another app or the payment provider may refund too.
  Shopify's search ignores a filter it does not understand (and answers everything), so what
  comes back is checked against what was asked.
* **A refund** is ``refundCreate`` with ``@idempotent(key: <the ledger key>)`` and one
  transaction of kind ``REFUND`` against the order's sale, for exactly the amount;
  ``allowOverRefunding`` is never sent. ``userErrors`` (HTTP 200; a field and a message) become
  ``ShopifyRefused`` with Shopify's sentence. The directive's own refusals are top-level errors
  with a code: a key reused with other input is a ``ShopifyRefused``
  (``IDEMPOTENCY_KEY_PARAMETER_MISMATCH``), a key whose earlier attempt failed is
  ``ShopifyKeySpent`` (Shopify asks for a new key: the claim that owns this one did not move
  money), and ``IDEMPOTENCY_CONCURRENT_REQUEST`` is waited out like a lost answer.
* **THROTTLED** is waited out (``deskhand.infra.retry.SHOPIFY``): the answer's
  ``extensions.cost`` says how many points the request needs, how many are available and
  the restore rate, so the wait is exactly ``(needed - available) / restoreRate``; retried
  while the time budget allows, then ``ShopifyThrottled``. A throttled request ran nothing, so retrying it (a mutation
  included) is safe. A lost connection is retried too for reads and for the refund (its
  idempotency key makes the retry the same refund), never for ``orderCancel``.
* **A cancellation** is ``orderCancel``, which answers a job: ``order_cancel`` returns its id,
  ``job_done`` reads it once and ``job_wait`` polls it within a budget.
* **Webhook subscriptions** are created and listed (``health`` checks they still exist).

Errors are typed (``ShopifyError`` and below) and their sentences never hold the token.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import httpx

from deskhand.domain.desk.money import AmountMalformed, decimal_from_minor, minor_from_decimal
from deskhand.infra import retry

API_VERSION = "2026-01"
TIME_BUDGET_SECONDS = retry.SHOPIFY.budget_seconds  # a call's retries, all told
REQUEST_TIMEOUT_SECONDS = 10.0
JOB_POLL_SECONDS = 0.25


class ShopifyError(Exception):
    """Anything Shopify did not do; the message is one sentence for a person."""


class ShopifyUnavailable(ShopifyError):
    """No answer (connection, timeout, 5xx): what was asked may or may not have happened."""


class ShopifyAuthError(ShopifyError):
    """The access token was refused (401/403): the connection needs a person."""


class ShopifyQueryError(ShopifyError):
    """Shopify refused the document itself (``errors``): a bug here, or a version drift."""


class ShopifyThrottled(ShopifyUnavailable):
    """The cost budget did not refill within the time budget; nothing ran."""


class _Throttled(Exception):
    """One THROTTLED answer, with the seconds until the bucket holds what was asked."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"throttled for {seconds:.2f} s")
        self.seconds = seconds


class ShopifyRefused(ShopifyError):
    """A ``userErrors`` answer: Shopify understood and said no, with its sentence."""

    def __init__(
        self, message: str, code: str | None = None, field: list[str] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.field = field or []


class ShopifyKeySpent(ShopifyRefused):
    """The idempotency key's earlier attempt failed; Shopify wants a new key (a new claim)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Money:
    minor: int
    currency: str


@dataclasses.dataclass(frozen=True, slots=True)
class Sale:
    gid: str
    gateway: str
    amount: int  # minor units of the order's shop currency


@dataclasses.dataclass(frozen=True, slots=True)
class Refund:
    gid: str
    amount: int
    currency: str
    created_at: str
    note: str


@dataclasses.dataclass(frozen=True, slots=True)
class Line:
    name: str
    sku: str
    quantity: int
    unit_price: int  # minor units of the shop's currency


@dataclasses.dataclass(frozen=True, slots=True)
class Order:
    """An order as Shopify has it now. Amounts in the shop's currency (``currency``): refunds
    and ceilings are counted there; ``presentment_currency`` is what the customer saw."""

    gid: str
    name: str
    email: str
    currency: str
    presentment_currency: str
    total: int
    refunded: int
    financial_status: str
    cancelled_at: str | None
    updated_at: str
    sale: Sale | None
    refunds: tuple[Refund, ...]
    remainder: int  # left to refund on the sale, as Shopify counts it now
    created_at: str = ""
    shipped_at: str | None = None  # the first fulfillment's creation
    delivered_at: str | None = None  # the last fulfillment's delivery, once every one is
    lines: tuple[Line, ...] | None = None  # None: not asked for (a list of orders)


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    gid: str
    topic: str  # Shopify's enum: ORDERS_UPDATED, REFUNDS_CREATE, ...
    uri: str


# Query cost (Shopify counts it before running): the order 1, each MoneyBag 2 or 3, each of
# up to 10 transactions 4 and refunds 3, each of up to 5 fulfillments 1 -> 82 an order, so
# ten orders cost 822 of the 1000 a single query may cost. Only the shop's money is read inside lists: that is what is counted.
_MONEY = "shopMoney { amount currencyCode }"
_BOTH = "shopMoney { amount currencyCode } presentmentMoney { amount currencyCode }"
ORDER_FIELDS = f"""
fragment OrderFacts on Order {{
  id name email currencyCode presentmentCurrencyCode displayFinancialStatus cancelledAt updatedAt
  createdAt
  totalPriceSet {{ {_BOTH} }}
  totalRefundedSet {{ {_BOTH} }}
  transactions(first: 10) {{
    id kind status gateway amountSet {{ {_MONEY} }} parentTransaction {{ id }}
  }}
  refunds(first: 10) {{ id createdAt note totalRefundedSet {{ {_MONEY} }} }}
  fulfillments(first: 5) {{ createdAt deliveredAt }}
}}
"""
ORDERS_QUERY = (
    "query Orders($query: String!, $first: Int!) {"
    " orders(first: $first, query: $query, sortKey: CREATED_AT, reverse: true)"
    " { nodes { ...OrderFacts } } }" + ORDER_FIELDS
)
# One order (by id, or by name among at most 5) is read with its lines: what the agent weighs
# (goods or shipping, by SKU). 20 lines cost 2 + 20 x 3, so five such orders cost 720.
LINES = (
    f" lineItems(first: 20) {{ nodes {{ name sku quantity originalUnitPriceSet {{ {_MONEY} }} }} }}"
)
ORDER_QUERY = (
    "query Order($id: ID!) { order(id: $id) { ...OrderFacts" + LINES + " } }" + ORDER_FIELDS
)
ORDERS_WITH_LINES_QUERY = (
    "query Orders($query: String!, $first: Int!) {"
    " orders(first: $first, query: $query, sortKey: CREATED_AT, reverse: true)"
    " { nodes { ...OrderFacts" + LINES + " } } }" + ORDER_FIELDS
)
REFUND_MUTATION = (
    "mutation Refund($input: RefundInput!, $key: String!) {"
    " refundCreate(input: $input) @idempotent(key: $key) {"
    f" refund {{ id createdAt note totalRefundedSet {{ {_MONEY} }} }}"
    " userErrors { field message } } }"
)
# A cancellation never refunds by itself (``refundMethod`` says so explicitly): money moves only
# through refundCreate, under a person's consent and the ledger's key.
CANCEL_MUTATION = (
    "mutation Cancel($orderId: ID!, $reason: OrderCancelReason!, $restock: Boolean!,"
    " $notify: Boolean, $note: String) {"
    " orderCancel(orderId: $orderId, reason: $reason, restock: $restock,"
    " notifyCustomer: $notify, staffNote: $note,"
    " refundMethod: {originalPaymentMethodsRefund: false}) {"
    " job { id done } orderCancelUserErrors { field message code } } }"
)
JOB_QUERY = "query Job($id: ID!) { job(id: $id) { id done } }"
SUBSCRIBE_MUTATION = (
    "mutation Subscribe($topic: WebhookSubscriptionTopic!, $uri: String!) {"
    " webhookSubscriptionCreate(topic: $topic, webhookSubscription: {uri: $uri, format: JSON})"
    " { webhookSubscription { id topic uri } userErrors { field message } } }"
)
SUBSCRIPTIONS_QUERY = (
    "query Subscriptions($after: String) { webhookSubscriptions(first: 50, after: $after)"
    " { nodes { id topic uri } pageInfo { hasNextPage endCursor } } }"
)


def _money(bag: dict[str, Any], key: str = "shopMoney") -> Money:
    money = bag[key]
    return Money(minor_from_decimal(money["amount"], money["currencyCode"]), money["currencyCode"])


def order_from(node: dict[str, Any]) -> Order:
    """Shopify's order (``OrderFacts``) as an ``Order``, every amount in integer minor units.

    The sale is the first successful SALE or CAPTURE; its remainder is its amount less the
    successful REFUND transactions whose parent it is."""
    currency = node["currencyCode"]
    txns = node.get("transactions") or []
    fulfillments = node.get("fulfillments") or []
    sales = [t for t in txns if t["kind"] in ("SALE", "CAPTURE") and t["status"] == "SUCCESS"]
    sale = None
    remainder = 0
    if sales:
        s = sales[0]
        sale = Sale(s["id"], s.get("gateway") or "", _money(s["amountSet"]).minor)
        taken = sum(
            _money(t["amountSet"]).minor
            for t in txns
            if t["kind"] == "REFUND"
            and t["status"] == "SUCCESS"
            and (t.get("parentTransaction") or {}).get("id") == sale.gid
        )
        remainder = sale.amount - taken
    refunds = tuple(
        Refund(
            r["id"],
            _money(r["totalRefundedSet"]).minor,
            currency,
            r.get("createdAt") or "",
            r.get("note") or "",
        )
        for r in node.get("refunds") or []
    )
    return Order(
        gid=node["id"],
        name=node["name"],
        email=node.get("email") or "",
        currency=currency,
        presentment_currency=node["presentmentCurrencyCode"],
        total=_money(node["totalPriceSet"]).minor,
        refunded=_money(node["totalRefundedSet"]).minor,
        financial_status=node.get("displayFinancialStatus") or "",
        cancelled_at=node.get("cancelledAt"),
        updated_at=node["updatedAt"],
        sale=sale,
        refunds=refunds,
        remainder=remainder,
        created_at=node.get("createdAt") or "",
        lines=(
            tuple(
                Line(
                    li["name"],
                    li.get("sku") or "",
                    int(li["quantity"]),
                    _money(li["originalUnitPriceSet"]).minor,
                )
                for li in node["lineItems"]["nodes"]
            )
            if "lineItems" in node
            else None
        ),
        shipped_at=min((f["createdAt"] for f in fulfillments), default=None),
        delivered_at=(
            max(f["deliveredAt"] for f in fulfillments)
            if fulfillments and all(f.get("deliveredAt") for f in fulfillments)
            else None
        ),
    )


def _search_value(text: str) -> str:
    """A value for Shopify's search syntax, quoted so spaces and colons stay inside it."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


class ShopifyClient:
    def __init__(
        self,
        shop_domain: str,
        access_token: str,
        *,
        api_version: str = API_VERSION,
        base_url: str = "",
        time_budget: float = TIME_BUDGET_SECONDS,
        timeout: float = REQUEST_TIMEOUT_SECONDS,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.shop_domain = shop_domain
        self.api_version = api_version
        self.endpoint = (
            f"{base_url or 'https://' + shop_domain}/admin/api/{api_version}/graphql.json"
        )
        self.time_budget = time_budget
        self.sleep = sleep
        self.clock = clock
        self._token = access_token
        self._http = httpx.Client(timeout=timeout)
        self.requests_sent = 0  # every POST, retries included (an effect's provider_calls)

    def __repr__(self) -> str:  # never the token
        return f"ShopifyClient({self.shop_domain!r}, api_version={self.api_version!r})"

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ShopifyClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the wire ---------------------------------------------------------------------------

    def execute(
        self, query: str, variables: dict[str, Any] | None = None, *, retry_lost: bool = True
    ) -> dict[str, Any]:
        """``data`` of one document, tried again as ``retry.SHOPIFY`` says (within this
        client's time budget): a THROTTLED answer after the wait its cost figures name, and,
        when ``retry_lost`` (reads and idempotent writes only), a request whose answer never
        came or was a 429/5xx."""

        def attempt() -> dict[str, Any]:
            answer = self._post(query, variables or {})
            codes = {(e.get("extensions") or {}).get("code") for e in answer.get("errors") or []}
            if "THROTTLED" in codes:
                raise _Throttled(self.refill_seconds(answer))
            if "IDEMPOTENCY_CONCURRENT_REQUEST" in codes:
                raise ShopifyUnavailable("Another request under the same key is in progress.")
            return answer

        def transient(exc: BaseException) -> bool:
            return isinstance(exc, _Throttled) or (
                retry_lost and isinstance(exc, ShopifyUnavailable)
            )

        def gave_up(exc: BaseException, calls: int) -> dict[str, Any]:
            if isinstance(exc, _Throttled):
                raise ShopifyThrottled(
                    f"Shopify's rate limit did not allow the request within {self.time_budget:g} s"
                    f" ({calls} attempt(s)); nothing was done."
                )
            raise exc

        answer = retry.retry_call(
            attempt,
            dataclasses.replace(retry.SHOPIFY, budget_seconds=self.time_budget),
            transient=transient,
            named_wait=lambda exc: exc.seconds if isinstance(exc, _Throttled) else None,
            gave_up=gave_up,
            sleep=self.sleep,
            clock=self.clock,
        )
        errors = answer.get("errors") or []
        for error in errors:
            # ``@idempotent`` refusals are top-level errors with a code (refundCreate's
            # UserError has none): a key reused with other input, or a key already spent.
            code = (error.get("extensions") or {}).get("code")
            if code == "IDEMPOTENCY_PREVIOUS_ATTEMPT_FAILED":
                raise ShopifyKeySpent(str(error.get("message")), code)
            if code == "IDEMPOTENCY_KEY_PARAMETER_MISMATCH":
                raise ShopifyRefused(str(error.get("message")), code)
        if errors:
            raise ShopifyQueryError(
                "Shopify refused the request: " + "; ".join(str(e.get("message")) for e in errors)
            )
        return answer.get("data") or {}

    @staticmethod
    def refill_seconds(answer: dict[str, Any]) -> float:
        """How long until the bucket holds what a throttled request asked for."""
        cost = (answer.get("extensions") or {}).get("cost") or {}
        status = cost.get("throttleStatus") or {}
        needed = float(cost.get("requestedQueryCost") or 0)
        available = float(status.get("currentlyAvailable") or 0)
        rate = float(status.get("restoreRate") or 0) or 1.0
        return max(0.05, (needed - available) / rate)

    def _post(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
        self.requests_sent += 1
        try:
            response = self._http.post(
                self.endpoint,
                json={"query": query, "variables": variables},
                headers={"X-Shopify-Access-Token": self._token, "Accept": "application/json"},
            )
        except httpx.HTTPError as exc:
            raise ShopifyUnavailable(
                f"Shopify ({self.shop_domain}) did not answer: {type(exc).__name__}."
            ) from None
        if response.status_code in (401, 403):
            raise ShopifyAuthError(
                f"Shopify refused the access token for {self.shop_domain} "
                f"(HTTP {response.status_code}): reconnect the store."
            )
        if response.status_code >= 500 or response.status_code == 429:
            raise ShopifyUnavailable(f"Shopify answered HTTP {response.status_code}.")
        if response.status_code != 200:
            raise ShopifyQueryError(f"Shopify answered HTTP {response.status_code}.")
        try:
            body = response.json()
        except ValueError:
            raise ShopifyUnavailable("Shopify's answer was not JSON.") from None
        if not isinstance(body, dict):
            raise ShopifyUnavailable("Shopify's answer was not a JSON object.")
        return body

    # --- orders -------------------------------------------------------------------------------

    def orders_by_email(self, email: str, *, first: int = 10) -> list[Order]:
        """The customer's orders, newest first (only those whose email is exactly ``email``)."""
        data = self.execute(
            ORDERS_QUERY, {"query": f"email:{_search_value(email)}", "first": first}
        )
        orders = [order_from(n) for n in data["orders"]["nodes"]]
        return [o for o in orders if o.email.lower() == email.strip().lower()]

    def order_by_name(self, name: str) -> Order | None:
        """The order called ``name``. Shopify names orders ``#1001`` unless the store set a
        prefix of its own, so ``1001`` is looked up as given and then as ``#1001``."""
        given = name.strip()
        for wanted in (given, "#" + given) if not given.startswith("#") else (given,):
            data = self.execute(
                ORDERS_WITH_LINES_QUERY, {"query": f"name:{_search_value(wanted)}", "first": 5}
            )
            found = [
                o
                for o in map(order_from, data["orders"]["nodes"])
                if o.name.lower() == wanted.lower()
            ]
            if found:
                return found[0]
        return None

    def order(self, gid: str) -> Order | None:
        """One order as Shopify has it now: what an effect checks just before it pays."""
        node = self.execute(ORDER_QUERY, {"id": gid})["order"]
        return order_from(node) if node else None

    # --- money ----------------------------------------------------------------------------------

    def refund_create(self, order: Order, amount: int, *, key: str, note: str = "") -> Refund:
        """Refund exactly ``amount`` (minor units of ``order.currency``) against the order's
        sale, under the idempotency ``key`` (the ledger's): the same key again answers the
        same refund. Raises ``ShopifyRefused`` with Shopify's sentence when it says no."""
        if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
            raise ValueError(f"a refund is a positive integer of minor units, not {amount!r}")
        if order.sale is None:
            raise ShopifyRefused(f"Order {order.name} has no sale to refund against.", "INVALID")
        transaction = {
            "orderId": order.gid,
            "parentId": order.sale.gid,
            "kind": "REFUND",
            "gateway": order.sale.gateway,
            "amount": decimal_from_minor(amount, order.currency),
        }
        refund_input: dict[str, Any] = {
            "orderId": order.gid,
            "currency": order.currency,
            "notify": False,
            "transactions": [transaction],
        }
        if note:
            refund_input["note"] = note
        data = self.execute(REFUND_MUTATION, {"input": refund_input, "key": key})
        payload = data.get("refundCreate") or {}
        for error in payload.get("userErrors") or []:
            raise ShopifyRefused(error["message"], None, error.get("field"))
        r = payload.get("refund")
        if not r:
            raise ShopifyQueryError(
                "Shopify answered refundCreate with neither a refund nor an error."
            )
        try:
            made = _money(r["totalRefundedSet"])
        except AmountMalformed as exc:
            raise ShopifyQueryError(str(exc)) from None
        return Refund(
            r["id"], made.minor, made.currency, r.get("createdAt") or "", r.get("note") or ""
        )

    # --- cancellation ------------------------------------------------------------------------

    def order_cancel(
        self,
        order_gid: str,
        *,
        reason: str = "CUSTOMER",
        restock: bool = True,
        notify_customer: bool = False,
        staff_note: str = "",
    ) -> str:
        """Ask Shopify to cancel; answers the job's id (the cancellation is done when it is)."""
        data = self.execute(
            CANCEL_MUTATION,
            {
                "orderId": order_gid,
                "reason": reason,
                "restock": restock,
                "notify": notify_customer,
                "note": staff_note or None,
            },
            retry_lost=False,
        )
        payload = data.get("orderCancel") or {}
        for error in payload.get("orderCancelUserErrors") or []:
            raise ShopifyRefused(error["message"], error.get("code"), error.get("field"))
        job = payload.get("job")
        if not job:
            raise ShopifyQueryError("Shopify answered orderCancel with neither a job nor an error.")
        return str(job["id"])

    def job_done(self, job_gid: str) -> bool:
        job = self.execute(JOB_QUERY, {"id": job_gid}).get("job")
        if job is None:
            raise ShopifyRefused(f"Shopify has no job {job_gid}.", "NOT_FOUND")
        return bool(job["done"])

    def job_wait(self, job_gid: str, *, budget: float | None = None) -> bool:
        """Poll the job until it is done (True) or ``budget`` seconds pass (False)."""
        deadline = self.clock() + (self.time_budget if budget is None else budget)
        while True:
            if self.job_done(job_gid):
                return True
            if self.clock() + JOB_POLL_SECONDS > deadline:
                return False
            self.sleep(JOB_POLL_SECONDS)

    # --- webhook subscriptions --------------------------------------------------------------

    def webhook_subscribe(self, topic: str, uri: str) -> Subscription:
        """Subscribe ``uri`` to ``topic`` (Shopify's enum, ``ORDERS_UPDATED``, or the webhook's
        name, ``orders/updated``)."""
        enum = topic.upper().replace("/", "_")
        data = self.execute(SUBSCRIBE_MUTATION, {"topic": enum, "uri": uri})
        payload = data.get("webhookSubscriptionCreate") or {}
        for error in payload.get("userErrors") or []:
            raise ShopifyRefused(error["message"], None, error.get("field"))
        sub = payload["webhookSubscription"]
        return Subscription(sub["id"], sub["topic"], sub["uri"])

    def webhook_subscriptions(self) -> list[Subscription]:
        out: list[Subscription] = []
        after: str | None = None
        while True:
            page = self.execute(SUBSCRIPTIONS_QUERY, {"after": after})["webhookSubscriptions"]
            out += [Subscription(n["id"], n["topic"], n["uri"]) for n in page["nodes"]]
            if not page["pageInfo"]["hasNextPage"]:
                return out
            after = page["pageInfo"]["endCursor"]
