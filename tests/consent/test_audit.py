"""Every human act — start, steer, decide, cancel — is audited: who, when, through which channel."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import IntegrityError, transaction

from agent.models import Run
from approvals.models import AuditEvent
from approvals.selectors import run_audit
from tests.consent.conftest import settle
from tests.durability.helpers import pending_approval, user

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_human_action_on_a_run_is_audited_with_who_when_and_channel(dbos_executor):
    call_command("run_ticket", "LU-2", "--as", "agent@lumen.test", "--wait", "--timeout", "60")
    run = settle(Run.objects.get(ticket__reference="LU-2"))
    call_command("steer", str(run.id), "Keep the email short.", "--as", "agent@lumen.test")
    refund = pending_approval(run)
    call_command(
        "decide", str(refund.pk), "approve", "--as", "owner@lumen.test", "--reason", "duplicate"
    )
    run = settle(run)
    email = pending_approval(run)
    call_command("cancel", str(run.id), "--as", "owner@lumen.test")

    events = run_audit(run_id=run.id)
    assert [(e.action, e.actor.email if e.actor else None, e.channel) for e in events] == [
        ("run.start", "agent@lumen.test", "cli"),
        ("run.steer", "agent@lumen.test", "cli"),
        ("approval.approve", "owner@lumen.test", "cli"),
        ("run.cancel", "owner@lumen.test", "cli"),
        ("approval.withdrawn", "owner@lumen.test", "cli"),
    ]
    assert all(e.merchant.slug == "lumen" for e in events)
    assert [e.created_at for e in events] == sorted(e.created_at for e in events)
    assert events[2].detail["approval"] == str(refund.pk)
    assert events[2].detail["args_hash"] == refund.args_hash
    assert events[2].detail["reason"] == "duplicate"
    run.refresh_from_db()
    email.refresh_from_db()
    assert run.status == "cancelled" and email.status == "withdrawn"
    assert (email.decided_by.email, email.channel) == ("owner@lumen.test", "cli")
    assert events[3].detail["withdrawn"] == [str(email.pk)]
    assert events[4].detail["approval"] == str(email.pk)


def test_the_audit_trail_is_append_only(tseeded):
    from tests.consent.conftest import bare_run

    run = bare_run()
    event = AuditEvent.objects.get(run=run, action="run.start")
    event.action = "run.cancel"
    with pytest.raises(ValueError, match="append-only"):
        event.save()
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(action="run.cancel")
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=event.pk).update(actor=user("agent@northwind.test"))
    # The person who acted may leave and their account be deleted: the record still names them.
    owner = user("owner@northwind.test")
    owner_id = owner.pk
    owner.delete()
    event.refresh_from_db()
    assert (event.action, event.actor_id, event.actor_ref, event.actor_name) == (
        "run.start",
        None,
        owner_id,
        "owner@northwind.test",
    )
