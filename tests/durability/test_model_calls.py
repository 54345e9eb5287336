"""Model calls are counted at the provider: a resumed run never repeats a completed one.

A real worker subprocess talks to a local server speaking the Anthropic
Messages API (through the real ``anthropic`` SDK); the server counts requests.
"""

from __future__ import annotations

import pytest
from django.db.models import Sum

from agent.models import Step
from agent.run.services import run_start
from deskhand.domain.desk.models import Refund, Ticket
from tests.durability.helpers import assert_accounting_matches, decide, user
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.support.fake_anthropic import FakeAnthropic

pytestmark = [pytest.mark.crash, pytest.mark.django_db(transaction=True)]

MODEL = ("anthropic", "claude-haiku-4-5")


def _start_nw1():
    return run_start(
        ticket=Ticket.objects.get(reference="NW-1"),
        user=user("owner@northwind.test"),
        provider=MODEL,
    )


@pytest.mark.slow
def test_a_resumed_run_never_repeats_a_completed_model_call(worker_process):
    with FakeAnthropic() as api:
        env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.url}
        worker = worker_process("model-calls", env=env).start(faults="after_step:tool.get_order")
        run = _start_nw1()
        assert worker.wait_exit(60) == -9
        calls_before_crash = api.count
        assert calls_before_crash == Step.objects.filter(run=run, kind="model").count() == 2

        worker.start(faults="")
        run = wait_parked(str(run.id))
        decide(run, "owner@northwind.test")
        run = wait_terminal(str(run.id))

        model_steps = Step.objects.filter(run=run, kind="model")
        assert run.status == "succeeded"
        assert api.count == model_steps.count()  # not one call more than the turns taken
        assert all(s.attempts == 1 for s in model_steps)
        assert Refund.objects.get().amount_cents == 3800
        assert_accounting_matches(run)


def test_a_model_call_lost_before_its_checkpoint_is_paid_again_and_both_are_counted(worker_process):
    with FakeAnthropic(input_tokens=1000, output_tokens=100) as api:
        env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": api.url}
        worker = worker_process("model-retry", env=env).start(faults="after_step:model:2")
        run = _start_nw1()
        assert worker.wait_exit(60) == -9
        worker.start(faults="")
        run = wait_parked(str(run.id))
        decide(run, "owner@northwind.test")
        run = wait_terminal(str(run.id))

        model_steps = Step.objects.filter(run=run, kind="model")
        retried = model_steps.get(seq=3)
        assert retried.attempts == 2
        assert api.count == model_steps.count() + 1  # the one call whose checkpoint was lost
        # Its cost was added, not overwritten: the log and the run both carry both calls.
        assert retried.input_tokens == 2000
        assert model_steps.aggregate(t=Sum("input_tokens"))["t"] == api.count * 1000
        assert_accounting_matches(run)
