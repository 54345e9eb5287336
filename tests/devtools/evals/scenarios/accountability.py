"""Accountability: every step is attributable — who, which run, what it cost, what it changed."""

from __future__ import annotations

from django.db import connection

from agent.models import payloads
from agent.models.ledger import LedgerEntry
from agent.run.services import run_cancel
from approvals.models import AuditEvent
from tests.devtools.evals.harness import APPROVE, LEAVE, Harness, deny, expect, expect_eq
from tests.devtools.evals.scenarios import scenario
from tests.devtools.evals.scripts import NW3_DENIAL_REASON, nw3_asks

# Which DBOS step writes each kind of step row.
_STEP_FUNCTIONS = {
    "model": ("model",),
    "approval": ("gate.request", "gate.resume"),
    "final": ("run.finish",),
    "bound": ("run.finish",),
    "note": ("notes.record",),
}


@scenario(
    "accountability",
    "every irreversible act names its run, its ledger key and the person who approved it",
)
def every_irreversible_act_names_a_run_and_a_person(h: Harness) -> None:
    run = h.start("LU-2")
    t = h.drive(run, APPROVE, APPROVE)
    expect_eq(len(t.effects), 2, "effects")
    for effect in t.effects:
        entry = LedgerEntry.objects.get(key=effect.ledger_key)
        expect_eq(str(entry.run_id), str(run.pk), f"{effect.kind}: ledger run")
        expect_eq(
            entry.key,
            f"{run.pk}:{entry.tool_call_id}:{entry.args_hash[:16]}",
            f"{effect.kind}: ledger key is root run + call id + arguments hash",
        )
        expect(bool(entry.identity), f"{effect.kind}: the entry records its business identity")
        expect_eq(effect.decided_by, "owner@lumen.test", f"{effect.kind}: approved by")
        expect_eq(
            effect.approval_hash,
            effect.ledger_hash,
            f"{effect.kind}: approved hash vs executed hash",
        )
    audits = AuditEvent.objects.filter(run=run, action="approval.approve")
    expect_eq(audits.count(), 2, "audited approvals")
    expect(
        all(a.actor and a.actor.email == "owner@lumen.test" for a in audits),
        "each audit names the person",
    )
    expect_eq(t.unconsented_effects(), [], "effects without a matching approval")


@scenario(
    "accountability",
    "a denied run's summary tells the truth: nothing refunded, who declined and why",
)
def a_denied_run_tells_the_truth(h: Harness) -> None:
    t = h.drive(h.start("NW-3", nw3_asks()), deny(NW3_DENIAL_REASON))
    expect_eq(t.status, "succeeded", "status")
    effects = t.summary.split("Effects:", 1)[-1]
    expect("Declined by a person" in effects and "156.00" in effects, f"effects: {effects!r}")
    expect(NW3_DENIAL_REASON.rstrip(".") in effects, "the reason is in the summary")
    expect("Refunded" not in t.summary, f"summary claims a refund: {t.summary!r}")
    expect_eq(t.refunds, [], "refunds")


@scenario(
    "accountability",
    "a run cancelled between two gates reports the refund it made and the email it did not",
)
def a_cancelled_run_reports_what_it_did(h: Harness) -> None:
    run = h.start("LU-2")
    h.drive(run, APPROVE, LEAVE)
    run_cancel(run=run, user=h.owner(run.ticket))
    t = h.trajectory(h.wait_for(run, lambda r: r.status == "cancelled"))
    expect_eq(t.refunds, [("LU-2311", 17900)], "refunds")
    expect_eq([e.kind for e in t.effects], ["refund"], "effects")
    expect("Refunded 179.00 USD against LU-2311" in t.summary, f"summary: {t.summary!r}")
    expect(
        "Email the customer" in t.summary,
        f"summary names the email that was not sent: {t.summary!r}",
    )


@scenario(
    "accountability", "the step log adds up to the run's totals and each row names its DBOS step"
)
def the_step_log_adds_up_and_names_its_steps(h: Harness) -> None:
    run = h.start("LU-2")
    t = h.drive(run, APPROVE, APPROVE)
    expect_eq([s.seq for s in t.steps], list(range(1, len(t.steps) + 1)), "dense sequence numbers")
    expect_eq(t.run.steps, len(t.steps), "step count")
    expect_eq(t.run.cost_micros, sum(s.cost_micros for s in t.steps), "cost")
    expect_eq(
        t.run.input_tokens + t.run.output_tokens,
        sum(s.input_tokens + s.output_tokens for s in t.steps),
        "tokens",
    )
    with connection.cursor() as cur:
        cur.execute(
            "SELECT function_id, function_name FROM dbos.operation_outputs WHERE workflow_uuid = %s",
            [str(run.pk)],
        )
        functions = dict(cur.fetchall())
    for s in t.steps:
        expect(s.function_id is not None, f"step {s.seq} ({s.kind}) has no DBOS function id")
        name = functions.get(s.function_id)
        allowed = ("tool." + s.tool,) if s.kind == "tool" else _STEP_FUNCTIONS.get(s.kind, ())
        expect(
            name in allowed,
            f"step {s.seq} ({s.kind} {s.tool}) is function {s.function_id} {name!r}",
        )
    approvals = [
        p
        for s in t.steps
        if s.kind == "approval"
        and (p := payloads.read_as(s, payloads.ApprovalPayload)).event == "approved"
    ]
    expect(
        all(p.decided_by == "owner@lumen.test" for p in approvals),
        "gate steps name the approver",
    )
