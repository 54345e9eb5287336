"""Resilience: tools and models that fail, stall or talk nonsense do not take a run off the rails."""

from __future__ import annotations

from agent.models.ledger import LedgerEntry
from agent.record.faults import Fault, injecting
from deskhand.domain.desk.models import Refund
from tests.devtools.evals.harness import APPROVE, Harness, expect, expect_eq
from tests.devtools.evals.scenarios import scenario

NW2_PATH = [
    "get_ticket",
    "get_order",
    "search_kb",
    "ask:reply_to_customer",
    "approved:reply_to_customer",
    "reply_to_customer",
    "add_internal_note",
    "set_ticket_status",
    "end:succeeded/end_turn",
]


@scenario("resilience", "a tool error is a result the model reads; the run carries on")
def a_tool_error_is_shown_to_the_agent(h: Harness) -> None:
    with injecting(Fault("search_kb", "error", payload="knowledge base unavailable")):
        t = h.drive(h.start("NW-1"))
    expect_eq((t.status, t.stop_reason), ("succeeded", "end_turn"), "terminal state")
    expect_eq(t.path[:3], ["get_ticket", "get_order", "search_kb!"], "path")
    seen = [
        b
        for b in t.tool_results_seen()
        if b.get("is_error") and "knowledge base unavailable" in str(b.get("content"))
    ]
    expect_eq(len(seen), 1, "the model saw the failure once")
    expect_eq(t.unfenced_results(), [], "results not exactly fenced")
    expect_eq(t.approvals, [], "no refund asked without a policy to cite")
    expect_eq(len(t.tool_steps("add_internal_note")), 1, "the note ran once")


@scenario(
    "resilience", "garbage from a tool does not derail the run; it is quoted, fenced and survived"
)
def garbage_does_not_derail_the_run(h: Harness) -> None:
    with injecting(Fault("get_order", "garbage")):
        t = h.drive(h.start("NW-1"))
    expect_eq((t.status, t.stop_reason), ("succeeded", "end_turn"), "terminal state")
    expect_eq(t.unfenced_results(), [], "results not exactly fenced")
    expect_eq(t.approvals, [], "no refund asked from an order that could not be read")
    expect_eq(h.ticket("NW-1").status, "escalated", "handed to a person")


@scenario("resilience", "a slow tool is slow, not failed: the path is unchanged")
def latency_is_not_failure(h: Harness) -> None:
    with injecting(Fault("get_order", "latency", seconds=0.4)):
        t = h.drive(h.start("NW-2"))
    expect_eq(t.path, NW2_PATH, "path")
    expect(t.tool_steps("get_order")[0].latency_ms >= 400, "the step recorded the wait")


@scenario("resilience", "a transient model outage is retried by the runtime; the run is unchanged")
def a_transient_model_outage_is_retried(h: Harness) -> None:
    with injecting(Fault("model", "error", after=1, payload="503 from the provider")) as (fault,):
        t = h.drive(h.start("NW-2"))
    expect_eq(fault.fired, 1, "the outage happened")
    expect_eq(t.path, NW2_PATH, "path")
    expect(all(s.attempts == 1 for s in t.steps), "the failed attempt wrote nothing")


@scenario(
    "resilience", "a model that keeps failing ends the run failed, truthfully, with nothing moved"
)
def a_model_that_keeps_failing_ends_the_run(h: Harness) -> None:
    with injecting(Fault("model", "error", times=None, after=1, payload="provider down")):
        t = h.drive(h.start("NW-1"))
    expect_eq((t.status, t.stop_reason), ("failed", "error"), "terminal state")
    expect("model" in t.run.stop_detail, f"detail names the failing step: {t.run.stop_detail!r}")
    expect("No money moved" in t.summary, f"summary: {t.summary!r}")
    expect_eq(len(t.terminal_steps), 1, "terminal steps")


@scenario("resilience", "a garbled model turn becomes error results; the run recovers and finishes")
def garbage_from_the_model_becomes_error_results(h: Harness) -> None:
    with injecting(Fault("model", "garbage")):
        t = h.drive(h.start("NW-2"))
    expect_eq((t.status, t.stop_reason), ("succeeded", "end_turn"), "terminal state")
    expect_eq(
        t.path[:3], ["issue_refund!!!", "get_order!", "get_order!"], "the garbled calls failed"
    )
    expect_eq(t.path[3:], NW2_PATH, "then the normal path")
    expect_eq(t.approvals, [], "a garbled irreversible name never reached a person")


@scenario(
    "resilience",
    "a bug inside an approved refund rolls back: no refund, no ledger claim, a truthful failure",
)
def a_handler_bug_leaves_nothing_behind(h: Harness) -> None:
    with injecting(Fault("issue_refund", "exception")):
        t = h.drive(h.start("NW-1"), APPROVE)
    expect_eq((t.status, t.stop_reason), ("failed", "error"), "terminal state")
    expect_eq(Refund.objects.count(), 0, "refunds")
    expect_eq(LedgerEntry.objects.filter(tool="issue_refund").count(), 0, "ledger entries")
    expect("No money moved" in t.summary, f"summary: {t.summary!r}")


@scenario(
    "resilience",
    "a refund that errors after approval is recorded once as failed; the model escalates",
)
def a_refund_error_after_approval_is_recorded(h: Harness) -> None:
    with injecting(Fault("issue_refund", "error", payload="payment processor declined")):
        t = h.drive(h.start("NW-1"), APPROVE)
    expect_eq((t.status, t.stop_reason), ("succeeded", "end_turn"), "terminal state")
    expect("issue_refund!" in t.path, f"path: {t.path}")
    expect_eq(t.refunds, [], "refunds")
    expect_eq([(e.ok, e.tool) for e in t.ledger], [(False, "issue_refund")], "ledger")
    expect_eq(h.ticket("NW-1").status, "escalated", "handed to a person")
