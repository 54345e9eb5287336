"""The names DBOS keeps for us are compatibility data, pinned here.

A worker on the next release finds a parked run by the names its history recorded: the
workflow's, each step's, the topics it waits on, the patches it took. A rename strands
every run parked past it, however tidy the rename (docs/deploys.md). So the sets are
written out below, once, and a change to any of them fails here first — on purpose: the
way forward is ``DBOS.patch`` or a new application version, and then this file.
"""

from __future__ import annotations

import json
from pathlib import Path

from dbos._dbos import _get_or_create_dbos_registry
from django.conf import settings

from agent.runtime import RETRYABLE_STEPS, TOOL_STEP_PREFIX, Patch, StepName, tool_step
from agent.tools import REGISTRY
from deskhand.dbos import names
from deskhand.dbos.engine.workflow import LIMITED_STEPS

PARKED = Path(__file__).resolve().parents[1] / "fixtures" / "parked"


def test_the_step_names_a_run_records_are_the_pinned_ones():
    assert {s.value for s in StepName} == {
        "run.begin",
        "model",
        "ledger.lookup",
        "gate.request",
        "gate.read",
        "gate.resume",
        "clock",
        "customer.park",
        "customer.read",
        "customer.resume",
        "customer.repark",
        "run.finish",
        "run.fail",
        "bounds.check",
        "notes.record",
    }
    assert TOOL_STEP_PREFIX == "tool." and tool_step("issue_refund") == "tool.issue_refund"
    assert {s.value for s in RETRYABLE_STEPS} == {
        "run.begin",
        "bounds.check",
        "model",
        "gate.read",
        "ledger.lookup",
        "customer.read",
    }


def test_the_patch_names_are_the_pinned_ones():
    assert [p.value for p in Patch] == [
        "one-step-turns",
        "fence-in-opening-turn",
        "unknown-stop-reason-ends-run",
        "model-calls-rate-limited",
        "customer-reminder",
        "two-step-gate",
    ]


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
    assert set(LIMITED_STEPS) == {"model", "turn"}


def test_dbos_knows_the_workflows_and_steps_by_exactly_these_names():
    registered = set(_get_or_create_dbos_registry().workflow_info_map)
    assert registered == {
        names.RUN_WORKFLOW,
        names.LIMITED_CALL_WORKFLOW,
        names.INBOUND_WORKFLOW,
        names.CUSTOMER_LINE_WORKFLOW,
        *names.SCHEDULED_WORKFLOWS,
        # The scheduled workflows' decorated steps, as DBOS registers them.
        "<temp>.approvals.escalate_due",
        "<temp>.effects.merchants",
        "<temp>.effects.reconcile_merchant",
        "<temp>.privacy.retention",
        # The intake's steps (deskhand.dbos.engine.intake).
        "<temp>.mail.process",
        "<temp>.customer.route",
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


def test_every_name_a_parked_run_recorded_is_one_todays_code_still_answers_to():
    """The recorded fixtures come from earlier releases: each name in their histories is a
    step today's code records under that name, a tool it still has, a patch it still asks,
    or one of DBOS's own operations."""
    known = {s.value for s in StepName} | {names.LIMITED_CALL_WORKFLOW}
    known |= {f"DBOS.patch-{p.value}" for p in Patch}
    known |= {"DBOS.recv", "DBOS.sleep", "DBOS.getResult", "DBOS.send"}
    known |= {tool_step(name) for name in REGISTRY}
    recorded = {
        fixture.name: set(json.loads(fixture.read_text())["step_names"])
        for fixture in sorted(PARKED.glob("*.json"))
    }
    assert len(recorded) >= 4, recorded.keys()
    unknown = {name: sorted(steps - known) for name, steps in recorded.items() if steps - known}
    assert unknown == {}, unknown
