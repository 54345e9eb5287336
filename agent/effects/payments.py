"""The payments adapter: refunds at Stripe through its own SDK, exactly once by key.

The SDK is Stripe's ``stripe`` package, one ``StripeClient`` per call with:

* **a pinned API version** (``API_VERSION``, sent as ``Stripe-Version``): the account's
  default version cannot change what a refund answers under us; the SDK's typed objects
  are written for the version it ships with, which a test holds equal to ours;
* **the ledger key as ``Idempotency-Key``** (``idempotency_key``), passed as the request's
  option, so the SDK's own retries and a re-executed step all send the same key; the
  ledger key also goes into the refund's metadata (``deskhand_ledger_key``), which is how
  a lookup (``find``) and reconciliation match a Stripe refund to its ledger entry;
* **the base address** from ``DESKHAND_PAYMENTS_URL`` (Stripe's own when unset; the
  tests' and the demo's double when set);
* **retries counted once**: the SDK retries a lost connection, a 409 and a 5xx under the
  same key; the adapter retries only a 429; both draw on one ``RequestSpend`` that the
  SDK's HTTP client asks before each request (``deskhand.infra.retry``).

Refunds are made **by payment intent** — what every Stripe payment has had since the
PaymentIntents API — when ``Order.payment_reference`` is a ``pi_…``; an order recorded from
the older Charges API (a ``ch_…`` reference, as rows written before this adapter used the
SDK hold) is refunded by charge. Stripe takes either and answers the same refund, which
names both. A reference of any other shape is refused before anything is sent.

Stripe's errors become the adapter's outcomes (``error_outcome``): a refusal (a 4xx:
``charge_already_refunded``, ``amount_too_large``, ``idempotency_error`` for a key reused
with other parameters, a bad key, …) is ``failed`` with Stripe's own sentence; a 429 is
retried after its ``Retry-After``; a lost connection, a 409 or a 5xx the SDK already
retried, and a spent budget are ``unknown`` — the claim stays pending under its key.

The secret key travels in the ``Authorization`` header only (the SDK puts it there).
Nothing Stripe says is passed on without ``config.redact``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

import stripe
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
from deskhand.infra import retry

NAME = "payments"
METADATA_KEY = "deskhand_ledger_key"
API_VERSION = "2026-10-28.endive"
"""The Stripe API version every request names (``Stripe-Version``). Moving it is a contract
change: read Stripe's changelog for refunds between the two, move the double with it."""
SPENT = "the retry budget of this effect is spent; no further request was sent"
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


def payment_param(reference: str) -> dict[str, str]:
    """What a refund is made against: ``{"payment_intent": pi_…}``, or ``{"charge": ch_…}``
    for an order paid through the older Charges API. Raises ``ValueError`` for anything else."""
    if reference.startswith("pi_"):
        return {"payment_intent": reference}
    if reference.startswith("ch_") or reference.startswith("py_"):
        return {"charge": reference}
    raise ValueError(
        f"the order's payment reference {reference[:40]!r} is neither a Stripe payment intent "
        "(pi_…) nor a charge (ch_…)"
    )


class _CountedHTTP(stripe.RequestsClient):
    """The SDK's own HTTP client, asking the effect's ``RequestSpend`` before each request.

    The SDK calls ``request`` once per attempt, its retries included; a refusal here is a
    connection error the SDK must not retry, so nothing more is sent.
    """

    def __init__(self, *, timeout: float, spend: retry.RequestSpend | None) -> None:
        super().__init__(timeout=timeout)
        self.spend = spend

    # The signature of the SDK's own ``RequestsClient.request``, which its base's stub widens.
    def request(  # type: ignore[override]
        self, method: str, url: str, headers: Mapping[str, str] | None, post_data: Any = None
    ) -> tuple[bytes, int, Mapping[str, str]]:
        if self.spend is not None and not self.spend.take():
            raise stripe.APIConnectionError(SPENT, should_retry=False)
        return super().request(method, url, headers, post_data)


def stripe_client(
    cfg: config.PaymentsConfig, spend: retry.RequestSpend | None = None
) -> stripe.StripeClient:
    """A ``StripeClient`` for ``cfg``: pinned version, its address, retries within ``spend``."""
    return stripe.StripeClient(
        cfg.api_key,
        stripe_version=API_VERSION,
        base_addresses={"api": cfg.base_url},
        max_network_retries=retry.sdk_network_retries(spend.policy if spend else retry.EFFECT),
        http_client=_CountedHTTP(timeout=cfg.timeout_seconds, spend=spend),
    )


def client_for(merchant: Merchant, spend: retry.RequestSpend | None = None) -> stripe.StripeClient:
    return stripe_client(config.payments(merchant.slug), spend)


def list_refunds(
    client: stripe.StripeClient, *, payment_reference: str | None = None, since: int | None = None
) -> Iterator[dict[str, Any]]:
    """Every refund (newest first) on one payment, or since a time, across Stripe's pages.

    Raises ``stripe.StripeError`` when a page cannot be read."""
    params: dict[str, Any] = {"limit": 100}
    if payment_reference is not None:
        params.update(payment_param(payment_reference))
    if since is not None:
        params["created"] = {"gte": since}
    for refund in client.v1.refunds.list(params).auto_paging_iter():  # type: ignore[arg-type]
        yield refund.to_dict()


def refund_known(client: stripe.StripeClient, refund_id: str) -> bool | None:
    """Does Stripe know refund ``refund_id``? ``None`` when it could not say."""
    try:
        client.v1.refunds.retrieve(refund_id)
    except stripe.InvalidRequestError as exc:
        return False if exc.http_status == 404 else None
    except stripe.StripeError:
        return None
    return True


def ledger_key_of(refund: Mapping[str, Any]) -> str | None:
    """The ledger key a Stripe refund was made under (from its metadata), if any."""
    meta = refund.get("metadata")
    value = meta.get(METADATA_KEY) if meta is not None else None
    return value if isinstance(value, str) else None


def paid_with(refund: Mapping[str, Any]) -> set[str]:
    """The payment references a refund is on: its payment intent and its charge."""
    return {str(v) for v in (refund.get("payment_intent"), refund.get("charge")) if v}


def refund_outcome(refund: Mapping[str, Any]) -> Outcome:
    """Read a refund Stripe made (or answered again): done, or failed if it says so."""
    status = str(refund.get("status") or "succeeded")
    ref = str(refund.get("id") or "")
    if status in ("failed", "canceled"):
        reason = str(refund.get("failure_reason") or status)
        return Outcome("failed", provider_ref=ref, code=f"refund_{status}", reason=reason)
    amount = refund.get("amount")
    return Outcome(
        "done", provider_ref=ref, amount_cents=amount if isinstance(amount, int) else None
    )


def _said(exc: stripe.StripeError) -> tuple[str, str]:
    """(code, sentence) of a Stripe error, in Stripe's words, redacted."""
    body = exc.json_body if isinstance(exc.json_body, dict) else {}
    said = body.get("error")
    err: dict[str, Any] = said if isinstance(said, dict) else {}
    status = exc.http_status
    code = str(err.get("code") or err.get("type") or (f"http_{status}" if status else "no_answer"))
    sentence = str(err.get("message") or exc.user_message or type(exc).__name__)
    return config.redact(code)[:100], config.redact(sentence)[:500]


def error_outcome(exc: stripe.StripeError) -> Outcome:
    """What a Stripe error means for a refund. Raises ``Retry`` for a 429 (the SDK leaves
    those to us); everything the SDK retries itself is settled here, never retried again."""
    code, sentence = _said(exc)
    status = exc.http_status or 0
    if isinstance(exc, stripe.RateLimitError):
        after = exc.headers.get("retry-after") if exc.headers else None
        try:
            wait = max(0.0, float(after)) if after is not None else None
        except ValueError:
            wait = None
        raise Retry(f"429 {code}: {sentence}", after=wait)
    if isinstance(exc, stripe.APIConnectionError) or status == 409 or status >= 500 or not status:
        # Lost, timed out, the key in use, Stripe's own failure — after the SDK's retries
        # under the same key: undecided. Only that key may ever ask again.
        return Outcome("unknown", code=code, reason=sentence)
    return Outcome("failed", code=code, reason=sentence)


def _order(entry: LedgerEntry) -> Order:
    args = entry.arguments if isinstance(entry.arguments, dict) else {}
    return Order.objects.select_related("merchant").get(
        merchant_id=entry.merchant_id, reference=args.get("order_reference")
    )


def create_refund(
    client: stripe.StripeClient,
    *,
    key: str,
    payment_reference: str,
    amount_cents: int,
    metadata: dict[str, str],
) -> dict[str, Any]:
    """``POST /v1/refunds`` under ``key``; the refund as plain data. Raises
    ``stripe.StripeError`` as the SDK does."""
    params: dict[str, Any] = {
        **payment_param(payment_reference),
        "amount": amount_cents,
        "reason": "requested_by_customer",
        "metadata": metadata,
    }
    refund = client.v1.refunds.create(params, {"idempotency_key": key})  # type: ignore[arg-type]
    return refund.to_dict()


def refund_with_retries(
    cfg: config.PaymentsConfig,
    *,
    key: str,
    payment_reference: str,
    amount_cents: int,
    metadata: dict[str, str],
    budget: config.Budget | None = None,
) -> Outcome:
    """One refund under ``key``, retried as ``deskhand.infra.retry`` says: by the SDK (a lost
    connection, a 409, a 5xx) and by us (a 429), every request drawn from one budget.

    ``calls`` is what was sent, the SDK's own retries included.
    """
    limits = budget or config.budget()
    spend = retry.RequestSpend(
        dataclasses.replace(
            retry.EFFECT, max_attempts=limits.attempts, budget_seconds=limits.seconds
        )
    )
    client = stripe_client(cfg, spend)

    def attempt() -> Outcome:
        try:
            refund = create_refund(
                client,
                key=key,
                payment_reference=payment_reference,
                amount_cents=amount_cents,
                metadata=metadata,
            )
        except stripe.StripeError as exc:
            return error_outcome(exc)
        return refund_outcome(refund)

    outcome = with_retries(attempt, budget=limits)
    return dataclasses.replace(outcome, calls=spend.sent)


class PaymentsAdapter:
    """Refunds at the merchant's Stripe account (``Merchant.refund_adapter == "payments"``)."""

    name = NAME

    def prepare(self, ctx: ToolContext, args: dict[str, Any], entry: LedgerEntry) -> None:
        order = customer_order(ctx, args["order_reference"])
        if not order.payment_reference:
            raise ToolError(
                f"cannot refund {order.reference} through the payment provider: the order has no "
                "payment on record there. Escalate the ticket to a person."
            )
        try:
            payment_param(order.payment_reference)
            config.payments(order.merchant.slug)
        except (ValueError, config.NotConfigured) as exc:
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
            cfg = config.payments(order.merchant.slug)
        except config.NotConfigured as exc:
            # Configured at claim time, gone now: nothing is sent, the claim stays pending.
            return Outcome("unknown", code="not_configured", reason=str(exc))
        return refund_with_retries(
            cfg,
            key=idempotency_key(entry.key),
            payment_reference=order.payment_reference,
            amount_cents=int(entry.arguments["amount_cents"]),
            metadata={
                METADATA_KEY: entry.key[:500],
                "deskhand_order": order.reference,
                "deskhand_merchant": order.merchant.slug,
            },
        )

    def find(self, entry: LedgerEntry) -> Outcome:
        """Look the claim up among the payment's refunds by its ledger key; never create one."""
        order = _order(entry)
        try:
            client = client_for(order.merchant)
            for refund in list_refunds(client, payment_reference=order.payment_reference):
                if ledger_key_of(refund) == entry.key[:500]:
                    return dataclasses.replace(refund_outcome(refund), calls=1)
        except (stripe.StripeError, ValueError, config.NotConfigured) as exc:
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
        if outcome.state == "failed" and outcome.code == "idempotency_error":
            # Not a decline: Stripe already holds another request under this claim's key.
            # This claim moved nothing; what the other request did is reconciliation's to find.
            services.refund_release(ledger_entry_id=entry.pk)
            return (
                f"The payment provider refused the refund of {money} against {order.reference}: "
                "this claim's idempotency key was already used for a request with other "
                f"parameters. It answered: {outcome.reason} [{outcome.code}]. No money moved "
                "under this claim; reconciliation reports whatever the earlier request made. "
                "The approval is used up: do not propose the refund again; escalate to a person.",
                False,
            )
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
