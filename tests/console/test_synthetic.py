"""``synthetic_generate``: realistic volume, fast, and internally consistent."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models import Count, Q, Sum

from agent.models import OPEN_STATUSES, Run, Step
from agent.models.ledger import LedgerEntry
from approvals.models import Approval
from deskhand.domain.desk.models import Refund
from tests.devtools.synthetic import SyntheticError, synthetic_generate

NOW = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)


def test_it_refuses_without_merchants(db):
    with pytest.raises(SyntheticError):
        synthetic_generate(10)


def test_runs_are_finished_spread_over_merchants_and_add_up(seeded):
    counts = synthetic_generate(2_000, seed=7)
    assert counts["runs"] == Run.objects.count() == 2_000
    assert not Run.objects.filter(status__in=OPEN_STATUSES).exists()
    per_merchant = dict(Run.objects.values_list("merchant__slug").annotate(n=Count("id")))
    assert per_merchant == {"northwind": 1_000, "lumen": 1_000}
    # Totals equal the sums over the step log, for every run.
    mismatched = (
        Run.objects.annotate(
            n=Count("step_log"), c=Sum("step_log__cost_micros"), i=Sum("step_log__input_tokens")
        )
        .exclude(steps=models_F("n"), cost_micros=models_F("c"), input_tokens=models_F("i"))
        .count()
    )
    assert mismatched == 0
    assert Approval.objects.exists() and LedgerEntry.objects.exists() and Refund.objects.exists()
    # Every ledger entry was approved with the same hash; every refund has its ledger entry; the same tenant.
    assert not LedgerEntry.objects.exclude(approval__status="approved").exists()
    assert not LedgerEntry.objects.exclude(approval__args_hash=models_F("args_hash")).exists()
    assert not Refund.objects.filter(ledger_entry__isnull=True).exists()
    assert not Refund.objects.exclude(merchant=models_F("order__merchant")).exists()
    assert not Run.objects.exclude(merchant=models_F("ticket__merchant")).exists()
    # Never today: the demo's daily caps stay the demo's.
    newest = Run.objects.order_by("-created_at").first()
    assert Step.objects.filter(run=newest).order_by("seq").last().kind in (
        "final",
        "bound",
        "error",
    )
    assert not Step.objects.filter(~Q(run__created_at__lte=models_F("created_at"))).exists()


def test_without_steps_the_runs_are_the_same_runs_and_no_step_row_is_written(seeded):
    from django.db import transaction

    def runs() -> list[tuple]:
        return list(
            Run.objects.order_by("created_at").values_list(
                "status", "steps", "cost_micros", "input_tokens", "created_at"
            )
        )

    with transaction.atomic():
        full = synthetic_generate(300, seed=9, now=NOW)
        with_steps = runs()
        transaction.set_rollback(True)
    lean = synthetic_generate(300, seed=9, now=NOW, steps=False)
    assert runs() == with_steps and full["steps"] > 300
    assert lean["steps"] == 0 and not Step.objects.exists()
    assert lean["approvals"] == full["approvals"] and lean["refunds"] == full["refunds"]


def models_F(name: str):
    from django.db.models import F

    return F(name)
