"""The names DBOS keeps for us are compatibility data, pinned here.

A worker on the next release finds a parked run by the names its history recorded: the
workflow's, each step's, the topics it waits on, the patches it took. A rename strands
every run parked past it, however tidy the rename (docs/deploys.md). So the sets are
written out below, once, and a change to any of them fails here first — on purpose: the
way forward is ``DBOS.patch`` or a new application version, and then this file.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from dbos._dbos import _get_or_create_dbos_registry
from django.conf import settings

from agent import steps
from agent.runtime import RETRYABLE_STEPS, TOOL_STEP_PREFIX, Patch, StepName, tool_step
from agent.tools import REGISTRY
from deskhand.engine.workflow import LIMITED_STEPS
from deskhand.infra.dbos import names

PARKED = Path(__file__).resolve().parents[1] / "fixtures" / "parked"


def test_the_step_names_a_run_records_are_the_pinned_ones():
    assert {s.value for s in StepName} == {
        "run.begin",
        "model",
        "gate.request",
        "gate.resume",
        "customer.park",
        "customer.read",
        "customer.resume",
        "customer.repark",
        "run.finish",
        "run.fail",
    }
    assert TOOL_STEP_PREFIX == "tool." and tool_step("issue_refund") == "tool.issue_refund"
    assert {s.value for s in RETRYABLE_STEPS} == {
        "run.begin",
        "model",
        "customer.read",
    }


def test_the_patch_names_are_the_pinned_ones():
    # None since the 0.2.0 baseline retired every older path (docs/deploys.md).
    assert [p.value for p in Patch] == []


def test_the_step_outputs_are_the_pinned_types():
    """What each step's checkpoint holds: its type's fields, in its JSON form, at version 1.
    A change here strands every run parked past that step, unless it ships under a new
    application version (docs/deploys.md)."""
    pinned = {
        steps.Begun: ["status", "prompt", "ticket", "fence_token", "next_seq"],
        steps.Bounds: ["reason", "detail", "steps_left"],
        steps.Wait: ["seconds", "reason", "until", "attempts", "waited"],
        steps.Reply: [
            "content",
            "stop_reason",
            "provider_error",
            "kind",
            "transient",
            "attempts",
            "wait",
        ],
        steps.Turn: ["notes", "next_seq", "bounds", "reply"],
        steps.Done: ["text", "ok", "replayed", "stop", "status", "detail"],
        steps.Opened: [
            "done",
            "closed",
            "refused",
            "mismatch",
            "approval_id",
            "status",
            "expires_at",
            "topic",
        ],
        steps.Verdict: [
            "verdict",
            "status",
            "reason",
            "detail",
            "expires_at",
            "changed",
            "decided_by",
        ],
        steps.Parked: ["closed", "topic", "until", "after", "asked_at", "call_id", "remind_at"],
        steps.Seen: ["answered", "passed", "remind"],
        steps.Reparked: ["closed", "until"],
        steps.Answered: ["verdict", "text", "detail", "status"],
        steps.Finished: ["status", "stop_reason"],
    }
    # What each step-log row holds (``Step.result``), at version 2 (``agent.steps.Row``).
    row = ["version", "late"]
    rows = {
        steps.ModelPayload: [
            *row,
            "content",
            "stop_reason",
            "provider",
            "model",
            "message_count",
            "prompt_sha256",
            "prompt_version",
            "replaced_ids",
        ],
        steps.ToolPayload: [
            *row,
            "text",
            "ledger_key",
            "approval_id",
            "adapter",
            "effect_state",
            "provider_ref",
            "provider_calls",
        ],
        steps.ApprovalPayload: [
            *row,
            "event",
            "approval_id",
            "status",
            "preview",
            "args_hash",
            "expires_at",
            "reused",
            "mismatch",
            "prior_effects",
            "facts",
            "waited_seconds",
            "decided_by",
            "decided_at",
            "channel",
            "reason",
            "approved_hash",
            "call_hash",
            "escalated_at",
            "detail",
            "changed",
            "executes_hash",
            "policy",
        ],
        steps.NotePayload: [*row, "notes"],
        steps.EndPayload: [
            *row,
            *["status", "stop_reason", "detail", "summary", "event", "by", "channel", "was"],
            "withdrawn",
        ],
        steps.UndoPayload: [*row, "undid_seq", "text", "by"],
    }
    types = {t for t in vars(steps).values() if isinstance(t, type) and t is not steps.Recorded}
    recorded = {t for t in types if issubclass(t, steps.Recorded) and t is not steps.Row}
    assert recorded == set(pinned) | set(rows)
    for kind, fields in [*pinned.items(), *rows.items()]:
        assert [f.name for f in dataclasses.fields(kind)] == fields, kind.__name__
        assert (2 if kind in rows else 1) == kind.VERSION, kind.__name__
    assert [f.name for f in dataclasses.fields(steps.Note)] == ["author", "body"]
    note = steps.Note("a@x", "Offer a reship.")
    notes = steps.NotePayload(notes=(note,))
    assert notes.to_json() == {
        "version": 2,
        "late": False,
        "notes": [{"author": "a@x", "body": "Offer a reship."}],
    }
    assert steps.NotePayload.from_json(json.loads(json.dumps(notes.to_json()))) == notes
    turn = steps.Turn((note,), 3, steps.Bounds(steps_left=4), steps.Reply(wait=steps.Wait(1.5)))
    assert turn.to_json()["notes"] == [{"author": "a@x", "body": "Offer a reship."}]
    assert turn.to_json()["reply"]["wait"] == {
        "v": 1,
        "seconds": 1.5,
        "reason": "",
        "until": "",
        "attempts": 0,
        "waited": 0.0,
    }
    assert steps.Turn.from_json(json.loads(json.dumps(turn.to_json()))) == turn


def test_the_workflow_schedule_topic_and_queue_names_are_the_pinned_ones():
    assert (names.RUN_WORKFLOW, names.LIMITED_CALL_WORKFLOW) == (
        "deskhand.run",
        "deskhand.limited_call",
    )
    assert names.SCHEDULED_WORKFLOWS == (
        "approvals.escalation_sweep",
        "effects.reconciliation",
        "privacy.retention_sweep",
    )
    assert (
        names.ESCALATION_SCHEDULE,
        names.RECONCILIATION_SCHEDULE,
        names.RETENTION_SCHEDULE,
    ) == ("approvals-escalation", "effects-reconciliation", "privacy-retention")
    assert names.approval_topic("0b8a") == "approval:0b8a"
    assert names.customer_topic(12) == "customer:12"
    assert names.STEER_TOPIC == "steer"
    assert names.limited_reply_topic("run-7") == "limited-reply:run-7"
    assert names.model_queue_name("anthropic") == "model-anthropic"
    assert settings.DESKHAND_QUEUE == "deskhand-runs"
    assert names.QUEUE_CHANNEL == "deskhand_queue"
    # A limited call's child is handed a key for the step it runs, stored in its input.
    assert set(LIMITED_STEPS) == {"turn"}


def test_dbos_knows_the_workflows_and_steps_by_exactly_these_names():
    registered = set(_get_or_create_dbos_registry().workflow_info_map)
    assert registered == {
        names.RUN_WORKFLOW,
        names.LIMITED_CALL_WORKFLOW,
        names.INBOUND_WORKFLOW,
        names.CUSTOMER_LINE_WORKFLOW,
        names.PAYMENT_EVENT_WORKFLOW,
        names.SHOPIFY_WEBHOOK_WORKFLOW,
        *names.SCHEDULED_WORKFLOWS,
        # The scheduled workflows' decorated steps, as DBOS registers them.
        "<temp>.approvals.escalate_due",
        "<temp>.effects.merchants",
        "<temp>.effects.reconcile_merchant",
        "<temp>.privacy.retention",
        # The intake's steps (deskhand.engine.intake).
        "<temp>.mail.process",
        "<temp>.customer.route",
        # A payment provider's stored webhook event (deskhand.engine.payment_events).
        "<temp>.payments.event",
        # A Shopify webhook delivery (deskhand.engine.shopify_webhooks).
        "<temp>.shopify.webhook",
    }


def test_the_intake_names_are_the_pinned_ones():
    # A message stored before a deploy is processed after it under these names and ids.
    assert (names.INBOUND_WORKFLOW, names.CUSTOMER_LINE_WORKFLOW, names.INTAKE_QUEUE) == (
        "deskhand.inbound",
        "deskhand.customer_line",
        "deskhand-intake",
    )
    assert names.inbound_workflow_id(7) == "inbound-7"
    assert names.inbound_workflow_id(7, 2) == "inbound-7-r2"
    assert names.line_workflow_id(9) == "line-9"
    assert names.PAYMENT_EVENT_WORKFLOW == "deskhand.payment_event"
    assert names.payment_event_workflow_id(4) == "payment-event-4"
    assert names.SHOPIFY_WEBHOOK_WORKFLOW == "deskhand.shopify_webhook"
    assert names.shopify_webhook_workflow_id(4) == "shopify-webhook-4"


def test_every_name_a_parked_run_recorded_is_one_todays_code_still_answers_to():
    """The recorded fixtures this code replays: each name in their histories is a step today's
    code records under that name, a tool it still has, a patch it still asks, or one of DBOS's
    own operations. (The fixture of the release before the 0.2.0 baseline is finished by a
    worker of its own version, on its own code: test_upgrade.py.)"""
    known = {s.value for s in StepName} | {names.LIMITED_CALL_WORKFLOW}
    known |= {f"DBOS.patch-{p.value}" for p in Patch}
    known |= {"DBOS.recv", "DBOS.sleep", "DBOS.getResult", "DBOS.send"}
    known |= {tool_step(name) for name in REGISTRY}
    recorded = {
        fixture.name: set(json.loads(fixture.read_text())["step_names"])
        for fixture in sorted(PARKED.glob("*.json"))
        if fixture.name != "nw1_at_gate_0.1.0.json"
    }
    assert recorded, "no recorded fixture"
    unknown = {name: sorted(steps - known) for name, steps in recorded.items() if steps - known}
    assert unknown == {}, unknown
