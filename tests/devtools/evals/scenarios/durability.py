"""Durability: a run resumes from its last checkpoint and never repeats a completed effect.

These scenarios stop and relaunch the in-process DBOS executor (recovery under
the same executor id) and re-execute steps by hand the way recovery would.
SIGKILLed worker processes are the crash sweep's job (``manage.py crash_sweep``).
"""

from __future__ import annotations

from agent.ledger.effect import execute_irreversible
from agent.models import Run, Step
from agent.models.ledger import LedgerEntry
from agent.providers.scripted import ScriptedProvider, call, say
from agent.record import faults
from deskhand.domain.desk.models import Refund
from tests.devtools.evals.harness import APPROVE, LEAVE, Harness, deny, expect, expect_eq
from tests.devtools.evals.scenarios import scenario
from tests.devtools.evals.scenarios.consent import NW1_PATH
from tests.devtools.evals.scripts import nw1_exact


def _accounting(h: Harness, run_id: str) -> None:
    from django.db.models import Sum

    run = Run.objects.get(pk=run_id)
    sums = Step.objects.filter(run=run).aggregate(
        i=Sum("input_tokens"), o=Sum("output_tokens"), c=Sum("cost_micros")
    )
    expect_eq(run.steps, Step.objects.filter(run=run).count(), "run.steps vs step rows")
    expect_eq(
        (run.input_tokens, run.output_tokens, run.cost_micros),
        (sums["i"] or 0, sums["o"] or 0, sums["c"] or 0),
        "run totals vs step-log sums",
    )


@scenario("durability", "the ledger returns the recorded result when a paid step runs again")
def the_ledger_catches_a_double_execution(h: Harness) -> None:
    run = h.start("NW-1")
    t = h.drive(run, APPROVE)
    expect_eq(t.refunds, [("NW-1042", 3800)], "refunds after the first execution")
    step = t.tool_steps("issue_refund")[0]
    call = {"name": step.tool, "id": step.tool_call_id, "input": step.arguments}
    first = LedgerEntry.objects.get(run=run, tool="issue_refund")
    # What DBOS does after a crash between the refund's commit and its checkpoint.
    again = execute_irreversible(str(run.pk), step.seq, call, str(first.approval_id))
    expect_eq(again.replayed, True, "second execution replayed")
    expect_eq(again.text, first.result, "second execution returns the recorded result")
    expect_eq(Refund.objects.filter(order__reference="NW-1042").count(), 1, "refunds")
    expect_eq(LedgerEntry.objects.filter(tool="issue_refund").count(), 1, "ledger entries")
    step.refresh_from_db()
    expect_eq((step.replayed, step.attempts), (True, 2), "the step row says it was replayed")
    _accounting(h, str(run.pk))


@scenario(
    "durability",
    "a fork that replays a paid call finds its ledger claim: no second ask, no second refund",
)
def a_fork_never_pays_twice(h: Harness) -> None:
    first = h.start("NW-1", nw1_exact())
    h.drive(first, APPROVE)
    fork = h.start("NW-1", nw1_exact(), forked_from=first)
    t = h.drive(fork)
    expect_eq((t.status, t.stop_reason), ("succeeded", "end_turn"), "fork's terminal state")
    expect_eq(t.approvals, [], "approvals asked by the fork")
    expect_eq(
        t.path,
        ["get_ticket", "get_order", "add_internal_note", "end:succeeded/end_turn"],
        "fork's path",
    )
    expect_eq(Refund.objects.count(), 1, "refunds in the world")
    seen = [b for b in t.tool_results_seen() if "Refunded 19.00" in str(b.get("content"))]
    expect(seen, "the fork's model saw the original refund's result")


@scenario(
    "durability",
    "a fork that proposes a different refund is asked again, shown the lineage's refund",
)
def a_re_derived_different_refund_is_asked_again(h: Harness) -> None:
    first = h.start("NW-1")
    h.drive(first, APPROVE)
    # The fork's model proposes another amount on the same order (the keyless policy reader
    # no longer does: money already back on an order is a decision, issue 29). That is a new
    # effect, not a mismatch: a person is asked, and the card says what the lineage paid.
    fork = h.start("NW-1", nw1_other_amount(), forked_from=first)
    t = h.drive(fork, deny("Already refunded."))
    expect_eq((t.status, t.stop_reason), ("succeeded", "end_turn"), "fork's terminal state")
    [card] = t.approvals
    expect_eq(
        [p["what"] for p in card.prior_effects],
        ["Refunded 38.00 USD against NW-1042."],
        "what the fork's approval card shows was already done",
    )
    expect_eq(Refund.objects.count(), 1, "refunds in the world")
    summary = Run.objects.get(pk=fork.pk).summary
    expect("Inherited from the lineage" in summary, "the fork's summary names what it inherited")


def nw1_other_amount() -> ScriptedProvider:
    return ScriptedProvider(
        [
            [call("get_ticket", reference="NW-1")],
            [call("get_order", reference="NW-1042")],
            [
                call(
                    "issue_refund",
                    order_reference="NW-1042",
                    amount_cents=1000,
                    reason="The shipping as well.",
                )
            ],
            [say("Asked for the shipping too.")],
        ],
        model="scripted-nw1-other-amount",
    )


@scenario(
    "durability",
    "the policy reader's fork of a refunded ticket sees the refund and proposes nothing more",
)
def a_fork_of_a_refunded_ticket_proposes_nothing_more(h: Harness) -> None:
    first = h.start("NW-1")
    h.drive(first, APPROVE)
    fork = h.start("NW-1", forked_from=first)
    t = h.drive(fork)
    expect_eq((t.status, t.stop_reason), ("succeeded", "end_turn"), "fork's terminal state")
    refunds_asked = [a for a in t.approvals if a.tool == "issue_refund"]
    expect_eq(refunds_asked, [], "refunds the fork asked for")
    expect_eq(Refund.objects.count(), 1, "refunds in the world")
    summary = Run.objects.get(pk=fork.pk).summary
    expect("went back on NW-1042 already" in summary, "the fork's summary names the refund")


@scenario("durability", "a decision sent while the executor is down is not lost; the run pays once")
def a_parked_run_survives_a_restart(h: Harness) -> None:
    run = h.start("NW-1")
    h.drive(run, LEAVE)
    h.executor.stop()
    h.decide(run, APPROVE)  # delivered while nothing executes workflows
    h.executor.start()
    t = h.trajectory(h.wait(run))
    expect_eq(t.path, NW1_PATH, "path")
    expect_eq(t.refunds, [("NW-1042", 3800)], "refunds")
    recorder = h.recorders[str(run.pk)]
    expect_eq(
        len(recorder.calls),
        t.model_calls,
        "provider calls vs model steps (none repeated on recovery)",
    )
    expect(all(s.attempts == 1 for s in t.steps), "no step ran twice")
    _accounting(h, str(run.pk))


@scenario(
    "durability", "a model call retried after it was paid is billed twice in the log, never lost"
)
def a_retried_model_call_is_billed_not_forgotten(h: Harness) -> None:
    count = {"n": 0}

    def crash_once() -> None:
        count["n"] += 1
        if count["n"] == 2:  # the second model turn: paid and logged, not yet checkpointed
            raise faults.InjectedCrash("lost the reply after paying for it")

    faults.install("after_step", "model", crash_once)
    try:
        t = h.drive(h.start("NW-2"))
    finally:
        faults.clear()
    expect_eq((t.status, t.stop_reason), ("succeeded", "end_turn"), "terminal state")
    models = [s for s in t.steps if s.kind == "model"]
    expect_eq([s.attempts for s in models][:3], [1, 2, 1], "attempts of the first model steps")
    expect_eq(
        models[1].cost_micros, 2 * models[0].cost_micros, "the retried turn's cost (both calls)"
    )
    expect_eq(
        len(h.recorders[str(t.run.pk)].calls), t.model_calls + 1, "provider calls (one retried)"
    )
    _accounting(h, str(t.run.pk))
