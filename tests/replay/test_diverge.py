"""``replay RUN_ID --diverge``: re-ask the provider under another prompt; compare decisions; touch nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from agent.models import Run, Step
from agent.models.ledger import LedgerEntry
from agent.providers.base import ModelReply
from agent.providers.policy import PolicyProvider
from approvals.models import Approval, AuditEvent
from deskhand.domain.desk.models import OutboundEmail, Refund, TicketMessage
from tests.durability.helpers import decide, start
from tests.fixtures.dbos import wait_parked, wait_terminal, workflow_settled
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
    # Runs' workflows only: the worker's schedules (escalation, reconciliation) fire on their
    # own clock and may checkpoint during the replay; they are not what replay must not touch.
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM dbos.workflow_status WHERE name = 'deskhand.run'")
        workflows = cur.fetchone()[0]
        cur.execute(
            "SELECT count(*) FROM dbos.operation_outputs o JOIN dbos.workflow_status s"
            " USING (workflow_uuid) WHERE s.name = 'deskhand.run'"
        )
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
    # The run row is terminal a moment before DBOS checkpoints the last step: count after both.
    workflow_settled(str(run.id))
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
    # Decisions are compared on decisive arguments: the refund's reason and the note's body are
    # wording (agent.tools registry), so they are not part of what differs.
    assert 'originally: issue_refund({"amount_cents":3800,"order_reference":"NW-1042"})' in out
    assert 'now:        add_internal_note({"reference":"NW-1"})' in out
    assert "money:      $38.00 in refunds proposed originally, $0.00 now" in out
    assert "there is no recorded observation" in out
    assert len(recording.seen) == 4
    assert "{token}" not in recording.systems[0] and "<<untrusted:" in recording.systems[0]

    # A replay provider answering like a hostile model: a text block that is not text, a call
    # with no id, a NUL. Made safe as a live run would make it; reported, not a crash.
    class Hostile(Cautious):
        def complete(self, **kwargs: Any) -> ModelReply:
            return self._reply(
                [
                    {"type": "text", "text": 5},
                    {"type": "text", "text": "Nothing\x00 to refund."},
                    {"type": "tool_use", "name": "get_ticket", "input": {"reference": "NW-1"}},
                ]
            )

    provide(Hostile())
    code, out = replay_cmd(str(run.id), "--diverge")
    assert code == 1, out
    assert "diverged at step" in out and "Traceback" not in out and "TypeError" not in out
    assert 'now:        get_ticket({"reference":"NW-1"})' in out

    assert world() == before  # nothing executed, nothing written
