"""The payments adapter: refunds at a Stripe-style payment provider, exactly once by key.

The wire is the refunds API as Stripe shapes it: ``POST /v1/refunds`` (form-encoded
``charge``, ``amount``, ``currency``, ``reason``, ``metadata[…]``) with an
``Idempotency-Key`` header, ``GET /v1/refunds/{id}``, and ``GET /v1/refunds`` (``charge``,
``created[gte]``, ``limit``, ``starting_after``). Errors are
``{"error": {"type", "code", "message"}}``. The provider keeps an idempotency key for a
window (a day at Stripe): the same key with the same parameters returns the first
answer, with other parameters it is refused (``idempotency_error``), and after the window
the key is forgotten — which is why a claim older than the window is never re-sent.

The key sent is the ledger key (``idempotency_key``): a re-executed step sends the same
one, and so does every retry inside a step. The ledger key is also written into the
refund's metadata (``deskhand_ledger_key``), which is how a lookup (``find``) and
reconciliation match a provider refund to its ledger entry.

The secret key travels in the ``Authorization`` header only. Nothing the provider says is
passed on without ``config.redact``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import json
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

from django.utils import timezone

from agent.effects import config
from agent.effects.base import Outcome, Retry, with_retries
from agent.models.ledger import LedgerEntry
from agent.tools.irreversible import refund_result
from agent.tools.reads import customer_order
from agent.tools.registry import ToolContext, ToolError
from deskhand.domain.desk import services
from deskhand.domain.desk.models import Merchant, Order, RefundStatus
from deskhand.domain.desk.money import format_cents

NAME = "payments"
METADATA_KEY = "deskhand_ledger_key"
_SAFE_KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


def idempotency_key(ledger_key: str) -> str:
    """The ledger key itself, when it can travel in a header; else a stable digest of it.

    A ledger key holds the model's tool call id, which is untrusted text of any bytes: a
    key that is not printable ASCII (or too long) is replaced by ``dh-<sha256>``, which is
    still one key per claim and the same on every attempt.
    """
    if _SAFE_KEY.match(ledger_key):
        return ledger_key
    return "dh-" + hashlib.sha256(ledger_key.encode()).hexdigest()


@dataclasses.dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def error(self) -> dict[str, Any]:
        err = self.body.get("error")
        return err if isinstance(err, dict) else {}

    def describe(self) -> tuple[str, str]:
        """(code, reason) of an error reply, in the provider's words (redacted)."""
        code = str(self.error.get("code") or self.error.get("type") or f"http_{self.status}")
        reason = str(self.error.get("message") or f"HTTP {self.status}")
        return config.redact(code)[:100], config.redact(reason)[:500]

    def retry_after(self) -> float | None:
        value = self.headers.get("retry-after", "")
        try:
            return max(0.0, float(value))
        except ValueError:
            return None


class PaymentsClient:
    """A small client for the provider's refunds API (stdlib ``http.client``)."""

    def __init__(self, cfg: config.PaymentsConfig) -> None:
        self.cfg = cfg
        parts = urllib.parse.urlsplit(cfg.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise config.NotConfigured("DESKHAND_PAYMENTS_URL must be an http(s) URL")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")

    def request(
        self,
        method: str,
        path: str,
        *,
        form: list[tuple[str, str]] | None = None,
        query: list[tuple[str, str]] | None = None,
        idempotency_key: str | None = None,
    ) -> Reply:
        """One HTTP request. A lost connection or a timeout raises ``Retry`` (undecided)."""
        target = self._prefix + path
        if query:
            target += "?" + urllib.parse.urlencode(query)
        body = urllib.parse.urlencode(form).encode() if form is not None else None
        headers = {
            "Authorization": f"Bearer {self.cfg.api_key}",
            "Accept": "application/json",
            "User-Agent": "deskhand-effects/1",
        }
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        conn = cls(self._host, self._port, timeout=self.cfg.timeout_seconds)
        try:
            conn.request(method, target, body=body, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            reply_headers = {k.lower(): v for k, v in resp.getheaders()}
        except (OSError, http.client.HTTPException) as exc:
            # Connection refused, reset, closed mid-reply, timed out: the request may or may
            # not have been acted on. Only the same key may ask again.
            raise Retry(f"no answer from the payment provider ({type(exc).__name__})") from None
        finally:
            conn.close()
        try:
            parsed = json.loads(raw) if raw else {}
        except ValueError:
            parsed = {}
        return Reply(resp.status, reply_headers, parsed if isinstance(parsed, dict) else {})

    def create_refund(
        self, *, key: str, charge: str, amount_cents: int, currency: str, metadata: dict[str, str]
    ) -> Reply:
        form = [
            ("charge", charge),
            ("amount", str(amount_cents)),
            ("currency", currency.lower()),
            ("reason", "requested_by_customer"),
            *((f"metadata[{k}]", v) for k, v in sorted(metadata.items())),
        ]
        return self.request("POST", "/v1/refunds", form=form, idempotency_key=key)

    def get_refund(self, refund_id: str) -> Reply:
        return self.request("GET", f"/v1/refunds/{urllib.parse.quote(refund_id, safe='')}")

    def list_refunds(
        self, *, charge: str | None = None, created_gte: int | None = None
    ) -> Iterator[dict[str, Any]]:
        """Every refund (newest first), following the provider's pages. Raises ``Retry`` or
        ``ProviderError`` when a page cannot be read."""
        after: str | None = None
        while True:
            query = [("limit", "100")]
            if charge is not None:
                query.append(("charge", charge))
            if created_gte is not None:
                query.append(("created[gte]", str(created_gte)))
            if after is not None:
                query.append(("starting_after", after))
            reply = self.request("GET", "/v1/refunds", query=query)
            if reply.status != 200:
                code, reason = reply.describe()
                raise ProviderError(code, reason)
            data = [r for r in reply.body.get("data") or [] if isinstance(r, dict)]
            yield from data
            if not reply.body.get("has_more") or not data:
                return
            after = str(data[-1].get("id"))


class ProviderError(Exception):
    """The provider answered a read with an error (code, reason: redacted)."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code, self.reason = code, reason


def ledger_key_of(refund: dict[str, Any]) -> str | None:
    """The ledger key a provider refund was made under (from its metadata), if any."""
    meta = refund.get("metadata")
    value = meta.get(METADATA_KEY) if isinstance(meta, dict) else None
    return value if isinstance(value, str) else None


def client_for(merchant: Merchant) -> PaymentsClient:
    return PaymentsClient(config.payments(merchant.slug))


def refund_outcome(reply: Reply) -> Outcome:
    """Classify the provider's answer to a create (or a read of one refund)."""
    if 200 <= reply.status < 300:
        status = str(reply.body.get("status") or "succeeded")
        amount = reply.body.get("amount")
        ref = str(reply.body.get("id") or "")
        if status in ("failed", "canceled"):
            reason = str(reply.body.get("failure_reason") or status)
            return Outcome("failed", provider_ref=ref, code=f"refund_{status}", reason=reason)
        return Outcome(
            "done", provider_ref=ref, amount_cents=amount if isinstance(amount, int) else None
        )
    code, reason = reply.describe()
    if reply.status in (409, 429) or reply.status >= 500:
        raise Retry(f"{reply.status} {code}: {reason}", after=reply.retry_after())
    return Outcome("failed", code=code, reason=reason)


def _order(entry: LedgerEntry) -> Order:
    args = entry.arguments if isinstance(entry.arguments, dict) else {}
    return Order.objects.select_related("merchant").get(
        merchant_id=entry.merchant_id, reference=args.get("order_reference")
    )


class PaymentsAdapter:
    """Refunds at the merchant's payment provider (``Merchant.refund_adapter == "payments"``)."""

    name = NAME

    def prepare(self, ctx: ToolContext, args: dict[str, Any], entry: LedgerEntry) -> None:
        order = customer_order(ctx, args["order_reference"])
        if not order.payment_reference:
            raise ToolError(
                f"cannot refund {order.reference} through the payment provider: the order has no "
                "payment on record there. Escalate the ticket to a person."
            )
        try:
            config.payments(order.merchant.slug)
        except config.NotConfigured as exc:
            raise ToolError(f"{exc}; nothing was sent to the payment provider") from None
        try:
            services.refund_issue(
                order=order,
                amount_cents=args["amount_cents"],
                reason=args["reason"],
                run_id=ctx.run_id,
                ledger_entry_id=entry.pk,
                run_ceiling_cents=ctx.max_refund_cents,
                ticket_id=ctx.ticket_id,
                status=RefundStatus.PENDING,
            )
        except services.DomainError as exc:
            raise ToolError(str(exc)) from None

    def perform(self, entry: LedgerEntry) -> Outcome:
        order = _order(entry)
        try:
            client = client_for(order.merchant)
        except config.NotConfigured as exc:
            # Configured at claim time, gone now: nothing is sent, the claim stays pending.
            return Outcome("unknown", code="not_configured", reason=str(exc))
        args = entry.arguments
        key = idempotency_key(entry.key)

        def attempt() -> Outcome:
            return refund_outcome(
                client.create_refund(
                    key=key,
                    charge=order.payment_reference,
                    amount_cents=int(args["amount_cents"]),
                    currency=order.currency,
                    metadata={
                        METADATA_KEY: entry.key[:500],
                        "deskhand_order": order.reference,
                        "deskhand_merchant": order.merchant.slug,
                    },
                )
            )

        return with_retries(attempt)

    def find(self, entry: LedgerEntry) -> Outcome:
        """Look the claim up among the charge's refunds by its ledger key; never create one."""
        order = _order(entry)
        try:
            client = client_for(order.merchant)
            for refund in client.list_refunds(charge=order.payment_reference):
                if ledger_key_of(refund) == entry.key[:500]:
                    return dataclasses.replace(refund_outcome(Reply(200, {}, refund)), calls=1)
        except (Retry, ProviderError, config.NotConfigured) as exc:
            return Outcome("unknown", code="lookup_failed", reason=config.redact(str(exc)), calls=1)
        return Outcome(
            "unknown",
            code="not_found",
            reason="the provider lists no refund under this key",
            calls=1,
        )

    def may_resend(self, entry: LedgerEntry) -> bool:
        try:
            cfg = config.payments(_order(entry).merchant.slug)
        except config.NotConfigured:
            return False
        age = (timezone.now() - entry.created_at).total_seconds()
        return age < cfg.resend_horizon_seconds

    def record(self, entry: LedgerEntry, outcome: Outcome) -> tuple[str, bool]:
        order = _order(entry)
        money = format_cents(int(entry.arguments.get("amount_cents") or 0), order.currency)
        if outcome.state == "done":
            refund = services.refund_confirm(
                ledger_entry_id=entry.pk, provider_refund_id=outcome.provider_ref
            )
            return refund_result(order, refund).text, True
        if outcome.state == "failed":
            services.refund_release(ledger_entry_id=entry.pk)
            return (
                f"The payment provider declined the refund of {money} against {order.reference}: "
                f"{outcome.reason} [{outcome.code}]. No money moved. The approval is used up: "
                "do not propose the same refund again; tell the customer or escalate to a person.",
                False,
            )
        return (
            f"The payment provider has not confirmed the refund of {money} against "
            f"{order.reference} ({outcome.reason}). The money is in flight: it may or may not have "
            "moved. It stays claimed under its key and will not be "
            "sent under another one; reconciliation confirms whether it was made. Do not propose "
            "it again; tell the customer it is being checked.",
            False,
        )
