"""A payment provider double: a Stripe-style refunds API on 127.0.0.1, for tests and the demo.

A stdlib ``ThreadingHTTPServer`` (port 0) in a daemon thread. It speaks the subset of
the refunds API ``agent.effects.payments`` uses — ``POST /v1/refunds`` (form-encoded
``charge``, ``amount``, ``currency``, ``reason``, ``metadata[...]``, with an
``Idempotency-Key`` header), ``GET /v1/refunds/{id}``, ``GET /v1/refunds`` (``charge``,
``created[gte]``, ``limit``, ``starting_after``; newest first, ``has_more``) — and behaves
like a provider where it matters for exactly-once:

* **Idempotency.** The first request under a key that reaches the refund logic has its
  status and body stored; the same key with the same parameters gets that answer again
  (``Idempotent-Replayed: true``), with other parameters a 400 ``idempotency_error``. A key
  still being processed gets a 409 ``idempotency_key_in_use``. Keys are forgotten after
  ``key_window_seconds`` on the injectable ``clock`` — after that the same key makes a
  *second* refund, which is why Deskhand never re-sends a claim that old.
* **Declines** (stored and replayed like any answer that reached the refund logic):
  ``charge_already_refunded`` (nothing left on the charge), ``amount_too_large``,
  ``charge_disputed`` (``charge(..., disputed=True)``), ``balance_insufficient``
  (``balance_cents``), ``resource_missing`` (an unknown charge), or any code queued with
  ``decline(code)``.
* **Failures before the refund logic** (never stored, so a retry under the same key
  proceeds): 401 for a wrong key (its message echoes the key it was sent, as careless
  providers do), ``rate_limited(retry_after)`` (429 + ``Retry-After``), ``server_error()``
  (500).
* **Slow and lost answers**: ``slow(seconds)`` processes the request after a delay;
  ``lose_response()`` makes the refund, stores the answer, and closes the connection
  without a reply.

Everything it was asked is in ``requests``; every refund it made is in ``refunds``.
``refund_directly`` makes one "behind the ledger's back", as a person in the provider's
dashboard would.
"""

from __future__ import annotations

import contextlib
import dataclasses
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


@dataclasses.dataclass
class Charge:
    id: str
    amount_cents: int
    currency: str = "usd"
    disputed: bool = False


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
        self.charges: dict[str, Charge] = {}
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
        """Forget every charge, refund, key, request and scripted behaviour (a new world)."""
        with self._lock:
            self.charges.clear()
            self.refunds.clear()
            self.requests.clear()
            self._keys.clear()
            self._in_progress.clear()
            self._script.clear()

    # --- the world --------------------------------------------------------------------

    def charge(
        self, charge_id: str, amount_cents: int, currency: str = "usd", *, disputed: bool = False
    ) -> Charge:
        with self._lock:
            self.charges[charge_id] = Charge(charge_id, amount_cents, currency.lower(), disputed)
            return self.charges[charge_id]

    def refunded_cents(self, charge_id: str) -> int:
        with self._lock:
            return sum(r["amount"] for r in self.refunds if r["charge"] == charge_id)

    def refund_directly(self, charge_id: str, amount_cents: int, **metadata: str) -> dict[str, Any]:
        """A refund made at the provider without Deskhand (its dashboard, another system)."""
        with self._lock:
            charge = self.charges[charge_id]
            return self._make(charge, amount_cents, "requested_by_customer", dict(metadata))

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
            "charge": charge.id,
            "currency": charge.currency,
            "created": int(self.clock()),
            "metadata": metadata,
            "reason": reason,
            "status": "succeeded",
        }
        self.refunds.append(refund)
        if self.balance_cents is not None:
            self.balance_cents -= amount
        return refund

    def _refund_logic(
        self, form: dict[str, str], metadata: dict[str, str], script: Scripted | None
    ) -> tuple[int, dict[str, Any]]:
        charge = self.charges.get(form.get("charge", ""))
        if charge is None:
            return 404, _error(
                "invalid_request_error",
                f"No such charge: '{form.get('charge', '')}'",
                code="resource_missing",
                param="charge",
            )
        try:
            amount = int(form.get("amount", ""))
        except ValueError:
            return 400, _error(
                "invalid_request_error",
                "Invalid integer: amount",
                code="parameter_invalid_integer",
                param="amount",
            )
        if script is not None and script.kind == "decline":
            return 402, _error(
                "invalid_request_error",
                f"The refund was declined ({script.code}).",
                code=script.code,
            )
        if charge.disputed:
            return 400, _error(
                "invalid_request_error",
                f"Charge {charge.id} has been charged back; cannot issue a refund.",
                code="charge_disputed",
            )
        left = charge.amount_cents - self.refunded_cents(charge.id)
        if left <= 0:
            return 400, _error(
                "invalid_request_error",
                f"Charge {charge.id} has already been refunded.",
                code="charge_already_refunded",
            )
        if amount < 1 or amount > left:
            return 400, _error(
                "invalid_request_error",
                f"Refund amount ({amount}) is greater than unrefunded amount on charge ({left})",
                code="amount_too_large",
                param="amount",
            )
        if self.balance_cents is not None and amount > self.balance_cents:
            return 400, _error(
                "invalid_request_error",
                "You have insufficient funds in your account for this refund.",
                code="balance_insufficient",
            )
        return 200, self._make(charge, amount, form.get("reason", ""), metadata)

    def handle_create(
        self, key: str | None, form_pairs: list[tuple[str, str]]
    ) -> tuple[int, dict[str, Any], dict[str, str], Scripted | None]:
        """(status, body, extra headers, script): what a POST /v1/refunds is answered."""
        form = {k: v for k, v in form_pairs if not k.startswith("metadata[")}
        metadata = {
            k[9:-1]: v for k, v in form_pairs if k.startswith("metadata[") and k.endswith("]")
        }
        fingerprint = json.dumps(sorted(form_pairs))
        script = self._next_script()
        if script is not None and script.kind == "rate_limited":
            return (
                429,
                _error(
                    "rate_limit_error",
                    "Too many requests hit the API too quickly.",
                    code="rate_limit",
                ),
                {"Retry-After": f"{script.retry_after:g}"},
                None,
            )
        if script is not None and script.kind == "server_error":
            return (
                500,
                _error("api_error", "An unknown error occurred while processing the request."),
                {},
                None,
            )
        with self._lock:
            now = self.clock()
            if key is not None:
                stored = self._keys.get(key)
                if stored is not None and now - stored.at > self.key_window_seconds:
                    del self._keys[key]  # expired: forgotten, as a provider prunes old keys
                    stored = None
                if stored is not None:
                    if stored.fingerprint != fingerprint:
                        return (
                            400,
                            _error(
                                "idempotency_error",
                                "Keys for idempotent requests can only be used with the same parameters "
                                f"they were first used with. Try using a key other than '{key}' if you "
                                "meant to execute a different request.",
                            ),
                            {},
                            None,
                        )
                    return stored.status, stored.body, {"Idempotent-Replayed": "true"}, None
                if key in self._in_progress:
                    return (
                        409,
                        _error(
                            "idempotency_error",
                            "There is currently another in-progress request using this idempotency key. "
                            "Please try again later.",
                            code="idempotency_key_in_use",
                        ),
                        {},
                        None,
                    )
                self._in_progress.add(key)
        try:
            if script is not None and script.kind == "slow":
                time.sleep(script.seconds)
            with self._lock:
                status, body = self._refund_logic(form, metadata, script)
                if key is not None:
                    self._keys[key] = Stored(fingerprint, status, body, self.clock())
        finally:
            if key is not None:
                with self._lock:
                    self._in_progress.discard(key)
        return status, body, {}, script

    def list(self, query: dict[str, str]) -> dict[str, Any]:
        with self._lock:
            rows = sorted(self.refunds, key=lambda r: r["created"], reverse=True)
        if "charge" in query:
            rows = [r for r in rows if r["charge"] == query["charge"]]
        if "created[gte]" in query:
            rows = [r for r in rows if r["created"] >= int(query["created[gte]"])]
        if "starting_after" in query:
            ids = [r["id"] for r in rows]
            at = (
                ids.index(query["starting_after"]) + 1
                if query["starting_after"] in ids
                else len(ids)
            )
            rows = rows[at:]
        limit = max(1, min(100, int(query.get("limit", "10"))))
        return {
            "object": "list",
            "url": "/v1/refunds",
            "data": rows[:limit],
            "has_more": len(rows) > limit,
        }

    def get(self, refund_id: str) -> dict[str, Any] | None:
        with self._lock:
            return next((r for r in self.refunds if r["id"] == refund_id), None)


def _error(
    kind: str, message: str, *, code: str | None = None, param: str | None = None
) -> dict[str, Any]:
    err: dict[str, Any] = {"type": kind, "message": message}
    if code:
        err["code"] = code
    if param:
        err["param"] = param
    return {"error": err}


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
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client gave up (timed out) first

    def _authorised(self, rec: Recorded) -> bool:
        given = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if given == self.api.api_key:
            return True
        rec.status = 401
        self._send(401, _error("invalid_request_error", f"Invalid API Key provided: {given}"))
        return False

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
        if not self._authorised(rec):
            return
        status, body, headers, script = self.api.handle_create(
            self.headers.get("Idempotency-Key"), form
        )
        rec.status, rec.replayed = status, "Idempotent-Replayed" in headers
        if script is not None and script.kind == "lose_response":
            # The refund is made and its answer stored; the reply never arrives.
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
            return
        self._send(status, body, headers)

    def do_GET(self) -> None:
        rec = self._record([])
        if not self._authorised(rec):
            return
        parts = urllib.parse.urlsplit(self.path)
        if parts.path == "/v1/refunds":
            rec.status = 200
            self._send(200, self.api.list(dict(urllib.parse.parse_qsl(parts.query))))
            return
        if parts.path.startswith("/v1/refunds/"):
            refund = self.api.get(urllib.parse.unquote(parts.path.rsplit("/", 1)[1]))
            if refund is None:
                rec.status = 404
                self._send(
                    404, _error("invalid_request_error", "No such refund", code="resource_missing")
                )
                return
            rec.status = 200
            self._send(200, refund)
            return
        rec.status = 404
        self._send(
            404, _error("invalid_request_error", f"Unrecognized request URL (GET: {self.path}).")
        )


def charge_seeded_orders(api: PaymentsApi) -> int:
    """Give the double a charge for every order the database says was paid through it."""
    from deskhand.domain.desk.models import Order

    n = 0
    for order in Order.objects.exclude(payment_reference=""):
        api.charge(order.payment_reference, order.total_cents, order.currency)
        n += 1
    return n
