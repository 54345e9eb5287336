"""``replay RUN_ID --fork-from N``: a fork replays the original up to N and never repeats its effects.

Effects before N are copied checkpoints; an irreversible call re-derived after N
is answered by the ledger (the same effect: same identity, same arguments) or,
if it differs, put to a person again with what the lineage already did on the card.
"""

from __future__ import annotations

import json

import pytest

from agent.models import Run, Step
from agent.models.ledger import LedgerEntry
from agent.providers.policy import PolicyProvider
from agent.providers.scripted import call, say
from agent.replay import rebuild, timeline
from agent.run.selectors import effects_summary
from agent.run.services import run_create
from agent.run.steering import run_steer
from approvals.models import Approval, AuditEvent
from deskhand.domain.desk.models import OutboundEmail, Refund, Ticket
from deskhand.infra.dbos.client import client
from tests.consent.conftest import refund, settle
from tests.durability.helpers import assert_every_effect_was_approved, decide, start, user
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.replay.conftest import replay_cmd

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "owner@northwind.test"


def fork(run: Run, n: int) -> Run:
    code, out = replay_cmd(
        str(run.id), "--fork-from", str(n), "--as", OWNER, "--wait", "--timeout", "60"
    )
    assert code == 0, out
    fork_id = out.splitlines()[0].strip()
    return wait_terminal(fork_id)


def seq_of(run: Run, **filters: object) -> int:
    # The refund's gate, not the reply's that follows it (approved by the owner's rule).
    if filters.get("kind") == "approval":
        filters.setdefault("tool", "issue_refund")
    return Step.objects.get(run=run, **filters).seq


def test_forks_never_pay_twice_and_a_different_amount_under_the_same_call_is_refused(
    dbos_executor, provide, monkeypatch
):
    original = wait_parked(str(start("NW-1", OWNER).id))
    decide(original, OWNER)
    original = wait_terminal(str(original.id))
    assert original.status == "succeeded"
    asked = seq_of(original, kind="model", result__content__0__name="issue_refund")
    requested = seq_of(original, kind="approval", result__event="requested")
    paid = seq_of(original, kind="tool", tool="issue_refund")
    after = paid + 1
    assert Step.objects.get(run=original, seq=after).kind == "model"
    approvals, emails = Approval.objects.count(), OutboundEmail.objects.count()

    # 1. From the model step after the refund: the refund is a copied checkpoint.
    later = fork(original, after)
    assert (later.status, later.forked_from_id, later.fork_step) == (
        "succeeded",
        original.id,
        after,
    )
    assert min(later.step_log.values_list("seq", flat=True)) == after  # nothing before N was re-run
    wf = client().list_workflows(workflow_ids=[str(later.id)], load_input=False, load_output=False)[
        0
    ]
    assert wf.forked_from == str(original.id)
    assert AuditEvent.objects.filter(action="run.fork", run=later).exists()
    _, listing = replay_cmd(str(later.id))
    assert f"forked from run {original.id} at step {after}" in listing
    assert any(
        ln.split()[:3] == [f"^{paid}", "tool", "issue_refund"] for ln in listing.splitlines()
    )
    same = [
        json.loads(replay_cmd(str(r.id), "--at", str(after), "--json")[1])["messages"]
        for r in (original, later)
    ]
    assert same[0] == same[1]

    # 2. From the model step that asked for the refund: re-derived with the same id and arguments,
    #    the ledger answers; no person is asked; the model reads the original's result.
    recording = provide(PolicyProvider())
    again = fork(original, asked)
    assert again.status == "succeeded", again.summary
    assert again.approvals.count() == 0
    assert not LedgerEntry.objects.filter(run=again).exists()  # the fork itself moved no money
    assert "No money moved" in effects_summary(str(again.id))
    _, listing = replay_cmd(str(again.id))
    ledger_lines = [
        ln
        for ln in listing.splitlines()
        if " ledger " in ln and "answered from the ledger" in ln and "issue_refund" in ln
    ]
    assert len(ledger_lines) == 1 and "Refunded 38.00 USD" in ledger_lines[0]
    fork_model_steps = list(again.step_log.filter(kind="model").order_by("seq"))
    assert len(fork_model_steps) == len(recording.seen)
    for step, sent in zip(fork_model_steps, recording.seen, strict=True):
        view = json.loads(replay_cmd(str(again.id), "--at", str(step.seq), "--json")[1])
        assert view["messages"] == sent, f"step {step.seq}"
        assert rebuild.at(timeline.load(again), step.seq).warnings == []
    answered = [
        b
        for m in recording.seen[1]
        for b in m["content"]
        if b.get("tool_use_id") == "toolu_scripted_3_0"
    ]
    assert (
        "Refunded 38.00 USD against NW-1042" in answered[0]["content"]
        and not answered[0]["is_error"]
    )

    # 3. From the approval request: the request asks the ledger first, so a call performed
    #    since is answered, not asked again.
    provide(PolicyProvider())
    gate = fork(original, requested)
    assert gate.status == "succeeded" and gate.approvals.count() == 0

    # 4. Same call id, a different amount (the 10.00 left; more would be refused before anyone
    #    is asked): another refund on the order, so a person is asked, and the card shows the
    #    refund already made; declined, nothing moves.
    provide(
        [
            [],
            [],
            [],
            [
                call(
                    "issue_refund",
                    order_reference="NW-1042",
                    amount_cents=1000,
                    reason="stale beans",
                )
            ],
            [say("done")],
        ]
    )
    code, out = replay_cmd(str(original.id), "--fork-from", str(asked), "--as", OWNER)
    assert code == 0, out
    greedy = wait_parked(out.splitlines()[0].strip())
    card = greedy.approvals.get()
    assert [p["what"] for p in card.prior_effects] == ["Refunded 38.00 USD against NW-1042."]
    decide(greedy, OWNER, approve=False, reason="Already refunded.")
    greedy = wait_terminal(str(greedy.id))
    assert (greedy.status, greedy.stop_reason) == ("succeeded", "end_turn"), greedy.summary
    assert "Declined by a person: Refund 10.00 USD" in greedy.summary

    assert [r.amount_cents for r in Refund.objects.all()] == [3800]
    assert LedgerEntry.objects.filter(tool="issue_refund").count() == 1
    assert (Approval.objects.count(), OutboundEmail.objects.count()) == (approvals + 1, emails)
    assert_every_effect_was_approved()

    # Where a fork may not start, and who may not start one: one sentence each.
    final = seq_of(original, kind="final")
    decided = seq_of(original, kind="approval", result__event="approved")
    for n, words in [
        (decided, "settles an approval that belongs to the original run"),
        (paid, "is an approved irreversible effect of the original run"),
        (final, "is where the run ended"),
        (999, f"has no step 999; its steps are 1 to {final}"),
    ]:
        code, out = replay_cmd(str(original.id), "--fork-from", str(n), "--as", OWNER)
        assert code != 0 and words in out, out
    code, out = replay_cmd(
        str(original.id), "--fork-from", str(after), "--as", "viewer@northwind.test"
    )
    assert code != 0 and "is a viewer at Northwind" in out
    code, out = replay_cmd(str(original.id), "--fork-from", str(after), "--as", "owner@lumen.test")
    assert code != 0 and out == f"no run {original.id}."
    code, out = replay_cmd(str(original.id), "--fork-from", str(after))
    assert code != 0 and "--as EMAIL" in out

    # A DBOS fork that raises leaves a truthful, terminal fork and a free ticket.
    def refuse(*args: object, **kwargs: object) -> None:
        raise RuntimeError("system database unavailable")

    monkeypatch.setattr(type(client()), "fork_workflow", refuse)
    code, out = replay_cmd(str(original.id), "--fork-from", str(after), "--as", OWNER)
    assert (
        code != 0
        and "could not be started: could not fork: RuntimeError: system database unavailable" in out
    )
    lost = Run.objects.get(forked_from=original, stop_reason="enqueue_failed")
    assert lost.status == "failed"
    assert not client().list_workflows(workflow_ids=[str(lost.id)])
    monkeypatch.undo()

    blocker = run_create(ticket=Ticket.objects.get(reference="NW-1"), user=user(OWNER))
    code, out = replay_cmd(str(original.id), "--fork-from", str(after), "--as", OWNER)
    assert code != 0 and f"already has an open run ({blocker.id}, queued)" in out
    Run.objects.filter(pk=blocker.pk).update(status="cancelled")
    assert Run.objects.filter(forked_from=original).count() == 5


def test_a_fork_from_the_model_step_after_a_note_sends_the_note_again(dbos_executor, provide):
    provide([[refund(3800)], [say("Refunded; the replacement ships Monday.")]])
    original = settle(start("NW-1", OWNER))
    assert original.status == "awaiting_approval"
    run_steer(run=original, user=user(OWNER), body="Mention Monday's reship.")
    decide(original, OWNER)
    original = wait_terminal(str(original.id))
    assert original.status == "succeeded", original.summary
    note = Step.objects.get(run=original, kind="note")
    after = Step.objects.get(run=original, seq=note.seq + 1)
    # One step took the note and made the call: both rows name the same checkpoint.
    assert after.kind == "model" and after.function_id == note.function_id

    recording = provide([[say("Refunded; the replacement ships Monday.")]])
    forked = fork(original, after.seq)
    assert forked.status == "succeeded", forked.summary
    (sent,) = recording.seen
    assert "Mention Monday" in json.dumps(sent[-1])
    # The fork's own log starts at its fork point: the note row stays the original's.
    assert min(forked.step_log.values_list("seq", flat=True)) == after.seq
    assert not forked.step_log.filter(kind="note").exists()
    views = [
        json.loads(replay_cmd(str(r.id), "--at", str(after.seq), "--json")[1])["messages"]
        for r in (original, forked)
    ]
    assert views[0] == views[1] == sent
