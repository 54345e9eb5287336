"""Escalation: an approval pending past the merchant's SLA escalates once, visibly.

The sweep's clock is an argument, so these tests move it by hours in
milliseconds; DBOS's own timers could not be moved.
"""

from __future__ import annotations

import datetime as dt
import json
from io import StringIO

import pytest
from dbos import DBOS
from django.core.management import call_command

from agent.consent.gate import gate_request
from agent.models import Step
from approvals.escalation import approvals_escalate_due, priority_above
from approvals.models import Approval, AuditEvent
from approvals.services import approval_decide
from deskhand.domain.desk.models import Merchant, Ticket
from deskhand.engine.schedules import ESCALATION_CRON
from deskhand.infra.dbos.names import ESCALATION_SCHEDULE
from tests.consent.conftest import bare_run, gate_call
from tests.durability.helpers import decide, pending_approval, start, user
from tests.fixtures.dbos import clear_of_its_firing, trigger_now, wait_parked, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)


class ManualClock:
    def __init__(self, start: dt.datetime) -> None:
        self.now = start

    def advance(self, **delta: float) -> dt.datetime:
        self.now += dt.timedelta(**delta)
        return self.now


def _approvals_cli(*args: str) -> list[dict]:
    out = StringIO()
    call_command("approvals", "--json", *args, stdout=out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_pending_approval_escalates_once_after_four_simulated_hours(dbos_executor):
    run = start("NW-1", "owner@northwind.test")
    wait_parked(str(run.id))
    approval = pending_approval(run)
    ticket = Ticket.objects.get(pk=run.ticket_id)
    before = ticket.priority
    clock = ManualClock(approval.requested_at)

    assert approvals_escalate_due(now=clock.advance(hours=3, minutes=59, seconds=59)) == []
    escalated = approvals_escalate_due(now=clock.advance(seconds=1))  # 4 h exactly
    assert [a.pk for a in escalated] == [approval.pk]
    for later in ({"minutes": 1}, {"hours": 1}, {"hours": 15}):  # later sweeps: nothing more
        assert approvals_escalate_due(now=clock.advance(**later)) == []

    approval.refresh_from_db()
    ticket.refresh_from_db()
    assert approval.escalated_at == approval.requested_at + dt.timedelta(hours=4)
    assert ticket.priority == priority_above(before) != before
    events = AuditEvent.objects.filter(action="approval.escalated")
    assert events.count() == 1
    event = events.get()
    assert (event.actor, event.channel, event.run_id) == (None, "system", run.id)
    assert event.detail["priority"] == {"from": before, "to": ticket.priority}
    assert event.detail["pending_seconds"] == 4 * 3600
    # Visible wherever approvals are listed...
    [row] = _approvals_cli("--pending")
    assert (row["id"], row["escalated"]) == (str(approval.pk), True)
    text = StringIO()
    call_command("approvals", "--pending", stdout=text)
    assert "ESCALATED" in text.getvalue()
    # ...and in the run's step log when it resumes; the decision still works as before.
    decide(run, "owner@northwind.test")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary
    resumed = Step.objects.get(
        run=run, kind="approval", tool="issue_refund", result__event="approved"
    )
    assert resumed.result["escalated_at"] == approval.escalated_at.isoformat()


def test_escalation_follows_each_merchants_sla_and_never_touches_decided_or_expired_approvals(
    tseeded,
):
    Merchant.objects.filter(slug="lumen").update(approval_sla_seconds=3600)
    nw = Approval.objects.get(pk=gate_request(str(bare_run().id), 1, gate_call(3800)).approval_id)
    lu_run = bare_run("LU-2", "owner@lumen.test")
    lu = Approval.objects.get(
        pk=gate_request(str(lu_run.id), 1, gate_call(17900, "toolu_lu", "LU-2311")).approval_id
    )
    decided = Approval.objects.get(
        pk=gate_request(str(bare_run("NW-3").id), 1, gate_call(100, "t_d", "NW-0918")).approval_id
    )
    approval_decide(approval=decided, user=user("agent@northwind.test"), approve=False, reason="no")
    stale = Approval.objects.get(
        pk=gate_request(str(bare_run("NW-2").id), 1, gate_call(100, "t_e", "NW-1077")).approval_id
    )
    Approval.objects.filter(pk=stale.pk).update(
        expires_at=stale.requested_at + dt.timedelta(hours=2)
    )
    start_at = max(a.requested_at for a in (nw, lu, decided, stale))

    assert [a.pk for a in approvals_escalate_due(now=start_at + dt.timedelta(hours=1))] == [lu.pk]
    assert [a.pk for a in approvals_escalate_due(now=start_at + dt.timedelta(hours=4))] == [nw.pk]
    assert approvals_escalate_due(now=start_at + dt.timedelta(hours=23)) == []
    assert not Approval.objects.filter(
        pk__in=[decided.pk, stale.pk], escalated_at__isnull=False
    ).exists()
    assert AuditEvent.objects.filter(action="approval.escalated").count() == 2


def test_the_worker_sweeps_on_a_dbos_schedule(dbos_executor):
    schedule = DBOS.get_schedule(ESCALATION_SCHEDULE)
    assert (
        schedule is not None
        and schedule["schedule"] == ESCALATION_CRON
        and schedule["status"] == "ACTIVE"
    )
    assert schedule["workflow_name"] == "approvals.escalation_sweep"

    clear_of_its_firing(ESCALATION_SCHEDULE)  # or the minute sweep may escalate it before we do
    run = bare_run()
    approval = Approval.objects.get(pk=gate_request(str(run.id), 1, gate_call(3800)).approval_id)
    Approval.objects.filter(pk=approval.pk).update(
        requested_at=approval.requested_at - dt.timedelta(hours=5)
    )

    first = trigger_now(ESCALATION_SCHEDULE)
    second = trigger_now(ESCALATION_SCHEDULE)
    assert (first, second) == ([str(approval.pk)], [])
    approval.refresh_from_db()
    assert approval.escalated_at is not None
    assert AuditEvent.objects.filter(action="approval.escalated", run=run).count() == 1
