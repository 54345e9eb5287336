"""The usage page against the caps, and the polling fallback for browsers that cannot stream."""

from __future__ import annotations

import re

from deskhand.domain.desk.models import Merchant, Order, Refund
from tests.console.conftest import LU_OWNER, NW_OWNER, client_for, make_run, model_step


def test_usage_shows_todays_spend_and_refunds_against_the_caps(seeded):
    merchant = Merchant.objects.get(slug="northwind")
    Merchant.objects.filter(pk=merchant.pk).update(
        daily_spend_cap_micros=4_000, daily_refund_ceiling_cents=5_000
    )
    run = make_run("NW-1", status="succeeded")
    model_step(run, 1, text="a")  # 1,000 micro-dollars
    order = Order.objects.get(merchant=merchant, reference="NW-1042")
    Refund.objects.create(
        merchant=merchant, order=order, amount_cents=3_800, reason="stale", run=run
    )
    body = client_for(NW_OWNER).get("/usage/").content.decode()
    assert "$0.0010" in body and "25%" in body  # of a $0.0040 cap
    assert "$38.00" in body and "76%" in body  # of a $50.00 ceiling
    assert "$0.0040" in body and "$50.00" in body
    lumen = client_for(LU_OWNER).get("/usage/").content.decode()
    assert "$38.00" not in lumen


def test_the_polling_fallback_sends_new_steps_out_of_band_and_stops_when_terminal(seeded):
    run = make_run("NW-1")
    model_step(run, 1, text="first")
    c = client_for(NW_OWNER)
    page = c.get(f"/runs/{run.pk}/", {"live": "poll"}).content.decode()
    assert 'id="poller"' in page and 'hx-trigger="every 2s"' in page and "sse-connect" not in page
    sig = re.search(r"actions=([0-9a-f]+)", page).group(1)
    model_step(run, 2, text="second")
    poll = c.get(
        f"/runs/{run.pk}/steps", {"after": 1, "actions": sig}, headers={"HX-Request": "true"}
    )
    body = poll.content.decode()
    assert poll.status_code == 200 and "<html" not in body
    assert (
        'hx-swap-oob="beforeend:#timeline"' in body
        and 'id="step-2"' in body
        and 'id="step-1"' not in body
    )
    assert "after=2" in body  # the next poll asks for what comes after
    assert (
        "innerHTML:#run-actions" not in body
    )  # nothing a person can do changed: the steer box is left alone
    run.status = "succeeded"
    run.save()
    done = c.get(
        f"/runs/{run.pk}/steps", {"after": 2, "actions": sig}, headers={"HX-Request": "true"}
    )
    assert done.status_code == 286  # htmx stops polling
    assert (
        "every 2s" not in done.content.decode()
        and "innerHTML:#run-actions" in done.content.decode()
    )
    assert c.get(f"/runs/{run.pk}/steps").content.decode().startswith("<!doctype html>")


def test_the_run_page_offers_a_no_javascript_refresh_while_live(seeded):
    run = make_run("NW-1")
    c = client_for(NW_OWNER)
    assert '<noscript><meta http-equiv="refresh"' in c.get(f"/runs/{run.pk}/").content.decode()
    assert 'hx-trigger="every 2s"' in c.get(f"/runs/{run.pk}/", {"live": "poll"}).content.decode()
    run.status = "succeeded"
    run.save()
    body = c.get(f"/runs/{run.pk}/").content.decode()
    assert "noscript" not in body and f"/runs/{run.pk}/stream" not in body
    assert 'sse-connect="/attention/stream"' in body  # only the menu's counters stay live
