"""A Stripe double: the refunds API as the ``stripe`` SDK speaks it, on 127.0.0.1.

A stdlib ``ThreadingHTTPServer`` (port 0) in a daemon thread. It is strict where Stripe is
strict, so a request the real API would refuse is refused here too, in Stripe's words
(docs.stripe.com: "Idempotent requests", "Errors", "Refunds", "Versioning"):

* **The wire.** ``POST /v1/refunds`` (``application/x-www-form-urlencoded``, nested
  parameters as ``metadata[key]``), ``GET /v1/refunds`` (``charge``, ``payment_intent``,
  ``created[gte|gt|lte|lt]``, ``limit``, ``starting_after``, ``ending_before``; newest first,
  ``has_more``), ``GET /v1/refunds/{id}``. ``Authorization: Bearer <secret key>`` (401
  otherwise, echoing the key it was sent as careless providers do); a ``Stripe-Version``
  it does not speak is a 400; an unknown parameter is a 400 ``parameter_unknown``
  ("Received unknown parameter: …"); a missing or malformed one
  ``parameter_missing`` / ``parameter_invalid_integer``; an unknown path a 404.
* **Payments.** ``charge("pi_…", amount)`` is a PaymentIntent with its charge (``ch_…``,
  derived from the intent's id); ``charge("ch_…", amount)`` a charge from the older
  Charges API, with no intent. A refund names both, is made against either, and a list
  filters by either.
* **Idempotency.** Keys are at most 255 characters. A request that fails validation
  stores nothing under its key (Stripe: "no idempotent result is saved"). The first
  request under a key that reaches the refund logic has its status and body stored
  — successes and declines alike; the same key with the same method, path and
  parameters gets that answer again (``Idempotent-Replayed: true``), with anything
  different a 400 ``idempotency_error``. A key still being processed gets a 409
  ``idempotency_error`` (code ``idempotency_key_in_use``). Keys are forgotten after
  ``key_window_seconds`` on the injectable ``clock`` — after that the same key makes a
  *second* refund, which is why Deskhand never re-sends a claim that old.
* **Declines** (stored and replayed like any answer that reached the refund logic):
  ``charge_already_refunded`` (nothing left), ``amount_too_large`` (more than is left),
  ``charge_disputed``, ``balance_insufficient`` (``balance_cents``), ``resource_missing``
  (an unknown payment), or any code queued with ``decline(code)``.
* **Failures before the refund logic** (never stored, so a retry under the same key
  proceeds): ``rate_limited(retry_after)`` (429 + ``Retry-After``), ``server_error()``
  (500 with ``Stripe-Should-Retry: true``, as Stripe marks a failure that did nothing).
* **Slow and dropped answers**: ``slow(seconds)`` processes the request after a delay;
  ``lose_response()`` makes the refund, stores the answer, and drops the connection
  without a reply — the SDK sees a lost connection and retries under the same key.

Everything it was asked is in ``requests``; every refund it made is in ``refunds``.
``webhook_event`` and ``signed`` make the events Stripe posts to a webhook endpoint, signed
as Stripe signs them.
``refund_directly`` makes one "behind the ledger's back", as a person in Stripe's
dashboard would.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import json
import secrets
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_KEY = "sk_test_double_4eC39HqLyjWDarjtT1zdp7dc"
API_VERSIONS = frozenset({"2026-10-28.endive"})
"""The versions this double speaks: the one ``agent.effects.payments`` pins."""

CREATE_PARAMS = frozenset(
    {
        "amount",
        "charge",
        "currency",
        "customer",
        "expand",
        "instructions_email",
        "metadata",
        "origin",
        "payment_intent",
        "reason",
        "refund_application_fee",
        "reverse_transfer",
    }
)
LIST_PARAMS = frozenset(
    {"charge", "created", "ending_before", "expand", "limit", "payment_intent", "starting_after"}
)
REASONS = frozenset({"duplicate", "fraudulent", "requested_by_customer"})


@dataclasses.dataclass
class Charge:
    """A payment at the double: a charge, and the PaymentIntent it belongs to (if any)."""

    id: str
    amount_cents: int
    currency: str = "usd"
    disputed: bool = False
    payment_intent: str | None = None


@dataclasses.dataclass
class Stored:
    fingerprint: str
    status: int
    body: dict[str, Any]
    at: float


@dataclasses.dataclass
class Scripted:
    kind: str  # rate_limited | server_error | slow | lose_response | decline
    retry_after: float = 1.0
    seconds: float = 0.0
    code: str = ""


@dataclasses.dataclass
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    form: list[tuple[str, str]]
    status: int = 0
    replayed: bool = False


class Refused(Exception):
    """A request Stripe refuses before acting: (status, error body); nothing is stored."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(status)
        self.status, self.body = status, body


class PaymentsApi:
    def __init__(
        self,
        *,
        api_key: str = DEFAULT_KEY,
        key_window_seconds: float = 86_400,
        clock: Callable[[], float] = time.time,
        balance_cents: int | None = None,
    ) -> None:
        self.api_key = api_key
        self.key_window_seconds = key_window_seconds
        self.clock = clock
        self.balance_cents = balance_cents
        self.charges: dict[str, Charge] = {}  # by charge id and by payment intent id
        self.refunds: list[dict[str, Any]] = []
        self.requests: list[Recorded] = []
        self._keys: dict[str, Stored] = {}
        self._in_progress: set[str] = set()
        self._script: list[Scripted] = []
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None

    # --- lifecycle -----------------------------------------------------------------

    def start(self) -> PaymentsApi:
        double = self

        class Handler(_Handler):
            api = double

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
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
        """What a worker needs to reach this double."""
        return {"DESKHAND_PAYMENTS_URL": self.url, "DESKHAND_PAYMENTS_API_KEY": self.api_key}

    def reset(self) -> None:
        """Forget every payment, refund, key, request and scripted behaviour (a new world)."""
        with self._lock:
            self.charges.clear()
            self.refunds.clear()
            self.requests.clear()
            self._keys.clear()
            self._in_progress.clear()
            self._script.clear()

    # --- the world --------------------------------------------------------------------

    def charge(
        self, reference: str, amount_cents: int, currency: str = "usd", *, disputed: bool = False
    ) -> Charge:
        """A payment: ``pi_…`` makes a PaymentIntent and its charge, ``ch_…`` a bare charge."""
        with self._lock:
            intent = reference if reference.startswith("pi_") else None
            charge_id = "ch_" + reference[3:] if intent else reference
            made = Charge(charge_id, amount_cents, currency.lower(), disputed, intent)
            self.charges[charge_id] = made
            if intent:
                self.charges[intent] = made
            return made

    def refunded_cents(self, reference: str) -> int:
        """What is refunded on a payment, named by its intent or its charge."""
        with self._lock:
            charge = self.charges[reference]
            return sum(r["amount"] for r in self.refunds if r["charge"] == charge.id)

    def refund_directly(self, reference: str, amount_cents: int, **metadata: str) -> dict[str, Any]:
        """A refund made at Stripe without Deskhand (its dashboard, another system)."""
        with self._lock:
            return self._make(
                self.charges[reference], amount_cents, "requested_by_customer", metadata
            )

    # --- scripted behaviour of the next POST /v1/refunds -------------------------------

    def rate_limited(self, retry_after: float = 1.0, times: int = 1) -> None:
        self._queue(Scripted("rate_limited", retry_after=retry_after), times)

    def server_error(self, times: int = 1) -> None:
        self._queue(Scripted("server_error"), times)

    def slow(self, seconds: float, times: int = 1) -> None:
        self._queue(Scripted("slow", seconds=seconds), times)

    def lose_response(self, times: int = 1) -> None:
        self._queue(Scripted("lose_response"), times)

    def decline(self, code: str, times: int = 1) -> None:
        self._queue(Scripted("decline", code=code), times)

    def _queue(self, item: Scripted, times: int) -> None:
        with self._lock:
            self._script.extend([item] * times)

    def _next_script(self) -> Scripted | None:
        with self._lock:
            return self._script.pop(0) if self._script else None

    # --- the API ----------------------------------------------------------------------

    def _make(
        self, charge: Charge, amount: int, reason: str, metadata: dict[str, str]
    ) -> dict[str, Any]:
        refund = {
            "id": "re_" + secrets.token_hex(12),
            "object": "refund",
            "amount": amount,
            "balance_transaction": "txn_" + secrets.token_hex(12),
            "charge": charge.id,
            "created": int(self.clock()),
            "currency": charge.currency,
            "destination_details": None,
            "metadata": dict(metadata),
            "payment_intent": charge.payment_intent,
            "reason": reason or None,
            "receipt_number": None,
            "source_transfer_reversal": None,
            "status": "succeeded",
            "transfer_reversal": None,
        }
        self.refunds.append(refund)
        if self.balance_cents is not None:
            self.balance_cents -= amount
        return refund

    def _validate_create(
        self, form: list[tuple[str, str]]
    ) -> tuple[dict[str, str], dict[str, str]]:
        """(parameters, metadata) of a create, or ``Refused`` as Stripe words it."""
        params: dict[str, str] = {}
        metadata: dict[str, str] = {}
        for name, value in form:
            top = name.split("[", 1)[0]
            if top not in CREATE_PARAMS:
                raise Refused(400, _unknown_parameter(top))
            if top == "metadata":
                if not (name.startswith("metadata[") and name.endswith("]")):
                    raise Refused(400, _invalid("metadata", "Invalid hash", "parameter_invalid"))
                metadata[name[9:-1]] = value
            else:
                params[name] = value
        if "charge" not in params and "payment_intent" not in params:
            raise Refused(
                400,
                _error(
                    "invalid_request_error",
                    "One of the following params should be provided for this request: "
                    "payment_intent or charge.",
                    code="parameter_missing",
                ),
            )
        if "amount" in params and not params["amount"].lstrip("-").isdigit():
            raise Refused(
                400,
                _invalid(
                    "amount",
                    "Invalid integer: " + params["amount"][:40],
                    "parameter_invalid_integer",
                ),
            )
        if params.get("reason", "requested_by_customer") not in REASONS:
            raise Refused(
                400,
                _invalid(
                    "reason",
                    f"Invalid reason: must be one of {', '.join(sorted(REASONS))}",
                    "parameter_invalid",
                ),
            )
        return params, metadata

    def _refund_logic(
        self, params: dict[str, str], metadata: dict[str, str], script: Scripted | None
    ) -> tuple[int, dict[str, Any]]:
        named = params.get("payment_intent") or params.get("charge", "")
        field = "payment_intent" if "payment_intent" in params else "charge"
        charge = self.charges.get(named)
        if charge is None or (field == "payment_intent") != named.startswith("pi_"):
            what = "payment_intent" if field == "payment_intent" else "charge"
            return 404, _error(
                "invalid_request_error",
                f"No such {what}: '{named}'",
                code="resource_missing",
                param=field,
            )
        if script is not None and script.kind == "decline":
            return 402, _error(
                "card_error", f"The refund was declined ({script.code}).", code=script.code
            )
        if charge.disputed:
            return 400, _error(
                "invalid_request_error",
                f"Charge {charge.id} has been charged back; cannot issue a refund.",
                code="charge_disputed",
            )
        left = charge.amount_cents - self.refunded_cents(charge.id)
        amount = int(params["amount"]) if "amount" in params else left
        if left <= 0:
            return 400, _error(
                "invalid_request_error",
                f"Charge {charge.id} has already been refunded.",
                code="charge_already_refunded",
            )
        if amount < 1 or amount > left:
            return 400, _error(
                "invalid_request_error",
                f"Refund amount ({_money(amount, charge.currency)}) is greater than unrefunded "
                f"amount on charge ({_money(left, charge.currency)})",
                code="amount_too_large",
                param="amount",
            )
        if self.balance_cents is not None and amount > self.balance_cents:
            return 400, _error(
                "invalid_request_error",
                "You have insufficient funds in your Stripe account for this refund.",
                code="balance_insufficient",
            )
        return 200, self._make(charge, amount, params.get("reason", ""), metadata)

    def handle_create(
        self, key: str | None, form: list[tuple[str, str]]
    ) -> tuple[int, dict[str, Any], dict[str, str], Scripted | None]:
        """(status, body, extra headers, script): what a POST /v1/refunds is answered."""
        script = self._next_script()
        if script is not None and script.kind == "rate_limited":
            return (
                429,
                _error(
                    "invalid_request_error",
                    "Too many requests hit the API too quickly. We recommend an exponential "
                    "backoff of your requests.",
                    code="rate_limit",
                ),
                {"Retry-After": f"{script.retry_after:g}"},
                None,
            )
        if script is not None and script.kind == "server_error":
            return (
                500,
                _error("api_error", "An unknown error occurred while processing the request."),
                {"Stripe-Should-Retry": "true"},
                None,
            )
        if key is not None and len(key) > 255:
            return (
                400,
                _error(
                    "invalid_request_error",
                    "Invalid idempotency key: must be at most 255 characters.",
                    code="idempotency_key_too_long",
                ),
                {},
                None,
            )
        fingerprint = json.dumps(["POST", "/v1/refunds", sorted(form)])
        with self._lock:
            now = self.clock()
            if key is not None:
                stored = self._keys.get(key)
                if stored is not None and now - stored.at > self.key_window_seconds:
                    del self._keys[key]  # expired: forgotten, as Stripe prunes keys after 24 h
                    stored = None
                if stored is not None:
                    if stored.fingerprint != fingerprint:
                        return (
                            400,
                            _error(
                                "idempotency_error",
                                "Keys for idempotent requests can only be used with the same "
                                "parameters they were first used with. Try using a key other "
                                f"than '{key}' if you meant to execute a different request.",
                            ),
                            {},
                            None,
                        )
                    return stored.status, stored.body, {"Idempotent-Replayed": "true"}, script
                if key in self._in_progress:
                    return (
                        409,
                        _error(
                            "idempotency_error",
                            "There is currently another in-progress request using this "
                            f"idempotent key (that probably means you submitted twice, and the "
                            f"other request is still going through): {key}. Please try again "
                            "later.",
                            code="idempotency_key_in_use",
                        ),
                        {},
                        None,
                    )
        try:
            params, metadata = self._validate_create(form)
        except Refused as refused:
            return refused.status, refused.body, {}, None  # validation: nothing stored
        with self._lock:
            if key is not None:
                self._in_progress.add(key)
        try:
            if script is not None and script.kind == "slow":
                time.sleep(script.seconds)
            with self._lock:
                status, body = self._refund_logic(params, metadata, script)
                if key is not None:
                    self._keys[key] = Stored(fingerprint, status, body, self.clock())
        finally:
            if key is not None:
                with self._lock:
                    self._in_progress.discard(key)
        return status, body, {}, script

    def list(self, query: list[tuple[str, str]]) -> dict[str, Any]:
        for name, _ in query:
            if name.split("[", 1)[0] not in LIST_PARAMS:
                raise Refused(400, _unknown_parameter(name.split("[", 1)[0]))
        q = dict(query)
        with self._lock:
            rows = sorted(
                enumerate(self.refunds),
                key=lambda pair: (pair[1]["created"], pair[0]),
                reverse=True,
            )
        found = [r for _, r in rows]
        if "charge" in q:
            found = [r for r in found if r["charge"] == q["charge"]]
        if "payment_intent" in q:
            found = [r for r in found if r["payment_intent"] == q["payment_intent"]]
        for op, keep in (
            ("gte", lambda c, v: c >= v),
            ("gt", lambda c, v: c > v),
            ("lte", lambda c, v: c <= v),
            ("lt", lambda c, v: c < v),
        ):
            bound = q.get(f"created[{op}]")
            if bound is not None:
                if not bound.isdigit():
                    raise Refused(
                        400,
                        _invalid(
                            f"created[{op}]",
                            f"Invalid integer: {bound[:40]}",
                            "parameter_invalid_integer",
                        ),
                    )
                found = [r for r in found if keep(r["created"], int(bound))]
        if "starting_after" in q:
            ids = [r["id"] for r in found]
            if q["starting_after"] not in ids:
                raise Refused(
                    404,
                    _error(
                        "invalid_request_error",
                        f"No such refund: '{q['starting_after']}'",
                        code="resource_missing",
                        param="starting_after",
                    ),
                )
            found = found[ids.index(q["starting_after"]) + 1 :]
        limit_text = q.get("limit", "10")
        if not limit_text.isdigit() or not 1 <= int(limit_text) <= 100:
            raise Refused(
                400,
                _invalid(
                    "limit", "This value must be between 1 and 100.", "parameter_invalid_integer"
                ),
            )
        limit = int(limit_text)
        return {
            "object": "list",
            "url": "/v1/refunds",
            "data": found[:limit],
            "has_more": len(found) > limit,
        }

    def get(self, refund_id: str) -> dict[str, Any] | None:
        with self._lock:
            return next((r for r in self.refunds if r["id"] == refund_id), None)


def _money(cents: int, currency: str) -> str:
    sign = {"usd": "$", "eur": "€", "gbp": "£"}.get(currency, currency.upper() + " ")
    return f"{sign}{cents // 100}.{cents % 100:02d}"


def _error(
    kind: str, message: str, *, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    err: dict[str, Any] = {"type": kind, "message": message}
    if code:
        err["code"] = code
        err["doc_url"] = f"https://docs.stripe.com/error-codes/{code.replace('_', '-')}"
    if param:
        err["param"] = param
    return {"error": err}


def _unknown_parameter(name: str) -> dict[str, Any]:
    return _error(
        "invalid_request_error",
        f"Received unknown parameter: {name}",
        code="parameter_unknown",
        param=name,
    )


def _invalid(param: str, message: str, code: str) -> dict[str, Any]:
    return _error("invalid_request_error", message, code=code, param=param)


class _Handler(BaseHTTPRequestHandler):
    api: PaymentsApi
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Request-Id", "req_" + secrets.token_hex(8))
            version = self.headers.get("Stripe-Version")
            if version:
                self.send_header("Stripe-Version", version)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client gave up (timed out) first

    def _admitted(self, rec: Recorded) -> bool:
        """Authorised, and in a version this double speaks; else answered with Stripe's error."""
        given = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if given != self.api.api_key:
            rec.status = 401
            self._send(401, _error("invalid_request_error", f"Invalid API Key provided: {given}"))
            return False
        version = self.headers.get("Stripe-Version")
        if version is not None and version not in API_VERSIONS:
            rec.status = 400
            self._send(
                400,
                _error(
                    "invalid_request_error",
                    f"Invalid Stripe API version: {version[:60]}",
                    code="api_version_invalid",
                ),
            )
            return False
        return True

    def _record(self, form: list[tuple[str, str]]) -> Recorded:
        rec = Recorded(self.command, self.path, dict(self.headers.items()), form)
        with self.api._lock:
            self.api.requests.append(rec)
        return rec

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length).decode() if length else ""
        form = urllib.parse.parse_qsl(raw, keep_blank_values=True)
        rec = self._record(form)
        if urllib.parse.urlsplit(self.path).path != "/v1/refunds":
            rec.status = 404
            self._send(
                404,
                _error("invalid_request_error", f"Unrecognized request URL (POST: {self.path})."),
            )
            return
        if not self._admitted(rec):
            return
        kind = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            rec.status = 400
            self._send(
                400,
                _error(
                    "invalid_request_error",
                    "Invalid request: the body must be application/x-www-form-urlencoded.",
                ),
            )
            return
        status, body, headers, script = self.api.handle_create(
            self.headers.get("Idempotency-Key"), form
        )
        rec.status, rec.replayed = status, "Idempotent-Replayed" in headers
        if script is not None and script.kind == "lose_response" and not rec.replayed:
            # The refund is made and its answer stored; the connection drops without a reply.
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self._send(status, body, headers)

    def do_GET(self) -> None:
        rec = self._record([])
        if not self._admitted(rec):
            return
        parts = urllib.parse.urlsplit(self.path)
        try:
            if parts.path == "/v1/refunds":
                body = self.api.list(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
                rec.status = 200
                self._send(200, body)
                return
            if parts.path.startswith("/v1/refunds/"):
                refund_id = urllib.parse.unquote(parts.path.rsplit("/", 1)[1])
                refund = self.api.get(refund_id)
                if refund is None:
                    raise Refused(
                        404,
                        _error(
                            "invalid_request_error",
                            f"No such refund: '{refund_id}'",
                            code="resource_missing",
                            param="id",
                        ),
                    )
                rec.status = 200
                self._send(200, refund)
                return
        except Refused as refused:
            rec.status = refused.status
            self._send(refused.status, refused.body)
            return
        rec.status = 404
        self._send(
            404, _error("invalid_request_error", f"Unrecognized request URL (GET: {self.path}).")
        )


def webhook_event(
    kind: str, obj: dict[str, Any], *, event_id: str | None = None, at: float | None = None
) -> dict[str, Any]:
    """A Stripe event as a webhook delivers it (``charge.refunded``, ``refund.updated``, …)."""
    return {
        "id": event_id or "evt_" + secrets.token_hex(12),
        "object": "event",
        "api_version": sorted(API_VERSIONS)[-1],
        "created": int(at if at is not None else time.time()),
        "data": {"object": obj},
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": None, "idempotency_key": None},
        "type": kind,
    }


def signed(body: bytes, secret: str, *, at: float | None = None) -> str:
    """The ``Stripe-Signature`` header Stripe sends with ``body``: ``t=…,v1=<hex HMAC-SHA256
    of "t.body" under the endpoint's secret>`` (docs.stripe.com, "Verify webhook signatures")."""
    stamp = int(at if at is not None else time.time())
    mac = hmac.new(secret.encode(), f"{stamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={stamp},v1={mac}"


def charge_seeded_orders(api: PaymentsApi) -> int:
    """Give the double a payment for every order the database says was paid through it."""
    from deskhand.domain.desk.models import Order

    n = 0
    for order in Order.objects.exclude(payment_reference=""):
        api.charge(order.payment_reference, order.total_cents, order.currency)
        n += 1
    return n
