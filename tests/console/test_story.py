"""The run page's story: one sentence per step, in words a support person reads.

Steps are built as rows in memory (the payload parser reads them as it reads
stored ones); nothing here needs the database.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from agent.models import Step
from deskhand.domain.desk.money import display_cents
from deskhand.web.console.story import ago, exact, sentence

ORDER = {
    "reference": "NW-1042",
    "status": "delivered",
    "currency": "USD",
    "total_cents": 12400,
    "refunded_cents": 0,
    "refundable_cents": 12400,
}


def step(kind: str, result: dict[str, Any], *, tool: str = "", args: Any = None, **kw: Any) -> Step:
    return Step(seq=1, kind=kind, tool=tool, arguments=args or {}, result=result, **kw)


def tool(name: str, args: dict[str, Any], answer: Any, **kw: Any) -> Step:
    text = answer if isinstance(answer, str) else json.dumps(answer)
    return step("tool", {"text": text}, tool=name, args=args, **kw)


def model(*blocks: dict[str, Any], stop: str = "tool_use") -> Step:
    return step("model", {"content": list(blocks), "stop_reason": stop})


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_1", "name": name, "input": args}


# --- model turns ----------------------------------------------------------------------------


def test_a_model_turn_says_what_the_agent_decided_to_do():
    turn = model(
        call("get_order", reference="NW-1042"),
        call("issue_refund", order_reference="NW-1042", amount_cents=3800, reason="x"),
    )
    assert sentence(turn) == (
        "The agent decided to look up order NW-1042 and refund $38.00 on order NW-1042."
    )


def test_a_model_turn_without_calls_says_it_wrote_its_answer():
    turn = model({"type": "text", "text": "All done."}, stop="end_turn")
    assert sentence(turn) == "The agent wrote its answer."


@pytest.mark.parametrize(
    ("stop", "words"),
    [
        ("refusal", "The model refused to answer; nothing it said was acted on."),
        ("max_tokens", "The model's reply was cut off at its length limit."),
    ],
)
def test_a_refused_or_cut_off_model_turn_says_so(stop, words):
    assert sentence(model({"type": "text", "text": "I can't"}, stop=stop)) == words


# --- each tool ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args", "answer", "expected"),
    [
        (
            "get_order",
            {"reference": "NW-1042"},
            ORDER,
            "Looked up order NW-1042 — $124.00, nothing refunded yet.",
        ),
        (
            "get_order",
            {"reference": "NW-1042"},
            {**ORDER, "refunded_cents": 3800, "refundable_cents": 8600},
            "Looked up order NW-1042 — $124.00, $38.00 refunded, $86.00 left.",
        ),
        (
            "get_ticket",
            {"reference": "NW-1"},
            {"reference": "NW-1", "messages": [{"body": "a"}, {"body": "b"}]},
            "Read ticket NW-1 — 2 messages.",
        ),
        (
            "get_customer",
            {"email": "d***@example.com"},
            {"orders": [{}], "tickets": [{}, {}]},
            "Looked up the customer — 1 order, 2 tickets.",
        ),
        (
            "list_refunds",
            {"since_days": 90},
            {"since_days": 90, "refunds": [], "total_cents": 0},
            "Checked the customer's refunds of the last 90 days — none.",
        ),
        (
            "list_refunds",
            {"since_days": 30},
            {"since_days": 30, "refunds": [{}, {}], "total_cents": 5050},
            "Checked the customer's refunds of the last 30 days — 2, $50.50 in all.",
        ),
        (
            "list_refunds",
            {"since_days": 30},
            {"since_days": 30, "refunds": [{}, {}], "total_cents": 1250, "in_flight_cents": 3800},
            "Checked the customer's refunds of the last 30 days — 2, $12.50 refunded, and $38.00 "
            "in flight (not yet confirmed).",
        ),
        (
            "get_order",
            {"reference": "NW-1042"},
            {**ORDER, "refunds_in_flight_cents": 3800, "refundable_cents": 8600},
            "Looked up order NW-1042 — $124.00, nothing refunded yet, $38.00 in flight (not yet "
            "confirmed), $86.00 left.",
        ),
        (
            "search_kb",
            {"query": "damaged goods"},
            {"query": "damaged goods", "results": [{}, {}, {}]},
            "Searched the help articles for “damaged goods” — 3 found.",
        ),
        (
            "issue_refund",
            {"order_reference": "NW-1042", "amount_cents": 3800, "reason": "stale"},
            {"refunded_cents": 3800, "currency": "USD", "refundable_remaining_cents": 8600},
            "Refunded $38.00 on order NW-1042 — $86.00 left to refund.",
        ),
        (
            "send_customer_email",
            {"reference": "NW-1", "subject": "Your refund", "body": "…"},
            {"message": "Emailed"},
            "Emailed the customer “Your refund”.",
        ),
        (
            "cancel_order",
            {"order_reference": "NW-2001", "reason": "asked"},
            {"status": "cancelled"},
            "Cancelled order NW-2001.",
        ),
        (
            "tag_ticket",
            {"reference": "NW-1", "tags": ["refund", "quality"]},
            {"changed": True},
            "Tagged NW-1 with refund, quality.",
        ),
        (
            "set_priority",
            {"reference": "NW-1", "priority": "high"},
            {"changed": True},
            "Set NW-1's priority to high.",
        ),
        (
            "set_ticket_status",
            {"reference": "NW-1", "status": "escalated"},
            {"changed": True},
            "Set NW-1's status to escalated.",
        ),
        (
            "assign_ticket",
            {"reference": "NW-1", "assignee_email": "agent@northwind.test"},
            {"changed": True},
            "Assigned NW-1 to agent@northwind.test.",
        ),
        (
            "add_internal_note",
            {"reference": "NW-1", "body": "check photos"},
            {"changed": True},
            "Added an internal note to NW-1.",
        ),
        (
            "set_priority",
            {"reference": "NW-1", "priority": "high"},
            {"changed": False},
            "Nothing to change: asked to set NW-1's priority to high, which was already so.",
        ),
    ],
)
def test_each_tool_step_reads_as_a_sentence(name, args, answer, expected):
    assert sentence(tool(name, args, answer)) == expected


def test_a_failed_tool_step_quotes_why():
    failed = tool("get_order", {"reference": "NW-9"}, "no order NW-9 for this customer", ok=False)
    assert sentence(failed) == (
        "Tried to look up order NW-9, which failed: “no order NW-9 for this customer”."
    )


def test_a_refund_the_provider_has_not_confirmed_reads_as_in_flight_never_as_failed():
    sent = step(
        "tool",
        {
            "text": "The payment provider has not confirmed the refund of 38.00 USD …",
            "adapter": "payments",
            "effect_state": "pending",
        },
        tool="issue_refund",
        args={"order_reference": "NW-1042", "amount_cents": 3800, "reason": "x"},
        ok=False,
    )
    assert sentence(sent) == (
        "Sent “refund $38.00 on order NW-1042” to the payments system, which has not confirmed "
        "it yet: in flight, it may or may not have happened."
    )


def test_a_step_answered_from_the_ledger_says_nothing_happened_twice():
    replayed = tool(
        "issue_refund",
        {"order_reference": "NW-1042", "amount_cents": 3800, "reason": "x"},
        {"refunded_cents": 3800},
        replayed=True,
    )
    assert sentence(replayed) == (
        "Found “refund $38.00 on order NW-1042” already done in the ledger: "
        "it reported what was done and nothing happened twice."
    )


def test_money_is_stated_in_the_orders_currency_from_integer_cents():
    euro = tool("get_order", {}, {**ORDER, "currency": "EUR", "total_cents": 123456})
    assert sentence(euro) == "Looked up order NW-1042 — €1,234.56, nothing refunded yet."
    sek = tool("get_order", {}, {**ORDER, "currency": "SEK", "total_cents": 5})
    assert sentence(sek) == "Looked up order NW-1042 — 0.05 SEK, nothing refunded yet."


def test_an_amount_that_is_not_integer_cents_is_left_out_not_rounded():
    floaty = tool("get_order", {"reference": "NW-1042"}, {**ORDER, "total_cents": 124.0})
    assert sentence(floaty) == "Looked up order NW-1042."
    with pytest.raises(TypeError):
        display_cents(12.5)  # type: ignore[arg-type]


def test_a_result_that_is_not_json_never_shows_raw():
    redacted = tool("get_order", {"reference": "NW-1042"}, "[erased]")
    assert sentence(redacted) == "Looked up order NW-1042."


# --- approvals ------------------------------------------------------------------------------

REFUND = {"order_reference": "NW-1042", "amount_cents": 3800, "reason": "stale"}
DECIDED = "2026-12-02T14:02:31+00:00"


def approval(event: str, **fields: Any) -> Step:
    return step("approval", {"event": event, **fields}, tool="issue_refund", args=REFUND)


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (
            approval("requested"),
            "Asked a person to approve: refund $38.00 on order NW-1042.",
        ),
        (
            approval("requested", reused=True),
            "Asked a person to approve: refund $38.00 on order NW-1042 "
            "(the earlier request still stands).",
        ),
        (
            approval("approved", decided_by="owner@northwind.test", decided_at=DECIDED),
            "owner@northwind.test approved at 14:02.",
        ),
        (
            approval(
                "denied",
                decided_by="owner@northwind.test",
                decided_at=DECIDED,
                reason="Outside the policy window",
            ),
            "owner@northwind.test denied it at 14:02: “Outside the policy window”.",
        ),
        (
            approval(
                "approved",
                decided_by="owner@northwind.test",
                decided_at=DECIDED,
                changed="amount lowered from $38.00 to $30.00",
            ),
            "owner@northwind.test approved at 14:02, with changes: "
            "amount lowered from $38.00 to $30.00.",
        ),
        (
            approval("approved", policy="policy v3 rule 1", decided_at=DECIDED),
            "The merchant's policy v3 rule 1 approved it at 14:02; no person waited.",
        ),
        (
            approval("expired"),
            "Nobody decided in time: the request to refund $38.00 on order NW-1042 expired.",
        ),
        (
            approval("mismatch"),
            "Refused to refund $38.00 on order NW-1042: "
            "the call no longer matched what was approved.",
        ),
    ],
)
def test_each_approval_event_reads_as_a_sentence(row, expected):
    assert sentence(row) == expected


# --- staff notes, undo and the end of a run -------------------------------------------------


def test_a_staff_note_names_who_sent_it():
    note = step("note", {"notes": [{"author": "agent@northwind.test", "body": "ask for photos"}]})
    assert sentence(note) == "agent@northwind.test sent a note the agent read before its next turn."


@pytest.mark.parametrize(
    ("kind", "result", "expected"),
    [
        ("final", {"status": "succeeded", "summary": "Refunded."}, "The run finished."),
        (
            "bound",
            {"event": "cancel", "by": "owner@northwind.test", "withdrawn": ["a1"]},
            "Cancelled by owner@northwind.test; 1 pending approval withdrawn.",
        ),
        (
            "bound",
            {"status": "exhausted", "stop_reason": "truncated"},
            "Stopped: the model's replies were cut off at their length limit twice.",
        ),
        (
            "bound",
            {"status": "failed", "stop_reason": "model_refusal"},
            "Stopped: the model refused to continue.",
        ),
        (
            "bound",
            {"status": "exhausted", "stop_reason": "step_cap"},
            "Stopped: it used all the steps it was allowed.",
        ),
        (
            "error",
            {"status": "failed", "stop_reason": "provider_error"},
            "Failed: the model could not be reached.",
        ),
        (
            "undo",
            {"undid_seq": 4, "by": "owner@northwind.test"},
            "Undid step 4 for owner@northwind.test.",
        ),
    ],
)
def test_each_end_of_a_run_reads_as_a_sentence(kind, result, expected):
    assert sentence(step(kind, result)) == expected


def test_a_step_that_finished_after_the_run_closed_says_so():
    late = model(call("get_ticket", reference="NW-1"))
    late.result["late"] = True
    assert sentence(late) == (
        "The agent decided to read ticket NW-1 (finished after the run was closed)."
    )


# --- times ----------------------------------------------------------------------------------

NOW = dt.datetime(2026, 12, 2, 14, 30, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("before", "expected"),
    [
        (dt.timedelta(seconds=10), "just now"),
        (dt.timedelta(minutes=28), "28 min ago"),
        (dt.timedelta(hours=5, minutes=59), "5 h ago"),
        (dt.timedelta(days=1, hours=2), "1 day ago"),
        (dt.timedelta(days=3), "3 days ago"),
        (dt.timedelta(days=30), "on 2026-11-02"),
    ],
)
def test_times_read_relative(before, expected):
    assert ago(NOW - before, NOW) == expected


def test_the_exact_time_is_there_for_the_hover():
    assert exact(NOW) == "2026-12-02 14:30:00 UTC"


def test_where_the_time_went_adds_up_to_what_the_run_took(seeded):
    """Issue 40: "Model 0 ms, Tools 0 ms" stood beside "Took 1.1 s"; the rest is now named."""
    from agent.models import Run
    from deskhand.web.console.present import spend
    from tests.console.conftest import NW_OWNER, client_for, make_run, model_step, tool_step

    run = make_run("NW-1", status="succeeded", waited_seconds=4)
    Run.objects.filter(pk=run.pk).update(finished_at=run.started_at + dt.timedelta(seconds=10))
    run.refresh_from_db()
    model_step(run, 1, text="thinking")
    tool_step(run, 2, "get_order", {"reference": "NW-1042"}, "{}")
    Step.objects.filter(run=run, seq=1).update(latency_ms=2000)
    Step.objects.filter(run=run, seq=2).update(latency_ms=500)
    s = spend(run, list(Step.objects.filter(run=run)))
    assert (s.model, s.tools, s.waited, s.other) == ("2.0 s", "500 ms", "4.0 s", "3.5 s")
    page = client_for(NW_OWNER).get(f"/runs/{run.pk}/").content.decode()
    assert "Everything else</span>" in page and "Took</dt><dd>10.0 s" in page


def test_a_moment_is_told_in_the_merchants_zone_labelled_and_dated_unless_today():
    from deskhand.web.console.words import moment

    now = dt.datetime(2026, 12, 7, 17, 0, tzinfo=dt.UTC)
    assert moment(now, "America/New_York", now=now) == "12:00 EST"
    in_three_days = now + dt.timedelta(days=3, minutes=6)
    assert moment(in_three_days, "America/New_York", now=now) == "Thu 10 Dec 2026, 12:06 EST"
    # Past midnight in Dublin while still the 7th in New York: the date follows the zone.
    late = dt.datetime(2026, 12, 8, 0, 30, tzinfo=dt.UTC)
    assert moment(late, "Europe/Dublin", now=now) == "Tue 8 Dec 2026, 00:30 GMT"
    assert moment(late, "America/New_York", now=now) == "19:30 EST"
