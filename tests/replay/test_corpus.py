"""``replay --corpus``: divergence over many recorded runs, as a table or one object, read-only."""

from __future__ import annotations

import copy
import io
import json
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agent.models import Run, Step
from agent.providers.base import ModelReply
from agent.replay import rebuild, timeline
from deskhand.domain.desk.models import Merchant
from tests.devtools.synthetic import synthetic_generate
from tests.replay.conftest import every_table

pytestmark = pytest.mark.django_db(transaction=True)


def corpus(*args: str) -> tuple[int, str, str]:
    """``replay --corpus ARGS`` in-process: (exit code, stdout or the error sentence, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("replay", "--corpus", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode or 1, str(exc), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


class Mirror:
    """Answers each recorded turn with what the run recorded, changed as the system prompt says.

    ``REWORD``: every refund reason and email body is reworded (a soft difference).
    ``HALF REFUNDS``: every refund asks for half the amount (a divergence, money moves).
    Runs are told apart by their opening prompt (made unique per run by the fixture).
    """

    name, model = "scripted", "mirror"

    def __init__(self, runs: list[Run]) -> None:
        self.turns: dict[tuple[str, int], list[dict[str, Any]]] = {}
        for run in runs:
            for k, turn in enumerate(rebuild.rebuild(timeline.load(run)).turns):
                self.turns[(run.prompt, k)] = turn.content
        self.calls = 0

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        self.calls += 1
        opening = messages[0]["content"][-1]["text"]
        k = sum(m["role"] == "assistant" for m in messages)
        content = copy.deepcopy(self.turns[(opening, k)])
        for block in content:
            args = block.get("input") or {}
            if block.get("type") != "tool_use":
                continue
            if "REWORD" in system:
                for field in ("reason", "body"):
                    if field in args:
                        args[field] = "In other words: " + args[field]
            if "HALF REFUNDS" in system and block.get("name") == "issue_refund":
                args["amount_cents"] //= 2
        stop = "tool_use" if any(b.get("type") == "tool_use" for b in content) else "end_turn"
        return ModelReply(
            content=content,
            stop_reason=stop,
            input_tokens=100,
            output_tokens=10,
            cost_micros=250,
            provider=self.name,
            model=self.model,
        )


@pytest.fixture
def fifty(tseeded) -> list[Run]:
    synthetic_generate(50, seed=7)
    runs = list(Run.objects.order_by("created_at"))
    for i, run in enumerate(runs):  # an opening prompt of its own, so Mirror can tell them apart
        Run.objects.filter(pk=run.pk).update(prompt=f"{run.prompt}\n(corpus test run {i})")
    return list(Run.objects.order_by("created_at"))


def proposed_refunds() -> list[int]:
    steps = Step.objects.filter(kind="model", result__content__contains=[{"name": "issue_refund"}])
    return [
        b["input"]["amount_cents"]
        for s in steps
        for b in s.result["content"]
        if b.get("name") == "issue_refund"
    ]


def test_corpus_over_fifty_runs_prints_the_table_and_changes_no_table(fifty, provide, tmp_path):
    refunds = proposed_refunds()
    assert refunds, "the synthetic seed must propose at least one refund"
    before = every_table()

    # Each run's own provider (the keyless policy reader): a table, progress on stderr.
    code, out, err = corpus("--limit", "50")
    assert code == 0, out
    assert "corpus: 50 finished run(s)" in out and "nothing is executed or written" in out
    assert "runs replayed" in out and "model spend" in out and "money moved differently" in out
    assert "50/50 runs" in err

    # The same decisions, reworded: soft, not diverged.
    mirror = Mirror(fifty)
    provide(mirror)
    prompt = tmp_path / "reword.txt"
    prompt.write_text("REWORD {token}")
    code, out, _ = corpus("--system-prompt", str(prompt), "--json")
    assert code == 0, out
    report = json.loads(out)
    reworded = sum(
        1
        for s in Step.objects.filter(kind="model")
        if any(
            b.get("name") in ("issue_refund", "send_customer_email") for b in s.result["content"]
        )
    )
    assert report["selected"] == report["runs"] == 50
    assert report["diverged"] == 0 and report["soft"] == reworded > 0
    assert report["same"] == 50 - reworded
    assert report["money_moved_differently_cents"] == 0
    assert report["model_spend_micros"] == 250 * mirror.calls
    assert len(report["results"]) == 50

    # Half the refund: diverged at the refund, and the money is the other half.
    prompt.write_text("HALF REFUNDS {token}")
    code, out, _ = corpus("--system-prompt", str(prompt))
    assert code == 0, out
    moved = sum(a - a // 2 for a in refunds)
    assert f"money moved differently    {'$' + f'{moved // 100}.{moved % 100:02d}':>12}" in out
    assert f"  issue_refund             {len(refunds):>12}" in out
    code, out, _ = corpus("--system-prompt", str(prompt), "--json")
    report = json.loads(out)
    assert report["diverged"] == len(refunds) and report["soft"] == 0
    assert report["first_divergence_by_tool"] == {"issue_refund": len(refunds)}
    assert report["money_moved_differently_cents"] == moved

    assert every_table() == before  # read-only: every row of every table, dbos included


def test_corpus_selects_by_merchant_and_age_and_stops_at_its_spend_limit(fifty, provide):
    northwind = Merchant.objects.get(slug="northwind")
    code, out, _ = corpus("--merchant", "northwind", "--json")
    assert json.loads(out)["selected"] == Run.objects.filter(merchant=northwind).count() > 0
    # Synthetic history ends two days ago.
    code, out, _ = corpus("--since", "1", "--json")
    assert code == 0 and json.loads(out)["selected"] == 0
    code, out, _ = corpus("--limit", "7", "--json")
    assert json.loads(out)["selected"] == 7

    mirror = Mirror(fifty)
    provide(mirror)
    code, out, _ = corpus("--max-spend-usd", "0.001")  # 250 micro-dollars a call: 4 calls
    assert code == 0, out
    assert mirror.calls == 4
    assert "stopped: the spend limit of $0.001000 was reached after" in out
    code, out, _ = corpus("--max-spend-usd", "0.001", "--json")
    report = json.loads(out)
    assert report["stopped_at_spend_limit"] is True
    assert report["model_spend_micros"] == 1000
    assert report["not_reached"] > 0


def test_a_corpus_against_anthropic_stops_at_its_spend_limit_and_says_so(tseeded, settings):
    from agent.providers.anthropic import clear_clients
    from agent.providers.policy import PolicyProvider
    from tests.support.fake_anthropic import policy_responder
    from tests.support.messages_api import DEFAULT_KEY, MessagesApi

    synthetic_generate(5, seed=3)
    with MessagesApi(responder=policy_responder(PolicyProvider())) as api:
        settings.ANTHROPIC_API_KEY = DEFAULT_KEY
        settings.ANTHROPIC_BASE_URL = api.url
        code, out, _ = corpus("--provider", "anthropic", "--model", "claude-haiku-4-5")
        assert code != 0 and "needs --max-spend-usd" in out
        code, out, _ = corpus(
            "--provider", "anthropic", "--model", "claude-haiku-4-5", "--max-spend-usd", "0.000001"
        )
        assert code == 0, out
        assert "replayed with anthropic/claude-haiku-4-5" in out
        assert "stopped: the spend limit of $0.000001 was reached after 1 of 5 runs" in out
        assert len([r for r in api.requests if r.path == "/v1/messages"]) == 1
    clear_clients()
