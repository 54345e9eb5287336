"""The step log records whatever came from outside, even bytes Postgres refuses."""

import pytest

from agent.record.steplog import log_step
from agent.run.services import run_create
from agent.steps import ToolPayload
from deskhand.domain.desk.models import Ticket
from tests.durability.helpers import user

pytestmark = pytest.mark.django_db


def test_a_nul_byte_in_a_tool_result_is_recorded_not_fatal(seeded):
    run = run_create(ticket=Ticket.objects.get(reference="NW-2"), user=user("owner@northwind.test"))
    step = log_step(
        run_id=str(run.id),
        seq=1,
        kind="tool",
        tool="get_order",
        result=ToolPayload(text="a\x00b"),
        arguments={"k\x00": "v"},
    )
    step.refresh_from_db()
    assert step.result["text"] == step.payload.text == "a\ufffdb"
    assert step.arguments == {"k\ufffd": "v"}


def test_a_re_executed_step_adds_its_cost_to_the_same_row(seeded):
    run = run_create(ticket=Ticket.objects.get(reference="NW-2"), user=user("owner@northwind.test"))
    for _ in range(2):
        log_step(
            run_id=str(run.id), seq=1, kind="model", input_tokens=10, output_tokens=1, cost_micros=7
        )
    run.refresh_from_db()
    step = run.step_log.get()
    assert (step.attempts, step.cost_micros, step.input_tokens) == (2, 14, 20)
    assert (run.steps, run.cost_micros, run.input_tokens) == (1, 14, 20)
