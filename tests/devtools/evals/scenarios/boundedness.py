"""Boundedness: every run terminates; every cap ends it ``exhausted`` with its own reason.

Each cap gets a scenario that hits it and checks the run stopped *before* the
next model call, named the cap, and still wrote a summary of what it did. The
money ceilings are different: a refusal is an error the model reads, and the
run goes on.
"""

from __future__ import annotations

import datetime as dt
import time

from django.test.utils import override_settings
from django.utils import timezone

from agent.models import Run
from agent.providers.policy import PolicyProvider
from agent.providers.scripted import ScriptedProvider, call, say
from agent.run.bounds import day_start
from deskhand.domain.desk.models import Refund
from tests.devtools.evals.harness import APPROVE, LEAVE, Harness, deny, expect, expect_eq
from tests.devtools.evals.scenarios import scenario
from tests.devtools.evals.trajectory import Trajectory


def _stopped(t: Trajectory, reason: str) -> None:
    expect_eq((t.status, t.stop_reason), ("exhausted", reason), "terminal state")
    expect(t.summary.startswith(f"Stopped: {reason}"), f"summary names the cap: {t.summary[:80]!r}")
    expect("Effects:" in t.summary, "summary reports the effects")
    expect_eq(t.path[-1], f"end:exhausted/{reason}", "last step")
    expect_eq(len(t.terminal_steps), 1, "terminal steps")


def _searches(n: int) -> ScriptedProvider:
    return ScriptedProvider([[call("search_kb", query=f"question {i}")] for i in range(n)])


def _metered(cost: int = 1000, tokens: tuple[int, int] = (1200, 150)) -> PolicyProvider:
    return PolicyProvider(input_tokens=tokens[0], output_tokens=tokens[1], cost_micros=cost)


@scenario("boundedness", "a run that will not stop is stopped at its step cap")
def the_step_cap(h: Harness) -> None:
    t = h.drive(h.start("NW-2", _searches(50), max_steps=6))
    _stopped(t, "step_cap")
    expect_eq(t.model_calls, 3, "model calls")
    expect_eq(t.run.steps, 7, "steps (six, then the stop)")


@scenario("boundedness", "the token cap stops the run before the call that would pass it")
def the_token_cap(h: Harness) -> None:
    t = h.drive(h.start("NW-2", _metered(), max_tokens=4000))
    _stopped(t, "token_cap")
    expect_eq(t.model_calls, 3, "model calls (3 x 1350 tokens)")


@scenario("boundedness", "the spend cap stops the run before the next call")
def the_spend_cap(h: Harness) -> None:
    t = h.drive(h.start("NW-2", _metered(cost=1000), max_spend_micros=2500))
    _stopped(t, "spend_cap")
    expect_eq(t.model_calls, 3, "model calls")
    expect_eq(t.run.cost_micros, 3000, "spend")


@scenario("boundedness", "a run past its working deadline stops before calling the model")
def the_deadline(h: Harness) -> None:
    t = h.drive(h.start("NW-2", deadline_at=timezone.now() - dt.timedelta(seconds=1)))
    _stopped(t, "deadline")
    expect_eq(t.model_calls, 0, "model calls")
    expect_eq(len(h.recorders[str(t.run.pk)].calls), 0, "provider calls")


@scenario("boundedness", "time spent waiting for a person is handed back to the deadline")
def the_deadline_does_not_count_waiting(h: Harness) -> None:
    script = ScriptedProvider(
        [
            [
                call(
                    "issue_refund",
                    order_reference="NW-1042",
                    amount_cents=3800,
                    reason="stale beans",
                )
            ],
            [say("Refunded 38.00 after approval.")],
        ]
    )
    run = h.start("NW-1", script)
    h.drive(run, LEAVE)
    # Three seconds of working time left when the run parks; a person takes longer than that.
    Run.objects.filter(pk=run.pk).update(deadline_at=timezone.now() + dt.timedelta(seconds=3))
    time.sleep(3.5)
    t = h.drive(run, APPROVE)
    expect_eq((t.status, t.stop_reason), ("succeeded", "end_turn"), "terminal state")
    expect_eq(t.refunds, [("NW-1042", 3800)], "refunds")
    expect(t.run.waited_seconds >= 3.5, f"waited seconds handed back: {t.run.waited_seconds}")


@scenario("boundedness", "the merchant's daily spend cap counts this run's own spend")
def the_merchant_daily_spend_cap(h: Harness) -> None:
    northwind = h.merchant("northwind")
    northwind.daily_spend_cap_micros = 3000
    northwind.save(update_fields=["daily_spend_cap_micros"])
    t = h.drive(h.start("NW-2", _metered(cost=1000)))
    _stopped(t, "merchant_daily_spend")
    expect_eq(t.model_calls, 3, "model calls")


@scenario(
    "boundedness", "the merchant's day is its own calendar day: yesterday's spend is not today's"
)
def the_merchant_day_is_the_merchants(h: Harness) -> None:
    northwind = h.merchant("northwind")
    midnight = day_start(timezone.now(), northwind.timezone)
    # Twice the cap, a minute before the merchant's midnight (below the platform's cap, too).
    h.spend_outside_the_run(
        "northwind", 2 * northwind.daily_spend_cap_micros, when=midnight - dt.timedelta(minutes=1)
    )
    t = h.drive(h.start("NW-2"))
    expect_eq((t.status, t.stop_reason), ("succeeded", "end_turn"), "with yesterday's spend only")
    today = min(timezone.now(), midnight + dt.timedelta(minutes=1))
    h.spend_outside_the_run("northwind", northwind.daily_spend_cap_micros, when=today)
    t = h.drive(h.start("NW-2"))
    _stopped(t, "merchant_daily_spend")
    expect_eq(t.model_calls, 0, "model calls once today's cap is spent")


@scenario("boundedness", "the platform's daily spend cap stops every merchant's runs")
def the_platform_daily_spend_cap(h: Harness) -> None:
    h.spend_outside_the_run("lumen", 4000)
    with override_settings(DESKHAND_PLATFORM_DAILY_SPEND_MICROS=5000):
        t = h.drive(h.start("NW-2", _metered(cost=1000)))
    _stopped(t, "platform_daily_spend")
    expect_eq(t.model_calls, 1, "model calls")


@scenario("boundedness", "the same call with the same arguments three times is a loop")
def identical_calls_are_a_loop(h: Harness) -> None:
    script = ScriptedProvider([[call("search_kb", query="refund policy")]] * 6)
    t = h.drive(h.start("NW-2", script))
    _stopped(t, "loop_detected")
    expect_eq(t.path[:-1], ["search_kb"] * 3, "path")
    expect("search_kb" in t.run.stop_detail and "3 times" in t.run.stop_detail, t.run.stop_detail)


@scenario("boundedness", "failed calls count toward a loop")
def failed_calls_count_toward_a_loop(h: Harness) -> None:
    script = ScriptedProvider([[call("get_order", reference="NW-9999")]] * 6)
    t = h.drive(h.start("NW-2", script))
    _stopped(t, "loop_detected")
    expect_eq(t.path[:-1], ["get_order!"] * 3, "path")


@scenario(
    "boundedness", "asking again for what a person refused is a loop, not a way to wear them down"
)
def asking_again_after_a_denial_is_a_loop(h: Harness) -> None:
    ask = [call("issue_refund", order_reference="NW-1042", amount_cents=1900, reason="please")]
    t = h.drive(
        h.start("NW-1", ScriptedProvider([ask] * 6)), deny("no"), deny("no"), deny("still no")
    )
    _stopped(t, "loop_detected")
    expect_eq(t.path.count("denied:issue_refund"), 3, "denials")
    expect_eq(t.refunds, [], "refunds")


@scenario(
    "boundedness",
    "the run's refund ceiling holds before a person is asked; the model reads the refusal",
)
def the_run_refund_ceiling(h: Harness) -> None:
    t = h.drive(h.start("NW-1", max_refund_cents=1000))  # refused before anyone is asked
    expect_eq(
        (t.status, t.stop_reason),
        ("succeeded", "end_turn"),
        "terminal state (a refusal is not the end)",
    )
    expect("issue_refund!" in t.path, f"the refund failed: {t.path}")
    expect_eq(t.refunds, [], "refunds")
    refusal = [
        b
        for b in t.tool_results_seen()
        if b.get("is_error") and "refund ceiling" in str(b.get("content"))
    ]
    expect(refusal, "the model read the ceiling refusal")
    expect_eq(h.ticket("NW-1").status, "escalated", "ticket handed to a person")


@scenario("boundedness", "the merchant's daily refund ceiling holds across runs and people")
def the_merchant_daily_refund_ceiling(h: Harness) -> None:
    northwind = h.merchant("northwind")
    northwind.daily_refund_ceiling_cents = 5000
    northwind.save(update_fields=["daily_refund_ceiling_cents"])
    h.refund_outside_the_run("NW-1101", 2000)
    t = h.drive(h.start("NW-1"))  # refused before anyone is asked
    expect_eq(t.status, "succeeded", "status")
    expect("issue_refund!" in t.path, f"the refund failed: {t.path}")
    expect_eq(t.approvals, [], "nobody was asked to approve money that could not move")
    refusal = [b for b in t.tool_results_seen() if "daily refund ceiling" in str(b.get("content"))]
    expect(refusal, "the model read the daily ceiling refusal")
    expect_eq(
        sum(r.amount_cents for r in Refund.objects.filter(merchant=northwind)),
        2000,
        "refunded today",
    )


@scenario(
    "boundedness",
    "a refund above the order's remainder is refused before anyone is asked; a corrected one is paid",
)
def the_order_remainder(h: Harness) -> None:
    h.refund_outside_the_run("NW-1042", 4000)
    script = ScriptedProvider(
        [
            [call("get_order", reference="NW-1042")],
            [
                call(
                    "issue_refund",
                    order_reference="NW-1042",
                    amount_cents=4800,
                    reason="the whole order",
                )
            ],
            [
                call(
                    "issue_refund",
                    order_reference="NW-1042",
                    amount_cents=800,
                    reason="what is left",
                )
            ],
            [say("Refunded what was left.")],
        ]
    )
    t = h.drive(h.start("NW-1", script), APPROVE)
    expect_eq(
        t.path,
        [
            "get_order",
            "issue_refund!",  # the pre-check: no approval was opened for it
            "ask:issue_refund",
            "approved:issue_refund",
            "issue_refund",
            "end:succeeded/end_turn",
        ],
        "path",
    )
    expect_eq(t.refunds, [("NW-1042", 800)], "refunds by the run")
    expect_eq(
        sum(r.amount_cents for r in h.order("NW-1042").refunds.all()), 4800, "refunded in total"
    )
