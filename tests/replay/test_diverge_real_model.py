"""``replay RUN_ID --diverge --provider anthropic`` against the strict Messages-API double.

The double mints a fresh ``tool_use`` id on every reply, as Claude does, so the replay
can lean on no call id; it decides like the policy reader, told otherwise by the
system prompt it is sent. Decisions are compared on tools and decisive arguments: a
refund's reworded reason is a soft difference, a refund turned into a note is the
first decision that differs. Nothing is written: every table, ``dbos`` included, keeps
its row count and checksum.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from agent.models import Run, Step
from agent.providers.base import ModelReply
from deskhand.domain.desk.models import Refund
from tests.durability.helpers import decide, start
from tests.fixtures.dbos import (
    ensure_in_process_executor,
    stop_in_process_executor,
    wait_parked,
    wait_terminal,
    workflow_settled,
)
from tests.replay.conftest import every_table, replay_cmd
from tests.replay.test_diverge import Cautious
from tests.support.fake_anthropic import policy_responder
from tests.support.messages_api import DEFAULT_KEY, MessagesApi

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "claude-sonnet-4-6"


class Rewording(Cautious):
    """Cautious, and under a prompt saying REWORD it gives the refund another reason."""

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        reply = super().complete(system=system, messages=messages, tools=tools)
        if "REWORD" not in system:
            return reply
        content = [
            {**b, "input": {**b["input"], "reason": "Beans arrived stale; refunding the goods."}}
            if b.get("type") == "tool_use" and b.get("name") == "issue_refund"
            else b
            for b in reply.content
        ]
        return self._reply(content)


@pytest.fixture
def api(settings) -> Iterator[MessagesApi]:
    from agent.providers.anthropic import clear_clients

    with MessagesApi(responder=policy_responder(Rewording())) as double:
        settings.ANTHROPIC_API_KEY = DEFAULT_KEY
        settings.ANTHROPIC_BASE_URL = double.url
        settings.ANTHROPIC_MODEL = MODEL
        yield double
    clear_clients()


def test_diverge_with_anthropic_reports_the_first_other_decision_and_writes_nothing(
    dbos_executor, api, tmp_path
):
    run = wait_parked(str(start("NW-1", "owner@northwind.test").id))
    decide(run, "owner@northwind.test")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded" and run.provider == "anthropic"
    assert [r.amount_cents for r in Refund.objects.all()] == [3800]
    refund_step = Step.objects.get(run=run, kind="model", result__content__0__name="issue_refund")
    turns = Step.objects.filter(run=run, kind="model").count()
    workflow_settled(str(run.id))
    # Nothing else may write while the tables are compared: the executor's schedules stop too.
    stop_in_process_executor()
    try:
        before = every_table()
        asked = len(api.requests)

        never = tmp_path / "never.txt"
        never.write_text("Fences are {opener} … {closer} (token {token}). NEVER REFUND.")
        code, out = replay_cmd(
            str(run.id), "--diverge", "--system-prompt", str(never), "--provider", "anthropic"
        )
        assert code == 1, out
        assert f"with anthropic/{MODEL}" in out
        assert f"diverged at step {refund_step.seq}: 3 of {turns} decisions matched first" in out
        assert 'originally: issue_refund({"amount_cents":3800,"order_reference":"NW-1042"})' in out
        assert 'now:        add_internal_note({"reference":"NW-1"})' in out
        assert "money:      $38.00 in refunds proposed originally, $0.00 now" in out
        assert len(api.requests) - asked == 4  # three that matched, the one that did not
        spent = int(out.split("tokens, ")[1].split(" micro-USD")[0])
        assert spent > 0  # a priced model: the replay's calls cost something, charged to no run

        # Only the refund's reason reworded: a soft difference, not a divergence.
        reword = tmp_path / "reword.txt"
        reword.write_text("REWORD. Fences are {opener} … {closer}.")
        code, out = replay_cmd(
            str(run.id), "--diverge", "--system-prompt", str(reword), "--provider", "anthropic"
        )
        assert code == 0, out
        assert (
            f"soft difference at step {refund_step.seq}: issue_refund decided the same, worded "
            "reason otherwise"
        ) in out
        assert f"no divergence — all {turns} decision(s) matched (1 with other wording)" in out

        code, out = replay_cmd(
            str(run.id),
            "--diverge",
            "--system-prompt",
            str(reword),
            "--provider",
            "anthropic",
            "--json",
        )
        found = json.loads(out)
        assert found["outcome"] == "soft" and found["diverged_at"] is None
        assert found["soft"] == [
            {"step": refund_step.seq, "tool": "issue_refund", "fields": ["reason"]}
        ]
        assert found["model_calls"] == turns and found["model_spend_micros"] > 0

        assert every_table() == before  # every row of every table, the dbos schema included
        assert Run.objects.count() == 1
    finally:
        ensure_in_process_executor()
