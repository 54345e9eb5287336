"""``replay RUN_ID --diverge``: re-ask the provider under another prompt; compare decisions; touch nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from agent.models import LedgerEntry, Run, Step
from agent.providers.base import ModelReply
from agent.providers.policy import PolicyProvider
from approvals.models import Approval, AuditEvent
from deskhand.desk.models import OutboundEmail, Refund, TicketMessage
from tests.durability.helpers import decide, start
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.replay.conftest import replay_cmd

pytestmark = pytest.mark.django_db(transaction=True)


class Cautious(PolicyProvider):
    """The policy reader, except that a system prompt saying NEVER REFUND turns refunds into notes."""

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        reply = super().complete(system=system, messages=messages, tools=tools)
        if "NEVER REFUND" not in system:
            return reply
        content = [
            {
                **b,
                "name": "add_internal_note",
                "input": {"reference": "NW-1", "body": "needs a person"},
            }
            if b.get("type") == "tool_use" and b.get("name") == "issue_refund"
            else b
            for b in reply.content
        ]
        return self._reply(content)


def world() -> dict[str, int]:
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM dbos.workflow_status")
        workflows = cur.fetchone()[0]
        cur.execute("SELECT count(*) FROM dbos.operation_outputs")
        checkpoints = cur.fetchone()[0]
    return {
        "runs": Run.objects.count(),
        "steps": Step.objects.count(),
        "refunds": Refund.objects.count(),
        "ledger": LedgerEntry.objects.count(),
        "approvals": Approval.objects.count(),
        "audit": AuditEvent.objects.count(),
        "emails": OutboundEmail.objects.count(),
        "ticket_messages": TicketMessage.objects.count(),
        "workflows": workflows,
        "checkpoints": checkpoints,
    }


def test_diverge_replays_a_denial_as_sent_and_reports_the_first_other_decision(
    dbos_executor, provide, tmp_path
):
    provide(Cautious())
    run = wait_parked(str(start("NW-1", "owner@northwind.test").id))
    decide(run, "owner@northwind.test", approve=False, reason="Photos first, please.")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded" and Refund.objects.count() == 0
    refund_step = Step.objects.get(run=run, kind="model", result__content__0__name="issue_refund")
    turns = Step.objects.filter(run=run, kind="model").count()
    before = world()

    # The same prompt: every decision matches, including the turn after the denial, which the
    # policy reader takes only if it sees is_error and the denial's own words.
    recording = provide(Cautious())
    code, out = replay_cmd(str(run.id), "--diverge")
    assert code == 0, out
    assert f"no divergence — all {turns} decision(s) matched" in out
    assert len(recording.seen) == turns

    # A prompt that forbids refunds: the refund turn decides otherwise, and the replay stops there.
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("Fences are {opener} … {closer} (token {token}). NEVER REFUND.")
    recording = provide(Cautious())
    code, out = replay_cmd(str(run.id), "--diverge", "--system-prompt", str(prompt))
    assert code == 1, out
    assert f"diverged at step {refund_step.seq}: 3 of {turns} decisions matched first" in out
    assert 'originally: issue_refund({"amount_cents":3800,"order_reference":"NW-1042"' in out
    assert 'now:        add_internal_note({"body":"needs a person","reference":"NW-1"})' in out
    assert "there is no recorded observation" in out
    assert len(recording.seen) == 4
    assert "{token}" not in recording.systems[0] and "<<untrusted:" in recording.systems[0]

    assert world() == before  # nothing executed, nothing written
