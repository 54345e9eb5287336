"""Load for the bench, chaos and the fleet tests: many tickets, and a model that parks each run.

``load_world(n)`` adds ``n`` tickets (``LOAD-<i>``) spread over the seeded merchants,
each with a delivered order of its own (``LOAD-<i>-ORDER``) to refund against: an approval
holds for the order's refunded total the person saw (``agent.tools.order_facts``), so runs
sharing one order would each find it moved by the others. The
``park_provider`` asks at once to refund 1.00 of it, so every run reaches the approval
gate after about a dozen durable steps and waits there for a person; once decided it
says it is done. Deterministic (turn N answers a history of N assistant messages), so a
recovered run replays to the same call.

``ask_world(n)`` adds ``n`` tickets (``ASK-<i>``) whose runs wait on the customer instead:
the model asks which order (``ask_customer``, as the keyless policy does for the README's
mail demo), a merchant rule approves the question as Northwind's does, and the run parks
until the customer answers (``customer_answer``); then it says it is done.
"""

from __future__ import annotations

import re
from typing import Any

from django.db import transaction
from django.utils import timezone

from agent.providers.base import ModelReply
from agent.providers.scripted import ScriptedProvider, call, say

PREFIX = "LOAD-"
QUICK = "QUICK-"  # tickets whose runs read the order once and finish (no approval)
ASK = "ASK-"  # tickets whose runs ask the customer a question and wait for the answer
ORDER = "LOAD-ORDER"
REFUND_CENTS = 100


def park_provider(order_reference: str = ORDER) -> ScriptedProvider:
    return ScriptedProvider(
        [
            [
                call(
                    "issue_refund",
                    order_reference=order_reference,
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


ASK_MODEL = "scripted-load-ask"
ASK_QUESTION = "Which order is this about? Its reference is on your order confirmation."
ASK_OPENING = "Hello, my order has not arrived yet. Can you help?"
ANSWER = "It is LOAD-ORDER, thank you."
# A merchant rule approves at most this many calls a day (agent.consent.policy.MAX_PER_DAY):
# the customer-parked load spreads its tickets over one bench merchant per this many.
ASK_PER_MERCHANT = 1000


def ask_provider(reference: str) -> ScriptedProvider:
    return ScriptedProvider(
        [[call("ask_customer", reference=reference, question=ASK_QUESTION)], [say("done")]],
        model=ASK_MODEL,
    )


def own_order(ticket_reference: str) -> str:
    """The order a ``LOAD-<i>`` ticket's run refunds against (``load_world`` makes it)."""
    return f"{ticket_reference}-ORDER"


class LoadProvider:
    """One provider for a whole load: ``QUICK-`` tickets finish, ``ASK-`` tickets wait on the
    customer, every other ticket parks at the approval gate."""

    name = "scripted"

    def __init__(self) -> None:
        self.park, self.quick = park_provider(), quick_provider()
        self.model = self.park.model

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        opening = messages[0].get("content") if messages else ""
        text = opening if isinstance(opening, str) else str(opening)
        asking = re.search(rf"Ticket reference: ({ASK}\d+)", text)
        parking = re.search(rf"Ticket reference: ({PREFIX}\d+)", text)
        if asking:
            script = ask_provider(asking.group(1))
        elif parking:
            script = park_provider(own_order(parking.group(1)))
        else:
            script = self.quick if f"Ticket reference: {QUICK}" in text else self.park
        return script.complete(system=system, messages=messages, tools=tools)


def load_world(n: int, start: int = 1, prefix: str = PREFIX) -> list[Any]:
    """``n`` more load tickets (numbered from ``start``), round-robin over the merchants."""
    from deskhand.domain.desk.models import Customer, Merchant, Order, Ticket

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
        if prefix == PREFIX:
            Order.objects.bulk_create(
                [
                    Order(
                        merchant=t.merchant,
                        customer=t.customer,
                        reference=own_order(t.reference),
                        status="delivered",
                        total_cents=100_000,
                        placed_at=now,
                        delivered_at=now,
                    )
                    for t in tickets
                ],
                batch_size=1000,
                ignore_conflicts=True,
            )
    return list(
        Ticket.objects.filter(reference__in=[t.reference for t in tickets]).select_related(
            "merchant"
        )
    )


def _ask_merchant(k: int) -> Any:
    """The ``k``-th bench merchant for customer-parked runs: its rule approves the question."""
    from django.contrib.auth.models import User

    from approvals.models import ApprovalPolicy
    from deskhand.domain.desk.models import Customer, Membership, Merchant, Role, SupportAddress

    slug = f"bench-ask-{k}"
    merchant = Merchant.objects.filter(slug=slug).first()
    if merchant is not None:
        return merchant
    merchant = Merchant.objects.create(slug=slug, name=f"Bench Ask {k}", ticket_prefix=f"BA{k}")
    SupportAddress.objects.create(
        merchant=merchant, address=f"support@{slug}.test", primary=True, verified_at=timezone.now()
    )
    owner, _ = User.objects.get_or_create(
        username="owner@bench-ask.test", defaults={"email": "owner@bench-ask.test"}
    )
    Membership.objects.create(user=owner, merchant=merchant, role=Role.OWNER)
    ApprovalPolicy.objects.create(
        merchant=merchant,
        version=1,
        rules=[{"tool": "ask_customer", "max_per_day": ASK_PER_MERCHANT}],
        created_by=owner,
        created_by_name=owner.email,
    )
    Customer.objects.create(merchant=merchant, email=f"ask@{slug}.test", name="Ask Customer")
    return merchant


def ask_world(n: int, start: int = 1) -> list[Any]:
    """``n`` more ``ASK-`` tickets, each opened by a customer's message (the question is a
    reply on its thread: without a customer line there is nothing to reply to)."""
    from deskhand.domain.desk.models import MessageChannel, Ticket
    from deskhand.domain.desk.thread import thread_customer_message_add

    tickets, merchants = [], {}
    for i in range(start, start + n):
        k = i // ASK_PER_MERCHANT
        if k not in merchants:
            merchants[k] = _ask_merchant(k)
        merchant = merchants[k]
        customer = merchant.customers.get()
        with transaction.atomic():
            ticket = Ticket.objects.create(
                merchant=merchant,
                customer=customer,
                reference=f"{ASK}{i}",
                subject=f"Where is my order ({i})",
            )
            thread_customer_message_add(
                ticket=ticket,
                channel=MessageChannel.EMAIL,
                body=ASK_OPENING,
                subject=ticket.subject,
                from_address=customer.email,
                to_address=f"support@{merchant.slug}.test",
                message_id=f"<ask-{i}@customer.test>",
            )
        tickets.append(ticket)
    return tickets


def customer_answer(ticket: Any) -> Any:
    """The customer's answer on the ticket's thread, stored as mail stores it; once committed
    it wakes the run waiting on it (``agent.customer.route``)."""
    from deskhand.domain.desk.models import MessageChannel
    from deskhand.domain.desk.thread import thread_customer_message_add

    return thread_customer_message_add(
        ticket=ticket,
        channel=MessageChannel.EMAIL,
        body=ANSWER,
        subject=f"Re: {ticket.subject}",
        from_address=ticket.customer.email,
        message_id=f"<answer-{ticket.reference.lower()}@customer.test>",
    )


def owners() -> dict[int, Any]:
    """Each merchant's owner (who decides in the load tests and chaos), by merchant id."""
    from deskhand.domain.desk.models import Membership

    return {
        m.merchant_id: m.user
        for m in Membership.objects.filter(role="owner").select_related("user")
    }
