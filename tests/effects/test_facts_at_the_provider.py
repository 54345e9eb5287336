"""The facts check holds for a merchant that refunds at its payment provider too: a refund
approved on an order whose refunded total moved since is never sent, and the one a person
approves again is sent once, at most what is left.

A whole run through real DBOS (in process) against the payments double.
"""

from __future__ import annotations

import pytest

from agent.models.ledger import LedgerEntry
from approvals.models import Approval
from deskhand.domain.desk.models import Order, Refund
from tests.durability.helpers import decide, pending_approval, start
from tests.fixtures.dbos import wait_for_run, wait_parked, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "owner@northwind.test"


def test_a_refund_whose_order_moved_is_never_sent_and_the_new_one_is_sent_once(
    dbos_executor, northwind_pays_at_the_provider
):
    api = northwind_pays_at_the_provider
    run = wait_parked(str(start("NW-1", OWNER).id))
    first = pending_approval(run)
    assert first.arguments["amount_cents"] == 3800 and first.facts["remaining_cents"] == 4800
    order = Order.objects.get(reference="NW-1042")
    # Staff refund $20.00 outside Deskhand while the card waits (NW-1042 totals $48.00).
    Refund.objects.create(
        merchant=order.merchant, order=order, amount_cents=2000, currency="USD", reason="staff"
    )
    decide(run, OWNER)
    run = wait_for_run(
        str(run.id),
        lambda r: (
            r.status in ("succeeded", "failed", "exhausted", "cancelled")
            or r.approvals.filter(status="pending").exclude(pk=first.pk).exists()
        ),
        60.0,
    )

    # Nothing went to the provider on that approval: no claim, no request, no refund.
    assert api.refunds == [] and [r for r in api.requests if r.method == "POST"] == []
    assert not LedgerEntry.objects.filter(run=run).exists()
    again = Approval.objects.get(run=run, status="pending")
    assert again.arguments["amount_cents"] == 2800  # $38.00 no longer fits the $28.00 left
    assert again.facts["refunded_cents"] == 2000

    decide(run, OWNER)
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary
    [made] = api.refunds
    assert made["amount"] == 2800
    [entry] = LedgerEntry.objects.filter(run=run, tool="issue_refund")
    assert (entry.approval_id, entry.state, entry.provider_calls) == (again.pk, "done", 1)
