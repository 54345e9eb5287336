"""The facts a refund's approver is shown, and the one read of them.

A person approves a refund *on an order as it stood*: "$38.00 on a $100.00 order, nothing
refunded yet". Consent is bound to the exact call (its argument hash) and to those facts:
the approval records them (``Approval.facts``) when it is opened, and the effect reads them
again, under the order's row lock in the transaction that would claim the ledger key
(``agent.ledger.effect``). If the refunded total moved in between (staff refunded $20.00
in the store's admin, another run paid), nothing is paid and the person is asked again.

``refund_facts`` is the one place the order's refunded total is read for this: the order
source (local tables today) is asked here and nowhere else, so another source answers
through this function.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Self

from deskhand.domain.desk import selectors
from deskhand.domain.desk.models import Merchant, Order
from deskhand.domain.desk.money import display_cents
from deskhand.domain.desk.rows import row_by_pk


@dataclasses.dataclass(frozen=True)
class RefundFacts:
    """An order's money as a person weighs a refund on it, in integer minor units of
    ``currency``. ``refunded_cents`` counts every refund on the order, a pending one at a
    payment provider too (it may have left)."""

    order_reference: str
    currency: str
    total_cents: int
    refunded_cents: int

    @property
    def remaining_cents(self) -> int:
        return max(self.total_cents - self.refunded_cents, 0)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "remaining_cents": self.remaining_cents}

    @classmethod
    def from_json(cls, data: Any) -> Self | None:
        """The facts an approval recorded; ``None`` for one that recorded none (opened before
        approvals held facts, or for a call that is not about an order's money)."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                order_reference=str(data["order_reference"]),
                currency=str(data["currency"]),
                total_cents=int(data["total_cents"]),
                refunded_cents=int(data["refunded_cents"]),
            )
        except (KeyError, TypeError, ValueError):
            return None

    def line(self) -> str:
        """``Order total $100.00 · $20.00 already refunded · $80.00 left``: the card's words."""
        money = lambda cents: display_cents(cents, self.currency)  # noqa: E731
        return (
            f"Order total {money(self.total_cents)} · {money(self.refunded_cents)} already "
            f"refunded · {money(self.remaining_cents)} left"
        )


def refund_facts(*, merchant_id: int, reference: Any, lock: bool = False) -> RefundFacts | None:
    """The order's total and refunded total as its source has them now (``None``: no such
    order for this merchant, which the refund itself refuses in words).

    ``lock``: inside the effect's transaction, the merchant's row and then the order's are
    locked first — the order every refund takes them in (``services.refund_issue``) — so no
    refund lands between this read and the claim that follows it.
    """
    if not isinstance(reference, str):
        return None
    order = selectors.order_get(merchant_id=merchant_id, reference=reference, lines=False)
    if order is None:
        return None
    if lock:
        row_by_pk(Merchant, merchant_id, lock=True)
        order = row_by_pk(Order, order.pk, lock=True)
    return RefundFacts(
        order_reference=order.reference,
        currency=order.currency,
        total_cents=order.total_cents,
        refunded_cents=order.refunded_cents(),
    )


# How the model reads a refund the approval no longer covers (``agent.providers.policy_reading``
# reads the record's ``facts_changed``; a model with a key reads the message).
FACTS_CHANGED = "facts_changed"


def facts_moved(seen: RefundFacts, now: RefundFacts, amount_cents: Any) -> dict[str, Any] | None:
    """What the model is told when the order's money moved since the person was shown it
    (``None``: it did not, and the approval holds).

    Nothing is paid on such an approval: the person agreed to this amount on an order with
    ``seen.refunded_cents`` refunded. The model may propose again — at most what is left
    now — and a person is asked again with the new total beside the proposal.
    """
    if (now.total_cents, now.refunded_cents) == (seen.total_cents, seen.refunded_cents):
        return None
    money = lambda cents: display_cents(cents, now.currency)  # noqa: E731
    amount = amount_cents if isinstance(amount_cents, int) else 0
    fits = amount <= now.remaining_cents
    return {
        FACTS_CHANGED: True,
        "order_reference": now.order_reference,
        "currency": now.currency,
        "approved_cents": amount,
        "refunded_cents_when_approved": seen.refunded_cents,
        "refunded_cents": now.refunded_cents,
        "refundable_remaining_cents": now.remaining_cents,
        "message": (
            f"Nothing was refunded: {now.order_reference}'s refunded total changed after the "
            f"person was asked ({money(seen.refunded_cents)} then, {money(now.refunded_cents)} "
            f"now; {money(now.remaining_cents)} left to refund), so their approval of "
            f"{money(amount)} does not hold. "
            + (
                "Propose the refund again if it is still due; a person is asked again with the "
                "new total."
                if fits and now.remaining_cents > 0
                else f"The approved amount no longer fits: propose at most "
                f"{money(now.remaining_cents)}, or nothing, and a person is asked again."
                if now.remaining_cents > 0
                else "Nothing is left to refund on the order."
            )
        ),
    }


def moved_note(record: dict[str, Any]) -> str:
    """The same, in words for the ticket's thread (staff read why no money moved)."""
    money = lambda cents: display_cents(int(cents), str(record["currency"]))  # noqa: E731
    return (
        f"The approved refund of {money(record['approved_cents'])} against "
        f"{record['order_reference']} was not paid: the order's refunded total changed after "
        f"the approval was asked ({money(record['refunded_cents_when_approved'])} then, "
        f"{money(record['refunded_cents'])} now; {money(record['refundable_remaining_cents'])} "
        "left). The agent asks again with the new total."
    )
