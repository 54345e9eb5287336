"""bounds_check, one cap at a time: which cap, in what order, on whose calendar."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import override_settings
from django.utils import timezone

from agent.models import Run
from agent.models.payloads import StepKind
from agent.record.steplog import log_step
from agent.run.bounds import CHECKS, bounds_check, day_start, refund_precheck
from agent.run.services import run_create
from agent.steps import ApprovalPayload
from deskhand.domain.desk.models import Merchant, Order, Refund, Ticket

pytestmark = pytest.mark.django_db


def _run(seeded_ref: str = "NW-2", **fields) -> Run:
    ticket = Ticket.objects.get(reference=seeded_ref)
    owner = get_user_model().objects.get(email=f"owner@{ticket.merchant.slug}.test")
    run = run_create(ticket=ticket, user=owner)
    if fields:
        Run.objects.filter(pk=run.pk).update(**fields)
    return run


def _model(run: Run, seq: int, cost: int = 1000, tokens: int = 1000) -> None:
    log_step(
        run_id=str(run.pk), seq=seq, kind=StepKind.MODEL, cost_micros=cost, input_tokens=tokens
    )


def _tool(run: Run, seq: int, tool: str, args: dict, ok: bool = True) -> None:
    log_step(run_id=str(run.pk), seq=seq, kind=StepKind.TOOL, tool=tool, arguments=args, ok=ok)


def test_a_fresh_run_is_inside_every_bound(seeded) -> None:
    assert bounds_check(str(_run().pk)) is None


def test_every_cap_has_its_own_stop_reason(seeded) -> None:
    now = timezone.now()
    cases = {
        "step_cap": dict(max_steps=1),
        "token_cap": dict(max_tokens=500),
        "spend_cap": dict(max_spend_micros=900),
        "deadline": dict(deadline_at=now - dt.timedelta(seconds=1)),
    }
    seen = set()
    for reason, fields in cases.items():
        run = _run(**fields)
        _model(run, 1)
        hit = bounds_check(str(run.pk))
        assert hit is not None and hit["reason"] == reason, (reason, hit)
        assert hit["detail"]
        seen.add(hit["reason"])
        Run.objects.filter(pk=run.pk).update(status="succeeded")
    assert len(seen) == len(cases)
    assert [c.__name__ for c in CHECKS][-1] == "check_loop"


def test_the_steps_cap_is_checked_first(seeded) -> None:
    run = _run(
        max_steps=1,
        max_tokens=1,
        max_spend_micros=1,
        deadline_at=timezone.now() - dt.timedelta(days=1),
    )
    _model(run, 1)
    assert bounds_check(str(run.pk))["reason"] == "step_cap"


def test_waiting_for_a_person_is_handed_back_to_the_deadline(seeded) -> None:
    run = _run(deadline_at=timezone.now() - dt.timedelta(seconds=30), waited_seconds=60)
    assert bounds_check(str(run.pk)) is None
    Run.objects.filter(pk=run.pk).update(waited_seconds=10)
    assert bounds_check(str(run.pk))["reason"] == "deadline"


def test_the_merchant_day_is_the_merchants_calendar_day(seeded) -> None:
    northwind = Merchant.objects.get(slug="northwind")  # America/New_York
    # 10:00 UTC is 05:00 or 06:00 in New York: the New York day started at 04:00 or 05:00 UTC.
    now = dt.datetime(2026, 3, 11, 10, 0, tzinfo=dt.UTC)
    ny_midnight = dt.datetime(2026, 3, 11, tzinfo=ZoneInfo(northwind.timezone))
    assert day_start(now, northwind.timezone) == ny_midnight
    spent = _run("NW-4")
    _model(spent, 1, cost=northwind.daily_spend_cap_micros)
    Run.objects.filter(pk=spent.pk).update(
        status="succeeded", created_at=ny_midnight - dt.timedelta(minutes=5)
    )
    run = _run()
    # Five minutes before New York's midnight is the same UTC day, but yesterday for Northwind.
    assert bounds_check(str(run.pk), now.isoformat()) is None
    Run.objects.filter(pk=spent.pk).update(created_at=ny_midnight + dt.timedelta(minutes=5))
    hit = bounds_check(str(run.pk), now.isoformat())
    assert hit is not None and hit["reason"] == "merchant_daily_spend"


def test_another_merchants_spend_is_not_this_merchants(seeded) -> None:
    lumen = _run("LU-1")
    _model(lumen, 1, cost=Merchant.objects.get(slug="northwind").daily_spend_cap_micros)
    assert bounds_check(str(_run().pk)) is None


def test_the_platform_day_is_utc_and_counts_every_merchant(seeded) -> None:
    lumen = _run("LU-1")
    _model(lumen, 1, cost=3000)
    run = _run()
    _model(run, 1, cost=2000)
    with override_settings(DESKHAND_PLATFORM_DAILY_SPEND_MICROS=5000):
        hit = bounds_check(str(run.pk))
    assert hit is not None and hit["reason"] == "platform_daily_spend"
    with override_settings(DESKHAND_PLATFORM_DAILY_SPEND_MICROS=5001):
        assert bounds_check(str(run.pk)) is None


def test_a_loop_is_the_same_call_three_times_failed_or_not(seeded) -> None:
    run = _run()
    _tool(run, 1, "get_order", {"reference": "NW-9"}, ok=False)
    _tool(run, 2, "get_order", {"reference": "NW-9"}, ok=False)
    _tool(run, 3, "get_order", {"reference": "NW-8"}, ok=False)
    assert bounds_check(str(run.pk)) is None
    _tool(run, 4, "get_order", {"reference": "NW-9"})
    hit = bounds_check(str(run.pk))
    assert hit == {
        "reason": "loop_detected",
        "detail": "called get_order with identical arguments 3 times",
    }


def test_argument_order_does_not_hide_a_loop(seeded) -> None:
    run = _run()
    for seq, args in enumerate(
        [{"reference": "NW-1", "status": "open"}, {"status": "open", "reference": "NW-1"}] * 2, 1
    ):
        _tool(run, seq, "set_ticket_status", args)
    assert bounds_check(str(run.pk))["reason"] == "loop_detected"


def test_a_declined_call_asked_three_times_is_a_loop_an_approved_one_counts_once(seeded) -> None:
    run = _run("NW-1")
    args = {"order_reference": "NW-1042", "amount_cents": 1900, "reason": "again"}
    seq = 0
    for event in ("requested", "approved"):
        seq += 1
        log_step(
            run_id=str(run.pk),
            seq=seq,
            kind=StepKind.APPROVAL,
            tool="issue_refund",
            arguments=args,
            result=ApprovalPayload(event=event),
        )
    seq += 1
    _tool(run, seq, "issue_refund", args)
    for _ in range(2):
        for event in ("requested", "denied"):
            seq += 1
            log_step(
                run_id=str(run.pk),
                seq=seq,
                kind=StepKind.APPROVAL,
                tool="issue_refund",
                arguments=args,
                result=ApprovalPayload(event=event),
            )
    assert bounds_check(str(run.pk))["reason"] == "loop_detected"  # 1 executed + 2 declined


def test_bounds_are_snapshotted_a_settings_change_does_not_widen_a_run(seeded) -> None:
    run = _run(max_steps=2)
    _model(run, 1)
    _tool(run, 2, "get_ticket", {"reference": "NW-2"})
    with override_settings(DESKHAND_BOUNDS={**settings.DESKHAND_BOUNDS, "max_steps": 1000}):
        assert bounds_check(str(run.pk))["reason"] == "step_cap"


def test_the_refund_precheck_names_the_ceiling_a_refund_would_pass(seeded) -> None:
    run = _run("NW-1", max_refund_cents=1000)
    ask = {"order_reference": "NW-1042", "amount_cents": 3800, "reason": "stale"}
    assert "refund ceiling" in refund_precheck(str(run.pk), ask)
    Run.objects.filter(pk=run.pk).update(max_refund_cents=25_000)
    assert refund_precheck(str(run.pk), ask) is None
    order = Order.objects.get(reference="NW-1042")
    Refund.objects.create(
        merchant_id=order.merchant_id, order=order, amount_cents=4000, reason="earlier"
    )
    assert "left to refund" in refund_precheck(str(run.pk), ask)
    Refund.objects.filter(order=order).delete()
    Merchant.objects.filter(slug="northwind").update(daily_refund_ceiling_cents=3000)
    assert "daily refund ceiling" in refund_precheck(str(run.pk), ask)
    # Not its business: validation speaks for itself.
    assert refund_precheck(str(run.pk), {**ask, "amount_cents": "lots"}) is None


def test_the_refund_precheck_refuses_an_order_the_refund_could_never_reach(seeded) -> None:
    """Another merchant's order reads like no order at all; another customer's is named; the
    reference is matched the way the refund itself matches it (case, spaces)."""
    run = _run("NW-1", max_refund_cents=25_000)
    ask = {"order_reference": "NW-1042", "amount_cents": 100, "reason": "stale"}
    assert refund_precheck(str(run.pk), {**ask, "order_reference": " nw-1042 "}) is None
    other_tenant = refund_precheck(str(run.pk), {**ask, "order_reference": "LU-2201"})
    nowhere = refund_precheck(str(run.pk), {**ask, "order_reference": "ZZ-0000"})
    assert other_tenant == "cannot refund 1.00 USD: no order 'LU-2201' for this merchant"
    assert nowhere == other_tenant.replace("LU-2201", "ZZ-0000")
    other_customer = (
        Order.objects.filter(merchant__slug="northwind")
        .exclude(customer=run.ticket.customer)
        .first()
    )
    assert "does not belong to the customer on this ticket" in refund_precheck(
        str(run.pk), {**ask, "order_reference": other_customer.reference}
    )


def test_the_refund_precheck_counts_the_ceiling_across_the_tickets_runs(seeded) -> None:
    """As the refund itself does: a second run on a ticket does not start with a fresh ceiling."""
    first = _run("NW-1")
    order = Order.objects.get(reference="NW-1042")
    Refund.objects.create(
        merchant_id=order.merchant_id, order=order, amount_cents=1500, reason="x", run=first
    )
    Run.objects.filter(pk=first.pk).update(status="succeeded")
    second = _run("NW-1", max_refund_cents=2000)
    ask = {"order_reference": "NW-1042", "amount_cents": 1000, "reason": "stale"}
    why = refund_precheck(str(second.pk), ask)
    assert why is not None and "refund ceiling is 20.00 USD, 5.00 USD is left" in why
    assert refund_precheck(str(second.pk), {**ask, "amount_cents": 500}) is None
