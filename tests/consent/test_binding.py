"""An approval binds to the exact call a person saw: 38.00 approved never pays 48.00.

The attacks here need no hostile actor, only durable execution: a rewritten
checkpoint, a forked or re-derived trajectory, a message delivered to the
wrong wait. Each is refused by the decision row, the hash, or the ledger.
"""

from __future__ import annotations

import pytest
from django.db import connection

from agent.consent.gate import gate_request, gate_resume
from agent.ledger.effect import execute_irreversible
from agent.models import Run, Step
from agent.models.ledger import LedgerEntry
from agent.replay.fork import fork_run
from approvals.models import Approval, ApprovalStatus
from approvals.services import approval_decide
from deskhand.domain.desk.models import Refund
from tests.consent.conftest import bare_run, gate_call, refund, settle
from tests.durability.helpers import (
    assert_every_effect_was_approved,
    decide,
    pending_approval,
    start,
    user,
)
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.support.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.crash
def test_approving_38_never_pays_48_when_the_checkpoint_is_rewritten_and_the_worker_killed(
    worker_process,
):
    worker = worker_process("consent-rewrite").start()
    run = start("NW-1", "owner@northwind.test")
    wait_parked(str(run.id))
    approval = pending_approval(run)
    assert approval.arguments["amount_cents"] == 3800
    assert approval.preview.startswith("Refund 38.00 USD against order NW-1042")

    worker.kill()  # before it resumes: the decision lands while no worker runs
    decide(run, "owner@northwind.test")
    # Rewrite the model's checkpointed request, and the step log's copy of it, to 48.00.
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE dbos.operation_outputs"
            " SET output = regexp_replace(output, '\"amount_cents\":\\s*3800', '\"amount_cents\":4800')"
            " WHERE workflow_uuid = %s AND function_name = 'model' AND output LIKE '%%\"issue_refund\"%%'",
            [str(run.id)],
        )
        assert cur.rowcount == 1
        cur.execute(
            "UPDATE agent_step"
            " SET result = regexp_replace(result::text, '\"amount_cents\":\\s*3800', '\"amount_cents\": 4800')::jsonb"
            " WHERE run_id = %s AND kind = 'model' AND result::text LIKE '%%\"issue_refund\"%%'",
            [str(run.id)],
        )
        assert cur.rowcount == 1

    worker.start()
    run = wait_terminal(str(run.id))

    assert (run.status, run.stop_reason) == ("failed", "approval_mismatch"), run.summary
    assert Refund.objects.count() == 0
    assert LedgerEntry.objects.count() == 0
    refusal = Step.objects.get(run=run, kind="approval", result__event="mismatch")
    assert refusal.ok is False
    assert "amount_cents approved 3800, now 4800" in refusal.result["detail"]
    assert refusal.result["approved_hash"] == approval.args_hash != refusal.result["call_hash"]
    assert "Refunded" not in run.summary
    assert "amount_cents approved 3800, now 4800" in run.summary  # the refusal says what differed


def _fork_from_the_refund_request(run: Run) -> Run:
    """Fork ``run`` from the model step that asked for the refund: the model is asked again."""
    asked = Step.objects.get(run=run, kind="model", result__content__0__name="issue_refund")
    return fork_run(run=run, seq=asked.seq, user=user("owner@northwind.test"))


def test_a_fork_rederiving_a_different_amount_asks_again_and_the_same_amount_executes_once(
    dbos_executor, scripted
):
    scripted([[refund(3800)], [{"type": "text", "text": "Refunded the coffee."}]])
    original = settle(start("NW-1", "owner@northwind.test"))
    decide(original, "owner@northwind.test")
    original = wait_terminal(str(original.id))
    assert original.status == "succeeded"
    assert Refund.objects.get().amount_cents == 3800

    # Re-derived from the model call onwards, the trajectory now asks 48.00 under the same call
    # id: more than the 10.00 left on the order across the lineage, so the refund pre-check
    # refuses it before anyone is asked, and the model reads why.
    scripted([[refund(4800)], [{"type": "text", "text": "done"}]])
    greedy = wait_terminal(str(_fork_from_the_refund_request(original).id))
    assert (greedy.status, greedy.stop_reason) == ("succeeded", "end_turn"), greedy.summary
    assert greedy.approvals.count() == 0
    refused = greedy.step_log.get(kind="tool", tool="issue_refund")
    assert not refused.ok and "10.00 USD" in refused.payload.text
    assert Refund.objects.count() == 1

    # The same amount on retry: the ledger answers with the recorded result; nothing is paid again.
    scripted([[refund(3800)], [{"type": "text", "text": "done"}]])
    honest = wait_terminal(str(_fork_from_the_refund_request(original).id))
    assert honest.status == "succeeded", honest.summary
    assert honest.approvals.count() == 0
    assert Refund.objects.count() == 1
    assert not LedgerEntry.objects.filter(run=honest).exists()
    # The fork moved no money, and says so; it names the refund it inherited.
    assert f"- Refunded 38.00 USD against NW-1042. (run {original.id})" in honest.summary
    assert "New in this run:\nNo money moved" in honest.summary
    assert_every_effect_was_approved()


def test_a_rederived_call_under_an_earlier_approval_is_refused_and_the_approved_call_runs_once(
    tseeded,
):
    """The gate's steps, driven directly: the same call id re-derived with other arguments."""
    run = bare_run()
    run_id = str(run.id)
    asked = gate_request(run_id, 1, gate_call(3800))
    approval = Approval.objects.get(pk=asked.approval_id)
    approval_decide(approval=approval, user=user("owner@northwind.test"), approve=True)

    # A recovery re-derives the call with 48.00: the gate finds the same approval, never a fresh one...
    again = gate_request(run_id, 2, gate_call(4800))
    assert again.approval_id == asked.approval_id
    assert "amount_cents approved 3800, now 4800" in again.mismatch
    assert Approval.objects.filter(run=run).count() == 1
    # ...and resuming under it refuses, naming the difference.
    verdict = gate_resume(run_id, 3, gate_call(4800), asked.approval_id, 1.0)
    assert verdict.verdict == "mismatch"
    assert "amount_cents approved 3800, now 4800" in verdict.detail
    # Even a caller that skipped the verdict cannot execute it: the effect re-checks the row.
    out = execute_irreversible(run_id, 4, gate_call(4800), asked.approval_id)
    assert (out.stop, out.detail) == (
        "approval_mismatch",
        "the approval on record does not cover this exact call",
    )
    assert Refund.objects.count() == 0

    # The call that was approved executes, once, however many times it is retried.
    assert gate_resume(run_id, 5, gate_call(3800), asked.approval_id, 1.0).verdict == "approved"
    first = execute_irreversible(run_id, 6, gate_call(3800), asked.approval_id)
    second = execute_irreversible(run_id, 6, gate_call(3800), asked.approval_id)
    assert first.ok and not first.replayed and second.replayed
    assert Refund.objects.get().amount_cents == 3800
    # An approval for one call never covers another call, even with identical arguments.
    other = execute_irreversible(
        run_id, 7, gate_call(3800, call_id="toolu_other"), asked.approval_id
    )
    assert other.stop == "approval_mismatch"
    assert Refund.objects.count() == 1


def test_a_request_step_re_executed_with_rewritten_arguments_is_refused_without_overwriting_its_row(
    tseeded,
):
    """A crash between ``gate.request``'s commit and its checkpoint, and a rewritten model
    checkpoint: the step runs again at the same ``seq`` with other arguments. It answers with
    the mismatch; the row that says what the person was asked stays as it was."""
    run = bare_run()
    run_id = str(run.id)
    asked = gate_request(run_id, 1, gate_call(3800))
    row = Step.objects.get(run=run, seq=1)

    again = gate_request(run_id, 1, gate_call(4800))

    assert again.approval_id == asked.approval_id
    assert "amount_cents approved 3800, now 4800" in again.mismatch
    kept = Step.objects.get(run=run, seq=1)
    assert (kept.arguments, kept.args_hash, kept.attempts) == (
        row.arguments,
        row.args_hash,
        row.attempts,
    )
    assert kept.arguments["amount_cents"] == 3800
    assert Step.objects.filter(run=run).count() == 1
    assert Approval.objects.get(pk=asked.approval_id).arguments["amount_cents"] == 3800


def _gate_reads(run: Run) -> int:
    """How often the run read its approval's record: each ``gate.resume`` reads it first
    (Patch.TWO_STEP_GATE; older runs read it in ``gate.read`` steps)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid = %s"
            " AND function_name IN ('gate.read', 'gate.resume')",
            [str(run.id)],
        )
        return cur.fetchone()[0]


def _unconsumed(run: Run, topic: str) -> int:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM dbos.notifications WHERE destination_uuid = %s AND topic = %s AND NOT consumed",
            [str(run.id), topic],
        )
        return cur.fetchone()[0]


def test_a_decision_for_approval_a_cannot_resolve_b_and_a_bare_message_executes_nothing(
    dbos_executor,
):
    from deskhand.infra.dbos.client import client

    run = settle(start("LU-2", "owner@lumen.test"))  # LU-2: refund the duplicate, then email
    refund_approval = decide(run, "owner@lumen.test")
    run = settle(run)
    email_approval = pending_approval(run)
    assert email_approval.tool == "send_customer_email" and email_approval.pk != refund_approval.pk

    # A's decision, re-sent (a double click): same idempotency key, nothing new is delivered.
    from approvals.services import approval_send

    approval_send(refund_approval)
    # A's decision addressed to B's wait, and a bare "approved" with no decision row behind it.
    reads = _gate_reads(run)
    client().send(
        str(run.id),
        {"approval_id": str(refund_approval.id), "decision": "approved"},
        email_approval.topic,
    )
    client().send(str(run.id), {"decision": "approved"}, email_approval.topic)
    # The run woke and took both messages...
    until("the run to take both messages", lambda: _unconsumed(run, email_approval.topic) == 0)
    run = settle(run)
    assert _gate_reads(run) >= reads + 1  # ...re-read the record...
    email_approval.refresh_from_db()
    assert email_approval.status == ApprovalStatus.PENDING  # ...and kept waiting.
    assert run.status == "awaiting_approval"
    assert run.emails.count() == 0
    assert Refund.objects.filter(run=run).count() == 1

    decide(run, "owner@lumen.test", approve=True)
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary
    assert run.emails.count() == 1
    assert Refund.objects.filter(run=run).count() == 1
    assert_every_effect_was_approved()
