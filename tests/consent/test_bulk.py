"""Several approvals decided at once: each its own decision, audit event and resumed run."""

from __future__ import annotations

import pytest

from agent.providers.scripted import say
from approvals.models import Approval, AuditEvent
from deskhand.domain.desk.models import Refund
from tests.consent.conftest import refund
from tests.durability.helpers import assert_every_effect_was_approved, user
from tests.fixtures.dbos import wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)


def test_bulk_approve_of_three_is_three_decisions_three_audit_events_and_three_resumed_runs(
    dbos_executor, scripted
):
    from agent.run.services import run_create, run_enqueue
    from approvals.services import approvals_decide_many
    from deskhand.domain.desk.models import Ticket
    from tests.fixtures.dbos import wait_parked

    runs = []
    for ticket, order, cents in (
        ("NW-1", "NW-1042", 900),
        ("NW-2", "NW-1077", 800),
        ("NW-4", "NW-1101", 700),
    ):
        run = run_create(
            ticket=Ticket.objects.get(reference=ticket),
            user=user("owner@northwind.test"),
            channel="cli",
        )
        scripted([[refund(cents, order)], [say("Refunded.")]], run_id=str(run.id))
        runs.append(run_enqueue(run))
    pending = [Approval.objects.get(run=wait_parked(str(r.id))) for r in runs]

    outcome = approvals_decide_many(
        approvals=pending, user=user("agent@northwind.test"), approve=True, channel="web"
    )

    assert [why for _, why in outcome] == ["", "", ""]
    events = AuditEvent.objects.filter(
        action="approval.approve", actor__email="agent@northwind.test"
    )
    assert sorted(e.detail["approval"] for e in events) == sorted(str(a.id) for a in pending)
    assert sorted(e.detail["args_hash"] for e in events) == sorted(a.args_hash for a in pending)
    for run, cents in zip(runs, (900, 800, 700), strict=True):
        done = wait_terminal(str(run.id))
        assert done.status == "succeeded", done.summary
        assert [r.amount_cents for r in Refund.objects.filter(run=done)] == [cents]
    assert_every_effect_was_approved()
