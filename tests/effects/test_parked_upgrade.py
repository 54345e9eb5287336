"""A run parked on the previous commit's code finishes through the payments adapter.

The pending-intent protocol changed what happens *inside* the irreversible step
(``tool.issue_refund`` is still one step, at the same place), so no ``rt.patch`` guards it:
this proves it. The recorded NW-1 run (tests/fixtures/parked/nw1_at_gate.json, parked at
its refund approval) is resurrected, Northwind is switched to the payments adapter while
it waits, and the approval sends the refund to the double under the ledger key.
"""

from __future__ import annotations

import pytest
from django.conf import settings

from agent.models.ledger import LedgerEntry
from approvals.models import Approval
from approvals.services import approval_decide
from deskhand.domain.desk.models import Merchant, Refund
from deskhand.engine.deploys import runs_move_version
from tests.durability.helpers import user
from tests.durability.test_upgrade import (  # noqa: F401  (fixtures)
    IN_PROCESS_EXECUTOR,
    _checkpoints,
    _wait_finished,
    executor_stopped,
    fixture,
)
from tests.fixtures.dbos import ensure_in_process_executor
from tests.support import parked_fixture
from tests.support.payments_api import charge_seeded_orders

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_run_parked_before_the_upgrade_refunds_at_the_provider_once(
    executor_stopped,  # noqa: F811
    fixture,  # noqa: F811
    payments,
):
    run_id = parked_fixture.load(parked_fixture.aged(fixture, 1), executor_id=IN_PROCESS_EXECUTOR)
    recorded = _checkpoints(run_id)
    Merchant.objects.filter(slug="northwind").update(refund_adapter="payments")
    charge_seeded_orders(payments)

    # The deploy as docs/deploys.md has it: the parked run moves to this release's version.
    if fixture["application_version"] != settings.DESKHAND_APP_VERSION:
        assert runs_move_version(from_version=fixture["application_version"]) == [run_id]
    ensure_in_process_executor()
    approval = Approval.objects.get(run_id=run_id, status="pending")
    approval_decide(approval=approval, user=user("owner@northwind.test"), approve=True)
    run = _wait_finished(run_id)

    assert (run.status, run.stop_reason) == ("succeeded", "end_turn"), run.summary
    [made] = payments.refunds
    entry = LedgerEntry.objects.get(run_id=run_id, tool="issue_refund")
    assert (entry.adapter, entry.state, entry.provider_ref) == ("payments", "done", made["id"])
    assert made["metadata"]["deskhand_ledger_key"] == entry.key and made["amount"] == 3800
    assert Refund.objects.get().provider_refund_id == made["id"]
    final = _checkpoints(run_id)
    assert all(final[fid] == cp for fid, cp in recorded.items())
