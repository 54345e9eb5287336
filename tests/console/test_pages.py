"""Every page reads without JavaScript, carries a CSP header, and says when the model is scripted."""

from __future__ import annotations

import re

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from approvals.models import Approval
from tests.console.conftest import (
    NW_OWNER,
    client_for,
    make_approval,
    make_run,
    model_step,
    tool_step,
)

BANNER = "Scripted provider: no ANTHROPIC_API_KEY is set, a deterministic script drives the agent"


@pytest.fixture
def world(seeded):
    run = make_run("NW-1", status="awaiting_approval")
    model_step(
        run, 1, text="Let me read the ticket.", tool="get_ticket", args={"reference": "NW-1"}
    )
    tool_step(
        run,
        2,
        "get_ticket",
        {"reference": "NW-1"},
        "<<untrusted:abc123>>\nThe beans taste flat.\n<</untrusted:abc123>>",
    )
    approval = make_approval(run)
    return run, approval


def pages(run, approval) -> list[str]:
    return [
        "/",
        "/tickets/",
        "/tickets/NW-1/",
        "/runs/",
        f"/runs/{run.pk}/",
        f"/runs/{run.pk}/steps",
        "/approvals/",
        "/usage/",
    ]


def test_each_page_renders_its_content_without_javascript(world):
    run, approval = world
    c = client_for(NW_OWNER)
    expected = {
        "/": "Recent runs",
        "/tickets/": "NW-1",
        "/tickets/NW-1/": "Run the agent",
        "/runs/": str(run.pk)[:8],
        f"/runs/{run.pk}/": "The beans taste flat.",
        f"/runs/{run.pk}/steps": "Timeline",
        "/approvals/": "Refund $19.00 on order NW-1042",
        "/usage/": "Model spend",
    }
    for url in pages(run, approval):
        response = c.get(url)
        assert response.status_code == 200, url
        body = response.content.decode()
        assert expected[url] in body, url


def test_responses_carry_a_content_security_policy_with_a_nonce(world):
    run, approval = world
    c = client_for(NW_OWNER)
    for url in [*pages(run, approval), "/accounts/login/"]:
        response = c.get(url)
        policy = response.headers.get("Content-Security-Policy", "")
        assert "script-src 'self'" in policy, url
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        if "<script" in response.content.decode():  # the nonce appears once a page uses it
            assert "script-src 'self' 'nonce-" in policy, url
    # Every script tag carries the nonce (no inline scripts, no inline handlers).
    body = c.get(f"/runs/{run.pk}/").content.decode()
    nonce = re.search(
        r"'nonce-([^']+)'", c.get(f"/runs/{run.pk}/").headers["Content-Security-Policy"]
    )
    assert nonce
    scripts = re.findall(r"<script[^>]*>", body)
    assert scripts and all("nonce=" in s and "src=" in s for s in scripts)
    assert not re.search(r"\son[a-z]+=", body), "inline event handler"
    assert 'style="' not in body


@override_settings(ANTHROPIC_API_KEY="")
def test_the_scripted_provider_banner_is_on_every_page(world):
    run, approval = world
    c = client_for(NW_OWNER)
    for url in pages(run, approval):
        assert BANNER in c.get(url).content.decode(), url
    assert BANNER in Client().get("/accounts/login/").content.decode()


@override_settings(ANTHROPIC_API_KEY="sk-test")
def test_no_banner_when_a_model_key_is_set(world):
    assert BANNER not in client_for(NW_OWNER).get("/runs/").content.decode()


def test_untrusted_content_is_marked_and_its_fence_stripped(world):
    run, _ = world
    body = client_for(NW_OWNER).get(f"/runs/{run.pk}/").content.decode()
    assert "untrusted · from outside the agent" in body
    assert "The beans taste flat." in body
    assert "&lt;&lt;untrusted" not in body and "<<untrusted" not in body


def test_run_page_shows_header_timeline_approval_and_bars(world):
    run, approval = world
    body = client_for(NW_OWNER).get(f"/runs/{run.pk}/").content.decode()
    for fact in (
        "NW-1",
        "Dana Whitfield",
        "Awaiting Approval",
        "$0.0010",
        "1350",
        "scripted / script-1",
        "deskhand-1",
    ):
        assert fact in body, fact
    assert approval.args_hash[:12] in body
    assert 'id="step-1"' in body and 'id="step-2"' in body
    assert re.search(r'class="bar time w\d+"', body)
    assert "Order total" in body or "Total" in body
    assert 'sse-connect="/runs/' in body  # live while open


def test_a_signed_out_visitor_is_sent_to_sign_in(world):
    run, _ = world
    for url in ("/", "/tickets/", f"/runs/{run.pk}/", "/approvals/", "/usage/"):
        response = Client().get(url)
        assert response.status_code == 302 and response["Location"].startswith(
            "/accounts/login/"
        ), url


def test_htmx_requests_get_the_partial_only(world):
    run, _ = world
    c = client_for(NW_OWNER)
    full = c.get("/runs/").content.decode()
    part = c.get("/runs/", headers={"HX-Request": "true"}).content.decode()
    assert "<html" in full and "<html" not in part
    assert str(run.pk)[:8] in part


def test_a_staff_auditor_without_a_merchant_is_pointed_at_the_admin(seeded):
    response = client_for("auditor@deskhand.test").get("/runs/")
    assert response.status_code == 302 and response["Location"] == "/admin/"
    refused = client_for("auditor@deskhand.test").post("/tickets/NW-1/run")
    assert refused.status_code == 403 and "/admin/" in refused.content.decode()


def test_the_inbox_lays_arguments_beside_the_order_and_flags_escalation(world):
    _, approval = world
    Approval.objects.filter(pk=approval.pk).update(escalated_at=timezone.now())
    body = client_for(NW_OWNER).get("/approvals/").content.decode()
    for fact in (
        "<dt>Amount</dt><dd>$19.00</dd>",  # words; the codes are one click away:
        '<dt class="mono">amount_cents</dt><dd><pre>1900</pre></dd>',
        "NW-1042",
        "Refunded so far",
        "Left to refund",
        "Delivered",
        "escalated",
        "Requested 5m",
        "expires in 22h",
        approval.args_hash[:12],
    ):
        assert fact in body, fact
    assert 'data-countdown="' in body


@pytest.mark.usefixtures("world")
def test_the_card_keeps_the_agents_reason_apart_from_the_order_record():
    body = client_for(NW_OWNER).get("/approvals/").content.decode()
    facts, _, rest = body.partition('aria-label="The agent\'s claims"')
    assert rest, "no claims section on the card"
    assert "From the order record" in facts and "Left to refund" in facts
    claims = rest.split("</dl>", 1)[0]
    assert "The agent&#x27;s reason (not checked)" in claims and "stale beans" in claims
    # The reason is not listed among the arguments as if it were a fact.
    arguments = facts.split('aria-label="What the agent asks to do"', 1)[1]
    assert "<dt>Amount</dt>" in arguments and "<dt>Reason</dt>" not in arguments


@pytest.mark.parametrize(
    ("status", "reason", "detail"),
    [
        ("exhausted", "truncated", "the model's reply was cut off by its output limit twice"),
        ("exhausted", "context_window_exceeded", "the conversation no longer fits"),
        ("failed", "model_refusal", "the model refused to continue"),
        ("failed", "provider_error", "Anthropic API overloaded_error (HTTP 529): Overloaded"),
        ("failed", "unknown_stop_reason", "the model stopped for a reason Deskhand does not know"),
    ],
)
def test_each_model_stop_shows_on_the_run_page_and_in_json(seeded, status, reason, detail):
    import json

    from agent.management.helpers import print_outcome

    run = make_run("NW-1", status=status, stop_reason=reason, stop_detail=detail)
    body = client_for(NW_OWNER).get(f"/runs/{run.pk}/").content.decode()
    assert reason in body and detail in body.replace("&#x27;", "'")

    class Out:
        def __init__(self) -> None:
            self.stdout = self
            self.text = ""

        def write(self, text: str) -> None:
            self.text += text

    out = Out()
    print_outcome(out, run, as_json=True)
    shown = json.loads(out.text)
    assert (shown["status"], shown["stop_reason"], shown["stop_detail"]) == (status, reason, detail)


def test_a_model_call_waiting_out_a_rate_limit_shows_on_the_run_page_and_in_json(seeded):
    import datetime as dt
    import json

    from agent.management.helpers import print_outcome

    until = timezone.now() + dt.timedelta(seconds=30)
    reason = "rate limited by anthropic: retry after 30 s"
    run = make_run("NW-1", status="running")
    run.waiting_until, run.wait_reason = until, reason
    run.save(update_fields=["waiting_until", "wait_reason"])
    body = client_for(NW_OWNER).get(f"/runs/{run.pk}/").content.decode()
    assert re.search(r'data-testid="model-wait">rate limited by anthropic: retry after 30 s', body)

    class Out:
        def __init__(self) -> None:
            self.stdout = self
            self.text = ""

        def write(self, text: str) -> None:
            self.text += text

    out = Out()
    print_outcome(out, run, as_json=True)
    shown = json.loads(out.text)
    assert (shown["waiting_until"], shown["wait_reason"]) == (until.isoformat(), reason)

    run.waiting_until, run.wait_reason = None, ""
    run.save(update_fields=["waiting_until", "wait_reason"])
    assert "model-wait" not in client_for(NW_OWNER).get(f"/runs/{run.pk}/").content.decode()
