"""The loop and the workflow against the strict Messages-API double, one behaviour at a time.

Each run goes through the real ``anthropic`` SDK and ``AnthropicProvider`` to the double;
replies are scripted (the default responder ends the turn with "Done."), and the provider's
retry sleeps are tiny (``ANTHROPIC_RETRY``), so these stay fast.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection

from agent.conversation.live import CUT_OFF, FINISH_BRIEFLY
from agent.models import Run, Step
from agent.providers.anthropic import clear_clients, with_newest_breakpoint
from agent.providers.pricing import cost_micros
from agent.replay import rebuild, timeline
from agent.run.services import RunRefused, run_create
from agent.tools.registry import canonical_json
from approvals.models import Approval, AuditEvent
from deskhand.domain.desk.models import Order, Refund, Ticket
from tests.durability.helpers import assert_accounting_matches, start, user
from tests.fixtures.dbos import wait_for_run, wait_terminal
from tests.support.messages_api import DEFAULT_KEY, MessagesApi, text, tool_use

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "claude-sonnet-4-6"
ATTEMPTS = 4


@pytest.fixture
def api(settings) -> Iterator[MessagesApi]:
    with MessagesApi() as double:
        settings.ANTHROPIC_API_KEY = DEFAULT_KEY
        settings.ANTHROPIC_BASE_URL = double.url
        settings.ANTHROPIC_MODEL = MODEL
        settings.ANTHROPIC_RETRY = {
            "max_attempts": ATTEMPTS,
            "base_delay": 0.01,
            "max_delay": 0.02,
            "budget_seconds": 1.0,
        }
        yield double
    clear_clients()


def run_nw1() -> Run:
    return wait_terminal(str(start("NW-1", "owner@northwind.test").id))


def wait_for_approval(run: Run) -> Approval:
    wait_for_run(str(run.id), lambda r: r.approvals.filter(status="pending").exists())
    return Approval.objects.get(run=run, status="pending")


def results_sent(api: MessagesApi, n: int) -> list[dict]:
    """The tool_result blocks of request ``n``'s last user turn."""
    last = api.bodies()[n]["messages"][-1]
    assert last["role"] == "user"
    return [b for b in last["content"] if b["type"] == "tool_result"]


def result_text(block: dict) -> str:
    content = block["content"]
    return content if isinstance(content, str) else " ".join(c["text"] for c in content)


# --- one retry layer -----------------------------------------------------------------


def test_a_400_is_sent_once_and_fails_the_run_with_its_cause(dbos_executor, api) -> None:
    api.error(400, "invalid_request_error", "messages.0: something the API refuses")
    run = run_nw1()
    assert api.count == 1
    assert (run.status, run.stop_reason) == ("failed", "provider_error")
    assert "invalid_request_error" in run.stop_detail and "HTTP 400" in run.stop_detail
    assert "something the API refuses" in run.stop_detail
    assert DEFAULT_KEY not in run.stop_detail and DEFAULT_KEY not in run.summary
    assert_accounting_matches(run)


def test_overloaded_twice_then_a_reply_is_three_calls_paid_once(dbos_executor, api) -> None:
    api.overloaded(2)
    run = run_nw1()
    assert api.count == 3
    assert run.status == "succeeded"
    (model,) = Step.objects.filter(run=run, kind="model")
    assert model.attempts == 1
    assert (
        run.cost_micros
        == model.cost_micros
        # Every token of the one call paid for, those written to the prompt cache included.
        == cost_micros(
            MODEL,
            model.input_tokens,
            model.output_tokens,
            model.cache_read_tokens,
            model.cache_write_tokens,
        )
    )
    assert model.cost_micros > 0
    assert_accounting_matches(run)


def test_a_server_error_forever_fails_within_the_budget_keeping_the_cause(
    dbos_executor, api
) -> None:
    api.server_error(times=ATTEMPTS * 3)
    run = run_nw1()
    assert api.count == ATTEMPTS  # the provider's attempts only: DBOS does not multiply them
    assert (run.status, run.stop_reason) == ("failed", "provider_error")
    assert "api_error (HTTP 500)" in run.stop_detail
    assert f"gave up after {ATTEMPTS} attempts" in run.stop_detail
    assert "maximum of 3 retries" not in run.stop_detail


def test_an_unpriced_model_is_refused_at_start_in_one_sentence(dbos_executor) -> None:
    ticket = Ticket.objects.get(reference="NW-1")
    with pytest.raises(RunRefused) as info:
        run_create(
            ticket=ticket, user=user("owner@northwind.test"), provider=("anthropic", "claude-x-9")
        )
    assert "claude-x-9" in str(info.value) and "price" in str(info.value)
    assert str(info.value).count(". ") == 0
    assert not Run.objects.filter(ticket=ticket).exists()


# --- stop reasons --------------------------------------------------------------------


def test_end_turn_succeeds(dbos_executor, api) -> None:
    api.reply([text("All done.")], "end_turn")
    run = run_nw1()
    assert (run.status, run.stop_reason) == ("succeeded", "end_turn")
    assert "All done." in run.summary


def test_tool_use_continues_the_run(dbos_executor, api) -> None:
    api.reply([tool_use("get_ticket", reference="NW-1")], "tool_use")
    run = run_nw1()
    assert run.status == "succeeded" and api.count == 2
    assert Step.objects.filter(run=run, kind="tool", tool="get_ticket").count() == 1
    (answer,) = results_sent(api, 1)
    assert answer["is_error"] is False


def test_max_tokens_asks_once_to_finish_briefly_then_ends_truncated(dbos_executor, api) -> None:
    api.reply([text("I looked at the order and")], "max_tokens")
    api.reply([text("In short,")], "max_tokens")
    run = run_nw1()
    assert api.count == 2
    last = api.bodies()[1]["messages"][-1]
    assert last["role"] == "user" and last["content"][-1]["text"] == FINISH_BRIEFLY
    assert (run.status, run.stop_reason) == ("exhausted", "truncated")


def test_max_tokens_then_a_finish_succeeds(dbos_executor, api) -> None:
    api.reply([text("Checking")], "max_tokens")
    run = run_nw1()
    assert (run.status, run.stop_reason) == ("succeeded", "end_turn")
    assert api.count == 2


def test_a_tool_call_cut_off_by_max_tokens_is_never_run(dbos_executor, api) -> None:
    api.reply([text("Refunding"), tool_use("get_order", reference="NW-10")], "max_tokens")
    run = run_nw1()
    assert not Step.objects.filter(run=run, kind="tool").exists()
    (answer,) = results_sent(api, 1)
    assert answer["is_error"] is True and CUT_OFF in result_text(answer)
    assert run.status == "succeeded"


def test_context_window_exceeded_is_exhausted_not_success(dbos_executor, api) -> None:
    api.reply([text("Partial")], "model_context_window_exceeded")
    run = run_nw1()
    assert (run.status, run.stop_reason) == ("exhausted", "context_window_exceeded")
    assert api.count == 1


def test_pause_turn_continues_the_same_assistant_turn(dbos_executor, api) -> None:
    api.reply([text("Searching")], "pause_turn")
    run = run_nw1()
    assert (run.status, run.stop_reason) == ("succeeded", "end_turn")
    assert api.count == 2
    last = api.bodies()[1]["messages"][-1]
    assert last["role"] == "assistant"
    assert [(b["type"], b["text"]) for b in last["content"]] == [("text", "Searching")]


def test_a_refusal_fails_the_run_and_escalates_the_ticket(dbos_executor, api) -> None:
    api.reply([text("I can't help with that.")], "refusal")
    run = run_nw1()
    assert (run.status, run.stop_reason) == ("failed", "model_refusal")
    ticket = Ticket.objects.get(reference="NW-1")
    assert ticket.status == "escalated" and ticket.priority in ("high", "urgent")
    event = AuditEvent.objects.get(action="ticket.escalated")
    assert event.run_id == run.id and event.actor is None
    assert "Escalated" in run.summary


# --- model output is untrusted input --------------------------------------------------


def _stored_text(run: Run) -> str:
    """Every text column a model's words can reach, as Postgres holds them."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT coalesce(string_agg(arguments::text || result::text || tool_call_id || tool, ''), '')"
            " FROM agent_step WHERE run_id = %s",
            [run.pk],
        )
        steps = cur.fetchone()[0]
        cur.execute(
            "SELECT coalesce(string_agg(arguments::text || preview, ''), '')"
            " FROM approvals_approval WHERE run_id = %s",
            [run.pk],
        )
        approvals = cur.fetchone()[0]
        cur.execute("SELECT summary || stop_detail FROM agent_run WHERE id = %s", [run.pk])
        return steps + approvals + cur.fetchone()[0]


def test_malformed_calls_become_tool_errors_and_nothing_stored_holds_a_nul(
    dbos_executor, api
) -> None:
    long_id = "toolu_" + "x" * 94
    api.reply(
        [
            text(
                "Looking\x00 into it \ud800"
            ),  # a NUL and a lone surrogate: Postgres takes neither
            tool_use("n" * 64, id="toolu_long_name", reference="NW-1"),
            tool_use("get_ticket", id=long_id, reference="NW-1"),
            {"type": "tool_use", "id": "toolu_nameless", "input": {}},
            tool_use("get_order", id="toolu_nul", reference="NW\x00-1\udfff"),
        ],
        "tool_use",
        keep_ids=True,
    )
    api.reply([text("Summary with a NUL\x00 here.")], "end_turn")
    run = run_nw1()
    assert (run.status, run.stop_reason) == ("succeeded", "end_turn"), run.stop_detail
    assert api.count == 2  # the reply was stored at once: no retried model step
    stored = _stored_text(run)
    assert "\x00" not in stored and "\\u0000" not in stored
    assert "NW\ufffd-1\ufffd" in stored and "into it \ufffd" in stored  # replaced, not dropped
    assert "NUL\ufffd here" in run.summary
    answers = {b["tool_use_id"]: b for b in results_sent(api, 1)}
    assert set(answers) == {"toolu_long_name", long_id, "toolu_nameless", "toolu_nul"}
    assert all(answers[i]["is_error"] for i in ("toolu_long_name", long_id, "toolu_nameless"))
    assert not Step.objects.filter(run=run, tool_call_id=long_id).exists()
    assert all(len(s.tool) <= 40 for s in Step.objects.filter(run=run))
    assert_accounting_matches(run)


def test_a_nul_in_a_refund_reason_reaches_the_approval_replaced(dbos_executor, api) -> None:
    order = Order.objects.filter(customer=Ticket.objects.get(reference="NW-1").customer).first()
    api.reply(
        [
            tool_use(
                "issue_refund",
                order_reference=order.reference,
                amount_cents=100,
                reason="Dam\x00aged",
            )
        ],
        "tool_use",
    )
    run = start("NW-1", "owner@northwind.test")
    approval = wait_for_approval(run)
    assert "Dam\ufffdaged" in approval.preview and approval.arguments["reason"] == "Dam\ufffdaged"


def test_thirty_calls_in_one_reply_count_one_by_one_against_the_step_cap(
    dbos_executor, api
) -> None:
    api.reply([tool_use("get_ticket", reference="NW-1") for _ in range(30)], "tool_use")
    run = run_nw1()
    cap = run.max_steps
    assert (run.status, run.stop_reason) == ("exhausted", "step_cap")
    assert Step.objects.filter(run=run, kind="tool").count() == cap - 1
    assert run.steps <= cap + 1  # the tools, the model call, the closing row
    assert api.count == 1  # the cap ended the run before another call


def test_calls_whose_ids_the_api_would_refuse_are_answered_and_the_history_stays_valid(
    dbos_executor, api
) -> None:
    """No id, a repeated id, an id with characters the API refuses, a blank text block: the
    model step replaces those ids, so the next request is one the API accepts, each such call
    is answered "not run", and replay rebuilds exactly what was sent."""
    api.raw_reply(
        MessagesApi.message(
            [
                {"type": "text", "text": "  "},
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "get_ticket",
                    "input": {"reference": "NW-1"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "get_order",
                    "input": {"reference": "NW-1042"},
                },
                {"type": "tool_use", "name": "get_order", "input": {"reference": "NW-1042"}},
                {"type": "tool_use", "id": "toolu_é\x00", "name": "get_ticket", "input": {}},
            ],
            "tool_use",
        )
    )
    run = run_nw1()
    assert (run.status, run.stop_reason) == ("succeeded", "end_turn"), run.stop_detail
    assert api.count == 2 and [s.status for s in api.requests] == [200, 200]
    answers = results_sent(api, 1)
    assert answers[0]["tool_use_id"] == "toolu_a" and answers[0]["is_error"] is False
    assert all(a["is_error"] and "was replaced" in result_text(a) for a in answers[1:])
    assert list(Step.objects.filter(run=run, kind="tool").values_list("tool", flat=True)) == [
        "get_ticket"
    ]
    first = Step.objects.filter(run=run, kind="model").order_by("seq").first()
    assert sorted(first.payload.replaced_ids.values()) == ["(none)", "toolu_a", "toolu_é\ufffd"]
    assert "\x00" not in _stored_text(run)
    second = Step.objects.filter(run=run, kind="model").order_by("seq").last()
    view = rebuild.at(timeline.load(run), second.seq)
    sent = api.bodies()[1]["messages"]  # the provider adds its breakpoint on the newest block
    assert canonical_json(with_newest_breakpoint(view.messages)) == canonical_json(sent)


@pytest.mark.parametrize("stop_reason", ["flux_capacitor", None, 42])
def test_a_stop_reason_the_loop_does_not_know_fails_the_run_and_runs_none_of_its_calls(
    dbos_executor, api, stop_reason
) -> None:
    api.raw_reply(
        MessagesApi.message(
            [text("Refunding now."), tool_use("get_ticket", id="toolu_a", reference="NW-1")],
            stop_reason,
        )
    )
    run = run_nw1()
    assert (run.status, run.stop_reason) == ("failed", "unknown_stop_reason")
    shown = stop_reason if isinstance(stop_reason, str) else "none given"
    assert f"does not know ({shown})" in run.stop_detail
    assert api.count == 1 and not Step.objects.filter(run=run, kind="tool").exists()
    assert "Stopped: unknown_stop_reason" in run.summary
    view = rebuild.at(timeline.load(run), run.steps)  # the closing row: the reply not appended
    assert [m["role"] for m in view.messages] == ["user"]


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"{not json", "the body is not JSON"),
        ({**MessagesApi.message([text("hi")]), "usage": None}, "usage is missing"),
    ],
    ids=["malformed JSON", "no usage"],
)
def test_a_200_that_is_not_a_usable_message_fails_the_run_after_one_call(
    dbos_executor, api, body, why
) -> None:
    api.raw_reply(body)
    run = run_nw1()
    assert (run.status, run.stop_reason) == ("failed", "provider_error")
    assert "invalid_response" in run.stop_detail and why in run.stop_detail
    assert api.count == 1  # neither the provider nor DBOS sent it again
    assert not Step.objects.filter(run=run, kind="model").exists()
    assert_accounting_matches(run)


@pytest.mark.parametrize(
    "content",
    [[{"type": "thinking", "thinking": "Nothing to do.", "signature": "sig"}], []],
    ids=["only thinking", "empty"],
)
def test_a_reply_with_nothing_to_say_ends_the_turn(dbos_executor, api, content) -> None:
    api.raw_reply(MessagesApi.message(content, "end_turn"))
    run = run_nw1()
    assert (run.status, run.stop_reason) == ("succeeded", "end_turn")
    assert api.count == 1
    (model,) = Step.objects.filter(run=run, kind="model")
    assert model.payload.content == content


# --- refunds checked before a person is asked -----------------------------------------


def test_a_refund_larger_than_what_is_left_asks_nobody_and_tells_the_model(
    dbos_executor, api
) -> None:
    order = Order.objects.filter(customer=Ticket.objects.get(reference="NW-1").customer).first()
    api.reply(
        [
            tool_use(
                "issue_refund",
                order_reference=order.reference,
                amount_cents=order.total_cents + 1,
                reason="Customer asked",
            )
        ],
        "tool_use",
    )
    run = run_nw1()
    assert Approval.objects.filter(run=run).count() == 0
    assert Refund.objects.count() == 0
    (answer,) = results_sent(api, 1)
    assert answer["is_error"] is True
    assert "cannot refund" in result_text(answer) and "left to refund" in result_text(answer)
    assert run.status == "succeeded"


def test_a_refund_against_another_merchants_order_asks_nobody_and_tells_the_model(
    dbos_executor, api
) -> None:
    other = Order.objects.exclude(merchant=Ticket.objects.get(reference="NW-1").merchant).first()
    api.reply(
        [
            tool_use(
                "issue_refund",
                order_reference=other.reference,
                amount_cents=100,
                reason="Customer asked",
            )
        ],
        "tool_use",
    )
    run = run_nw1()
    assert not Approval.objects.filter(run=run).exists() and not Refund.objects.exists()
    (answer,) = results_sent(api, 1)
    assert answer["is_error"] is True
    assert f"no order '{other.reference}' for this merchant" in result_text(answer)
    assert run.status == "succeeded"
