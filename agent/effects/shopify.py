"""The Shopify refund adapter: ``refundCreate`` under the ledger key, for exactly the approved amount.

Chosen for a run whose order source is ``shopify`` (``agent.ledger.intents.adapter_name``):
the order is at Shopify, so its money goes back through Shopify — against the order's sale,
by the gateway that took it. The claim → call → record protocol is ``agent.ledger.intents``'s;
this module answers its four questions:

``prepare``
    The order is the mirrored row (``deskhand.domain.store.mirror``) of the ticket customer's
    order, freshly read at Shopify; the store must be connected and the order must have a
    sale. A ``Refund`` row is written ``pending`` under every ceiling (as the payments
    adapter does): it counts against every limit because the money may leave.
``perform``
    The order is read at Shopify again (what is on the sale *now*), then ``refundCreate``
    with ``@idempotent(key: <ledger key>)`` for exactly the claimed amount; the key also goes
    into the refund's note (``Deskhand ledger <key>``), which is how ``find`` and
    reconciliation match a Shopify refund to its claim. ``THROTTLED`` is waited out by the
    client within the effect's time budget (``config.budget().seconds``), a lost answer is
    asked again under the same key.
``find``
    The order's refunds at Shopify, matched by the key in their note; never a new refund.
``record``
    Done: the ``Refund`` becomes ``succeeded`` with Shopify's refund id. ``userErrors``: a
    refusal in Shopify's words, the reservation released. ``IDEMPOTENCY_PREVIOUS_ATTEMPT_FAILED``
    (Shopify wants a new key): the claim is settled as *not moved* and a new claim — a new
    key — needs a new decision (``docs/effects.md``).

This module holds only the Shopify path, beside ``payments`` (Stripe), so a change to how
the refund effect re-reads the order before paying lands in one place per platform.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from agent.effects import config
from agent.effects.base import Outcome
from agent.effects.payments import idempotency_key
from agent.models.ledger import LedgerEntry
from agent.tools.irreversible import refund_result
from agent.tools.reads import customer_order
from agent.tools.registry import ToolContext, ToolError
from deskhand.domain.desk import services
from deskhand.domain.desk.models import Order, RefundStatus
from deskhand.domain.desk.money import format_cents
from deskhand.domain.store import shopify
from deskhand.domain.store.models import ShopifyConnection, ShopifyOrder

NAME = "shopify"
NOTE_PREFIX = "Deskhand ledger "
KEY_WINDOW_SECONDS = 86_400
"""How long Shopify keeps an ``@idempotent`` key ("Implementing idempotency"; the double's
``key_window_seconds``). A claim older than this, less the payments margin, is looked up,
never re-sent."""


def note_for(entry: LedgerEntry) -> str:
    return NOTE_PREFIX + idempotency_key(entry.key)


def key_of_note(note: str) -> str | None:
    """The (header-safe) ledger key a Shopify refund's note names, if Deskhand made it."""
    return note[len(NOTE_PREFIX) :].strip() if note.startswith(NOTE_PREFIX) else None


def _order(entry: LedgerEntry) -> Order:
    args = entry.arguments if isinstance(entry.arguments, dict) else {}
    return Order.objects.select_related("merchant").get(
        merchant_id=entry.merchant_id, reference=args.get("order_reference"), source=NAME
    )


def _client(merchant_id: int) -> shopify.ShopifyClient:
    connection = ShopifyConnection.objects.filter(merchant_id=merchant_id).first()
    if connection is None:
        raise config.NotConfigured("no Shopify store is connected for this merchant")
    return connection.client(time_budget=config.budget().seconds)


def refund_at_shopify(entry: LedgerEntry) -> Outcome:
    """Read the order at Shopify, then ``refundCreate`` under the claim's key; the outcome."""
    order = _order(entry)
    held = ShopifyOrder.objects.get(order=order)
    amount = int(entry.arguments["amount_cents"])
    try:
        client = _client(order.merchant_id)
    except config.NotConfigured as exc:
        return Outcome("unknown", code="not_configured", reason=str(exc))
    with client:
        try:
            now = client.order(held.gid)
            if now is None:
                return Outcome(
                    "failed",
                    code="not_found",
                    reason=f"Shopify has no order {held.gid}",
                    calls=client.requests_sent,
                )
            made = client.refund_create(
                now, amount, key=idempotency_key(entry.key), note=note_for(entry)
            )
        except shopify.ShopifyKeySpent as exc:
            return Outcome("failed", code="key_spent", reason=str(exc), calls=client.requests_sent)
        except shopify.ShopifyRefused as exc:
            code = exc.code or "user_error"
            return Outcome("failed", code=code, reason=str(exc), calls=client.requests_sent)
        except shopify.ShopifyError as exc:
            # Throttled past the budget, no answer, a refused token, a refused document: what
            # was asked may have happened under this key. The claim stays pending.
            said = config.redact(str(exc))
            return Outcome(
                "unknown", code=type(exc).__name__, reason=said, calls=client.requests_sent
            )
    return Outcome(
        "done", provider_ref=made.gid, amount_cents=made.amount, calls=client.requests_sent
    )


def refunds_at_shopify(order: Order) -> list[shopify.Refund]:
    """The order's refunds as Shopify has them now. Raises ``ShopifyError`` /
    ``NotConfigured`` when it cannot be read."""
    held = ShopifyOrder.objects.get(order=order)
    with _client(order.merchant_id) as client:
        now = client.order(held.gid)
    return list(now.refunds) if now is not None else []


class ShopifyAdapter:
    """Refunds through Shopify for a run whose orders are at Shopify."""

    name = NAME

    def prepare(self, ctx: ToolContext, args: dict[str, Any], entry: LedgerEntry) -> None:
        order = customer_order(ctx, args["order_reference"])
        held = ShopifyOrder.objects.filter(order=order).first()
        if held is None or not held.sale_gid:
            raise ToolError(
                f"cannot refund {order.reference} through Shopify: Shopify shows no sale on it "
                "to refund against. Escalate the ticket to a person."
            )
        if not ShopifyConnection.objects.filter(merchant_id=order.merchant_id).exists():
            raise ToolError("no Shopify store is connected; nothing was sent to Shopify")
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
        return refund_at_shopify(entry)

    def find(self, entry: LedgerEntry) -> Outcome:
        """Look the claim up among the order's refunds at Shopify by its note; never refund."""
        wanted = idempotency_key(entry.key)
        try:
            for refund in refunds_at_shopify(_order(entry)):
                if key_of_note(refund.note) == wanted:
                    return Outcome(
                        "done", provider_ref=refund.gid, amount_cents=refund.amount, calls=1
                    )
        except (shopify.ShopifyError, config.NotConfigured) as exc:
            return Outcome("unknown", code="lookup_failed", reason=config.redact(str(exc)), calls=1)
        return Outcome(
            "unknown", code="not_found", reason="Shopify lists no refund under this key", calls=1
        )

    def may_resend(self, entry: LedgerEntry) -> bool:
        margin = config._int("DESKHAND_PAYMENTS_KEY_MARGIN_SECONDS", 3_600)
        return (timezone.now() - entry.created_at).total_seconds() < KEY_WINDOW_SECONDS - margin

    def record(self, entry: LedgerEntry, outcome: Outcome) -> tuple[str, bool]:
        order = _order(entry)
        money = format_cents(int(entry.arguments.get("amount_cents") or 0), order.currency)
        if outcome.state == "done":
            refund = services.refund_confirm(
                ledger_entry_id=entry.pk, provider_refund_id=outcome.provider_ref
            )
            return refund_result(order, refund).text, True
        if outcome.state == "failed" and outcome.code == "key_spent":
            services.refund_release(ledger_entry_id=entry.pk)
            return (
                f"Shopify refused the refund of {money} against {order.reference}: this claim's "
                f"idempotency key was spent by an earlier attempt that failed, and Shopify asks "
                f"for a new key. It answered: {outcome.reason} No money moved under this claim. "
                "A new refund is a new claim with its own key and needs a new decision: do not "
                "propose it again yourself; escalate to a person.",
                False,
            )
        if outcome.state == "failed":
            services.refund_release(ledger_entry_id=entry.pk)
            return (
                f"Shopify refused the refund of {money} against {order.reference}: "
                f"{outcome.reason} [{outcome.code}]. No money moved. The approval is used up: "
                "do not propose the same refund again; tell the customer or escalate to a person.",
                False,
            )
        return (
            f"Shopify has not confirmed the refund of {money} against {order.reference} "
            f"({outcome.reason}). The money is in flight: it may or may not have moved. It stays "
            "claimed under its key and will not be sent under another one; reconciliation "
            "confirms whether it was made. Do not propose it again; tell the customer it is "
            "being checked.",
            False,
        )
