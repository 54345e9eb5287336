"""Withdrawn is a decision-like final state the database guards, and notes are delivered once."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from agent.ops.reconciler import reconcile
from agent.run.steering import run_steer
from approvals.models import Approval, StaffNote
from deskhand.infra.dbos import client as dbos_client
from tests.consent.conftest import bare_run
from tests.durability.helpers import user

pytestmark = pytest.mark.django_db(transaction=True)


def _pending(run) -> Approval:
    now = timezone.now()
    return Approval.objects.create(
        merchant_id=run.merchant_id,
        run=run,
        tool_call_id="toolu_w",
        tool="issue_refund",
        arguments={"order_reference": "NW-1042", "amount_cents": 100, "reason": "r"},
        args_hash="b" * 64,
        preview="Refund 1.00 USD against order NW-1042",
        requested_at=now,
        expires_at=now + dt.timedelta(hours=1),
    )


def test_the_trigger_allows_pending_to_withdrawn_and_nothing_after_it(tseeded):
    run = bare_run()
    approval = _pending(run)
    with (
        pytest.raises(
            IntegrityError, match="pending may become approved, denied, expired or withdrawn"
        ),
        transaction.atomic(),
    ):
        Approval.objects.filter(pk=approval.pk).update(status="bogus")
    Approval.objects.filter(pk=approval.pk).update(
        status="withdrawn", decided_at=timezone.now(), decided_by=user("owner@northwind.test")
    )
    for change in ({"status": "approved"}, {"status": "pending"}, {"decided_at": timezone.now()}):
        with pytest.raises(IntegrityError, match="is already withdrawn"), transaction.atomic():
            Approval.objects.filter(pk=approval.pk).update(**change)
    assert Approval.objects.get(pk=approval.pk).status == "withdrawn"


class _Sends:
    def __init__(self, fail: bool) -> None:
        self.fail, self.sent = fail, []

    def __call__(self, *, run_id: str, note_id: int) -> None:
        if self.fail:
            raise ConnectionError("system database unreachable")
        self.sent.append(note_id)


def test_a_note_is_marked_delivered_and_the_reconciler_resends_only_undelivered_ones(
    tseeded, monkeypatch
):
    run = bare_run()
    sends = _Sends(fail=False)
    monkeypatch.setattr(dbos_client, "send_note", sends)
    delivered = run_steer(run=run, user=user("agent@northwind.test"), body="first")
    assert delivered.delivered_at is not None and sends.sent == [delivered.pk]

    sends.fail = True
    lost = run_steer(run=run, user=user("agent@northwind.test"), body="second")
    assert lost.delivered_at is None
    monkeypatch.setattr(
        dbos_client, "workflow_states", lambda ids: {}
    )  # bare runs have no workflow; a queued one is not lost within the grace
    sends.fail = False
    # Within the grace period (by the clock given), nothing is re-sent.
    assert reconcile(now=timezone.now())["notes_resent"] == 0
    later = timezone.now() + dt.timedelta(seconds=3)
    assert reconcile(now=later)["notes_resent"] == 1
    assert sends.sent == [delivered.pk, lost.pk]  # the delivered note was not sent again
    assert StaffNote.objects.get(pk=lost.pk).delivered_at is not None
    assert reconcile(now=later + dt.timedelta(seconds=5))["notes_resent"] == 0
    assert sends.sent == [delivered.pk, lost.pk]
