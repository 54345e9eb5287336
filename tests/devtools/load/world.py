"""Load for the bench, chaos and the fleet tests: many tickets, and a model that parks each run.

``load_world(n)`` adds ``n`` tickets (``LOAD-<i>``) spread over the seeded merchants,
each merchant with one large delivered order ``LOAD-ORDER`` to refund against. The
``park_provider`` asks at once to refund 1.00 of it, so every run reaches the approval
gate after about a dozen durable steps and waits there for a person; once decided it
says it is done. Deterministic (turn N answers a history of N assistant messages), so a
recovered run replays to the same call.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from agent.providers.base import ModelReply
from agent.providers.scripted import ScriptedProvider, call, say

PREFIX = "LOAD-"
QUICK = "QUICK-"  # tickets whose runs read the order once and finish (no approval)
ORDER = "LOAD-ORDER"
REFUND_CENTS = 100


def park_provider() -> ScriptedProvider:
    return ScriptedProvider(
        [
            [
                call(
                    "issue_refund",
                    order_reference=ORDER,
                    amount_cents=REFUND_CENTS,
                    reason="load: park at the gate",
                )
            ],
            [say("done")],
        ],
        model="scripted-load-park",
    )


def quick_provider() -> ScriptedProvider:
    return ScriptedProvider(
        [[call("get_order", reference=ORDER)], [say("done")]], model="scripted-load-quick"
    )


class LoadProvider:
    """One provider for a whole load: ``QUICK-`` tickets finish, every other ticket parks."""

    name = "scripted"

    def __init__(self) -> None:
        self.park, self.quick = park_provider(), quick_provider()
        self.model = self.park.model

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        opening = messages[0].get("content") if messages else ""
        text = opening if isinstance(opening, str) else str(opening)
        script = self.quick if f"Ticket reference: {QUICK}" in text else self.park
        return script.complete(system=system, messages=messages, tools=tools)


def load_world(n: int, start: int = 1, prefix: str = PREFIX) -> list[Any]:
    """``n`` more load tickets (numbered from ``start``), round-robin over the merchants."""
    from deskhand.desk.models import Customer, Merchant, Order, Ticket

    now = timezone.now()
    merchants = list(Merchant.objects.order_by("pk"))
    customers: dict[int, Customer] = {}
    with transaction.atomic():
        for m in merchants:
            customer, _ = Customer.objects.get_or_create(
                merchant=m, email=f"load@{m.slug}.test", defaults={"name": "Load Customer"}
            )
            customers[m.pk] = customer
            Order.objects.get_or_create(
                merchant=m,
                reference=ORDER,
                defaults={
                    "customer": customer,
                    "status": "delivered",
                    "total_cents": 100_000_000,
                    "placed_at": now,
                    "delivered_at": now,
                },
            )
        tickets = [
            Ticket(
                merchant=merchants[i % len(merchants)],
                customer=customers[merchants[i % len(merchants)].pk],
                reference=f"{prefix}{i}",
                subject=f"Load ticket {i}",
            )
            for i in range(start, start + n)
        ]
        Ticket.objects.bulk_create(tickets, batch_size=1000)
    return list(
        Ticket.objects.filter(reference__in=[t.reference for t in tickets]).select_related(
            "merchant"
        )
    )


def owners() -> dict[int, Any]:
    """Each merchant's owner (who decides in the load tests and chaos), by merchant id."""
    from deskhand.desk.models import Membership

    return {
        m.merchant_id: m.user
        for m in Membership.objects.filter(role="owner").select_related("user")
    }
