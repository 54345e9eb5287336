"""Bad input from the model becomes an error result it can read; the run goes on; nothing is half-written."""

from __future__ import annotations

import pytest

from agent.models import Step
from agent.providers import clear_overrides, install_override
from agent.providers.scripted import ScriptedProvider, call, say
from deskhand.domain.desk.models import Order, Refund
from tests.durability.helpers import decide, start
from tests.fixtures.dbos import wait_for_run, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def scripted():
    yield lambda turns: install_override("*", ScriptedProvider(turns))
    clear_overrides()


def settle(run):
    return wait_for_run(
        str(run.id),
        lambda r: (
            r.status in ("succeeded", "failed", "exhausted")
            or (r.status == "awaiting_approval" and r.approvals.filter(status="pending").exists())
        ),
    )


def test_invalid_arguments_and_unknown_tools_are_results_the_model_sees(dbos_executor, scripted):
    scripted(
        [
            [call("issue_refund", order_reference="NW-1042", reason="missing amount")],
            [call("teleport_parcel", reference="NW-1")],
            [call("list_refunds", since_days=9999)],
            [say("done")],
        ]
    )
    run = wait_terminal(str(start("NW-1", "owner@northwind.test").id))
    assert run.status == "succeeded"
    steps = list(Step.objects.filter(run=run, kind="tool").order_by("seq"))
    assert [(s.tool, s.ok) for s in steps] == [
        ("issue_refund", False),
        ("teleport_parcel", False),
        ("list_refunds", False),
    ]
    assert "invalid arguments for issue_refund" in steps[0].result["text"]
    assert "no such tool" in steps[1].result["text"]
    assert run.approvals.count() == 0  # an invalid irreversible call never reaches a person
    assert Refund.objects.count() == 0


def test_a_refund_above_the_remainder_is_refused_before_anyone_is_asked_and_the_run_continues(
    dbos_executor, scripted
):
    scripted(
        [
            [
                call(
                    "issue_refund",
                    order_reference="NW-1042",
                    amount_cents=99_999,
                    reason="too much",
                )
            ],
            [say("done")],
        ]
    )
    run = settle(start("NW-1", "owner@northwind.test"))
    assert run.status == "succeeded"  # the pre-check answered: nobody was asked
    assert not run.approvals.exists()
    step = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert step.ok is False and "cannot refund" in step.result["text"]
    assert "left to refund" in step.result["text"]
    assert Refund.objects.count() == 0


def test_cancelling_a_shipped_order_is_refused_and_the_order_is_untouched(dbos_executor, scripted):
    scripted(
        [[call("cancel_order", order_reference="NW-1077", reason="customer asked")], [say("done")]]
    )
    run = settle(start("NW-2", "owner@northwind.test"))
    decide(run, "owner@northwind.test")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded"
    step = Step.objects.get(run=run, kind="tool", tool="cancel_order")
    assert step.ok is False and "shipped" in step.result["text"]
    order = Order.objects.get(reference="NW-1077")
    assert (
        order.status == "shipped"
        and order.cancelled_at is None
        and order.cancel_ledger_entry is None
    )
