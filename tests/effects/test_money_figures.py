"""Figures that tell the truth about money: moved, in flight, not moved — never one for another.

A refund at a payment provider that has not answered is neither money moved nor money not
moved. Whole runs through real DBOS against the payments double, the outcome read as
``decide --json`` prints it, then settled by the reconciliation schedule
(``effects.reconciliation``) from what the provider says.
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client

from agent.models import Run
from agent.run.selectors import run_outcome
from deskhand.domain.desk.models import Refund
from deskhand.infra.dbos.names import RECONCILIATION_SCHEDULE
from tests.durability.helpers import pending_approval, start, user
from tests.fixtures.dbos import clear_of_its_firing, trigger_now, wait_parked

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "owner@northwind.test"


def approve_with_the_provider_unsure() -> dict:
    """NW-1's refund of 38.00 approved with ``decide --wait --json`` while the provider never
    confirms it; the outcome that command prints."""
    run = wait_parked(str(start("NW-1", OWNER).id))
    out = io.StringIO()
    call_command(
        "decide",
        str(pending_approval(run).pk),
        "approve",
        "--as",
        OWNER,
        "--wait",
        "--json",
        stdout=out,
    )
    return json.loads(out.getvalue().strip().splitlines()[-1])


def assert_in_flight_everywhere(out: dict) -> Run:
    assert out["status"] in ("succeeded", "failed", "exhausted"), out
    assert out["refunds_cents"] == 0  # nothing is confirmed moved
    assert out["refunds_in_flight_cents"] == 3800
    assert out["refunds_not_moved_cents"] == 0  # nor is it known not to have moved
    summary = out["summary"]
    assert "In flight, not yet confirmed by payments: Refund 38.00 USD" in summary
    # The agent's own words say the same: never "no money was moved" beside a refund in flight.
    assert "No money was moved" not in summary and "No money moved" not in summary
    assert "The refund of 38.00 USD against NW-1042 is in flight" in summary
    assert "No money is confirmed moved yet." in summary
    run = Run.objects.get(pk=out["run_id"])

    web = Client()
    web.force_login(user(OWNER))
    page = web.get(f"/runs/{run.pk}/").content.decode()
    assert '<dd id="run-refunded">$0.00' in page
    assert '<dd id="run-in-flight">$38.00' in page
    assert "$38.00 in flight" in web.get("/runs/").content.decode()
    assert "+ $38.00 in flight" in web.get("/tickets/NW-1/").content.decode()
    assert "$38.00 in flight" in web.get("/usage/").content.decode()
    return run


def test_a_refund_the_provider_never_made_is_in_flight_then_not_moved(
    dbos_executor, northwind_pays_at_the_provider, monkeypatch
):
    api = northwind_pays_at_the_provider
    monkeypatch.setenv("DESKHAND_EFFECT_ATTEMPTS", "2")
    api.server_error(times=2)  # the provider is down for the whole budget: nothing is made
    clear_of_its_firing(RECONCILIATION_SCHEDULE, need_s=90)
    run = assert_in_flight_everywhere(approve_with_the_provider_unsure())

    # Reconciliation looks the claim up (never re-sends). Long after it was sent, a refund
    # the provider does not list was never made.
    monkeypatch.setenv("DESKHAND_EFFECT_LOOKUP_GRACE_SECONDS", "0")
    trigger_now(RECONCILIATION_SCHEDULE)
    assert api.refunds == [] and not Refund.objects.exists()
    run.refresh_from_db()
    after = run_outcome(run)
    assert (
        after["refunds_cents"],
        after["refunds_in_flight_cents"],
        after["refunds_not_moved_cents"],
    ) == (0, 0, 3800)
    assert "Settled later: Not done: Refund 38.00 USD" in run.summary
    page = _owner().get(f"/runs/{run.pk}/").content.decode()
    assert '<dd id="run-not-moved">$38.00' in page and 'id="run-in-flight"' not in page


def test_a_refund_the_provider_made_but_never_confirmed_is_in_flight_then_moved(
    dbos_executor, northwind_pays_at_the_provider, monkeypatch
):
    api = northwind_pays_at_the_provider
    monkeypatch.setenv("DESKHAND_EFFECT_ATTEMPTS", "2")
    api.lose_response()  # the provider makes it, and its answer never arrives;
    api.server_error()  # the retry under the same key is answered with a 500: unconfirmed
    clear_of_its_firing(RECONCILIATION_SCHEDULE, need_s=90)
    run = assert_in_flight_everywhere(approve_with_the_provider_unsure())
    assert len(api.refunds) == 1  # it did move — nobody here knows yet

    monkeypatch.setenv("DESKHAND_EFFECT_LOOKUP_GRACE_SECONDS", "0")  # a claim nobody works on
    trigger_now(RECONCILIATION_SCHEDULE)
    run.refresh_from_db()
    after = run_outcome(run)
    assert (
        after["refunds_cents"],
        after["refunds_in_flight_cents"],
        after["refunds_not_moved_cents"],
    ) == (3800, 0, 0)
    assert "Settled later: Refunded 38.00 USD against NW-1042 (confirmed by payments" in (
        run.summary
    )
    page = _owner().get(f"/runs/{run.pk}/").content.decode()
    assert '<dd id="run-refunded">$38.00' in page and 'id="run-in-flight"' not in page
    assert "$38.00 refunded" in _owner().get("/runs/").content.decode()


def test_the_text_the_keyless_model_reads_as_in_flight_is_the_text_the_provider_adapter_writes():
    """The policy reads "in flight" from the result's words, as a model would: the words it
    looks for must be the ones the payments adapter writes (agent.effects.payments)."""
    import inspect

    from agent.effects import payments
    from agent.providers.policy_reading import IN_FLIGHT_PREFIX

    assert f'f"{IN_FLIGHT_PREFIX} of {{money}} against "' in inspect.getsource(payments)


def _owner() -> Client:
    web = Client()
    web.force_login(user(OWNER))
    return web
