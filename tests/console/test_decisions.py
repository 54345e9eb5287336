"""The inbox's decisions beyond yes and no: approve with changes, several at once, the policy page."""

from __future__ import annotations

import datetime as dt
import html

import pytest
from django.db import connection
from django.utils import timezone

from agent.consent.policy import policy_current
from agent.tools import args_hash
from approvals.models import Approval, ApprovalPolicy, AuditEvent
from deskhand.domain.desk.models import Merchant
from tests.console.conftest import (
    NW_AGENT,
    NW_OWNER,
    client_for,
    make_approval,
    make_run,
)
from tests.console.test_actions import snapshot


@pytest.fixture(autouse=True)
def _no_rules_yet(request):
    """These tests start from merchants whose owners wrote no rules yet (the seed's owners
    wrote one, approving replies to customers: agent.management.commands.seed)."""
    for name in ("tseeded", "seeded"):
        if name in request.fixturenames:
            request.getfixturevalue(name)
            ApprovalPolicy.objects.all().delete()


@pytest.fixture
def gate(seeded) -> Approval:
    args = {"order_reference": "NW-1042", "amount_cents": 4800, "reason": "stale beans"}
    run = make_run("NW-1", status="awaiting_approval")
    return make_approval(run, amount_cents=4800, args_hash=args_hash("issue_refund", args))


def _decide(data: dict[str, str], gate: Approval, who: str = NW_OWNER):
    return client_for(who).post(f"/approvals/{gate.pk}/decide", data)


def test_the_inbox_offers_the_fields_the_registry_lets_a_person_narrow(gate):
    body = client_for(NW_OWNER).get("/approvals/").content.decode()
    assert "Approve with changes" in body
    assert 'name="amount-amount_cents"' in body and 'data-max-cents="4800"' in body
    assert 'value="48.00"' in body and "150 and 150.00 both mean $150.00" in body
    assert 'name="change-order_reference"' not in body  # never offered: not narrowable


def test_an_owner_approves_a_smaller_refund_from_the_inbox(gate, fake_dbos):
    response = _decide(
        {"decision": "approve", "tool": "issue_refund", "change-amount_cents": "2000"}, gate
    )
    assert response.status_code == 302
    gate.refresh_from_db()
    assert gate.status == "approved" and gate.channel == "web"
    assert gate.approved_arguments == {**gate.arguments, "amount_cents": 2000}
    assert gate.approved_hash == args_hash("issue_refund", gate.approved_arguments)
    assert AuditEvent.objects.filter(action="approval.approve_changed").count() == 1
    assert fake_dbos.calls[0][0] == "send"


@pytest.mark.parametrize(
    ("data", "sentence"),
    [
        (
            {"change-amount_cents": "6000"},
            "approving 60.00 USD is more than the 48.00 USD proposed: a person may only approve less.",
        ),
        (
            {"change-order_reference": "NW-1043"},
            "order_reference of issue_refund cannot be changed when approving",
        ),
        ({"tool": "send_customer_email"}, "a decision cannot turn it into send_customer_email."),
        ({"change-amount_cents": "20.5"}, "amount_cents must be a whole number"),
        ({"change-amount_cents": "-5"}, "amount_cents must be at least 0.01 USD."),
        ({"change-to": "someone@else.test"}, "issue_refund has no argument &#x27;to&#x27;."),
    ],
)
def test_a_forged_post_that_widens_the_call_is_a_400_with_a_sentence_and_changes_nothing(
    gate, fake_dbos, data, sentence
):
    before = snapshot()
    response = _decide({"decision": "approve", **data}, gate)
    assert response.status_code == 400
    assert sentence in response.content.decode()
    assert snapshot() == before and fake_dbos.calls == []
    gate.refresh_from_db()
    assert gate.status == "pending" and gate.approved_arguments is None


# --- several at once -------------------------------------------------------------------


@pytest.fixture
def three(seeded) -> list[Approval]:
    out = []
    for ref in ("NW-1", "NW-2", "NW-3"):
        run = make_run(ref, status="awaiting_approval")
        out.append(make_approval(run, amount_cents=1000 + len(out)))
    return out


def _picked(approvals: list[Approval]) -> list[str]:
    return [f"{a.pk}:{a.args_hash}" for a in approvals]


def test_bulk_approve_of_three_is_three_decisions_and_three_audit_events(three, fake_dbos):
    response = client_for(NW_AGENT).post(
        "/approvals/bulk", {"decision": "approve", "approval": _picked(three)}
    )
    assert response.status_code == 302
    for a in three:
        a.refresh_from_db()
        assert a.status == "approved" and a.decided_by.email == NW_AGENT
        assert a.approved_hash == a.args_hash
    events = AuditEvent.objects.filter(action="approval.approve")
    assert sorted(e.detail["approval"] for e in events) == sorted(str(a.pk) for a in three)
    # Each decision is sent to its own run, keyed by its own approval.
    assert sorted(c[1][0] for c in fake_dbos.calls if c[0] == "send") == sorted(
        str(a.run_id) for a in three
    )


def test_bulk_deny_needs_a_reason_and_one_already_decided_does_not_stop_the_others(
    three, fake_dbos
):
    c = client_for(NW_OWNER)
    before = snapshot()
    assert (
        c.post("/approvals/bulk", {"decision": "deny", "approval": _picked(three)}).status_code
        == 400
    )
    assert snapshot() == before
    assert c.post(f"/approvals/{three[0].pk}/decide", {"decision": "approve"}).status_code == 302
    response = c.post(
        "/approvals/bulk",
        {"decision": "deny", "reason": "not today", "approval": _picked(three)},
        follow=True,
    )
    body = response.content.decode()
    assert "Denied 2." in body and "already approved; a decision is made once" in body
    assert [Approval.objects.get(pk=a.pk).status for a in three] == ["approved", "denied", "denied"]
    assert AuditEvent.objects.filter(action="approval.deny").count() == 2


@pytest.mark.parametrize("forge", ["hash", "foreign", "garbage", "none"])
def test_a_bulk_post_with_a_wrong_hash_or_a_foreign_id_decides_nothing(three, fake_dbos, forge):
    picked = _picked(three)
    status = 400
    if forge == "hash":
        picked[1] = f"{three[1].pk}:{'0' * 64}"
    elif forge == "foreign":
        lumen = make_approval(
            make_run("LU-2", "lumen", status="awaiting_approval"), order="LU-2311"
        )
        picked.append(f"{lumen.pk}:{lumen.args_hash}")
        status = 404
    elif forge == "garbage":
        picked.append("not-an-approval")
    else:
        picked = []
    before = snapshot()
    response = client_for(NW_OWNER).post(
        "/approvals/bulk", {"decision": "approve", "approval": picked}
    )
    assert response.status_code == status
    assert snapshot() == before and fake_dbos.calls == []


# --- the policy page -------------------------------------------------------------------


RULE = {
    "rule-issue_refund-on": "1",
    "rule-issue_refund-max_amount_cents": "1500",
    "rule-issue_refund-max_per_day": "3",
}


def test_an_owner_saves_a_rule_as_a_new_version_with_one_audit_event(seeded):
    c = client_for(NW_OWNER)
    assert c.post("/policy/", {**RULE, "action": "save"}).status_code == 302
    policy = policy_current(Merchant.objects.get(slug="northwind").pk)
    assert policy is not None and policy.version == 1
    assert policy.rules == [{"tool": "issue_refund", "max_amount_cents": 1500, "max_per_day": 3}]
    [event] = AuditEvent.objects.filter(action="policy.change")
    assert event.actor.email == NW_OWNER and event.channel == "web"
    assert event.detail["version"] == 1 and event.detail["previous_rules"] == []
    # The same rules again: nothing saved, said so.
    again = c.post("/policy/", {**RULE, "action": "save"})
    assert again.status_code == 409 and "already in force (version 1)" in again.content.decode()
    page = c.get("/policy/").content.decode()
    assert "In force: version 1" in page and "email the customer" in page


@pytest.mark.parametrize(
    ("data", "status", "sentence"),
    [
        (
            {"rule-issue_refund-on": "1", "rule-issue_refund-max_per_day": "3"},
            400,
            "needs an amount limit",
        ),
        (
            {**RULE, "rule-issue_refund-max_per_day": "lots"},
            400,
            "daily count must be a whole number",
        ),
        ({**RULE, "rule-issue_refund-max_per_day": "0"}, 400, "must be between 1 and 1000"),
        (
            {
                "rule-cancel_order-on": "1",
                "rule-cancel_order-max_per_day": "2",
                "rule-cancel_order-max_amount_cents": "5",
            },
            400,
            "moves no money",
        ),
    ],
)
def test_a_bad_rule_is_a_400_with_a_sentence_and_saves_nothing(seeded, data, status, sentence):
    response = client_for(NW_OWNER).post("/policy/", {**data, "action": "save"})
    assert response.status_code == status and sentence in response.content.decode()
    assert not ApprovalPolicy.objects.exists() and not AuditEvent.objects.exists()


@pytest.mark.parametrize(
    ("tool", "sentence"),
    [
        (
            "send_customer_email",
            "No rule may approve send_customer_email: each call of it needs a person's "
            "decision. Nothing was saved.",
        ),
        ("wire_money_abroad", "'wire_money_abroad' is not a tool a rule may cover"),
    ],
)
def test_a_rule_for_a_tool_no_rule_may_approve_is_refused_on_the_page_not_dropped(
    seeded, tool, sentence
):
    """Posted beside a valid rule (as a hand-edited form would): the whole save is refused
    with a sentence on the page; before, the stray rule was dropped and the page said Saved."""
    data = {**RULE, f"rule-{tool}-on": "1", f"rule-{tool}-max_per_day": "5", "action": "save"}
    response = client_for(NW_OWNER).post("/policy/", data)
    page = response.content.decode()
    assert response.status_code == 400, page[-500:]
    assert sentence in html.unescape(page)
    assert "Saved" not in page
    assert not ApprovalPolicy.objects.exists() and not AuditEvent.objects.exists()


def test_an_agent_reads_the_policy_but_only_an_owner_changes_it(seeded):
    c = client_for(NW_AGENT)
    assert c.get("/policy/").status_code == 200
    response = c.post("/policy/", {**RULE, "action": "save"})
    assert response.status_code == 403 and "Only an owner" in response.content.decode()
    assert not ApprovalPolicy.objects.exists()


def test_the_30_day_preview_equals_a_direct_sql_count_and_changes_nothing(seeded):
    run = make_run("NW-1", status="succeeded")
    now = timezone.now()
    # Fixtures: refunds over the last 40 days; several on one day to meet the daily count.
    amounts = [
        (1, 1000),
        (1, 1200),
        (1, 900),
        (1, 800),  # four on one day: the fourth is over 3 a day
        (2, 2000),  # over the amount limit
        (3, 1500),
        (5, 100),
        (12, 1499),
        (35, 1000),  # older than 30 days
    ]
    for n, (days_ago, cents) in enumerate(amounts):
        at = now - dt.timedelta(days=days_ago, minutes=n)
        make_approval(
            run,
            amount_cents=cents,
            tool_call_id=f"toolu_{n}",
            requested_at=at,
            expires_at=at + dt.timedelta(hours=1),
            status="denied" if n == 6 else "pending",
        )
    before = snapshot()
    response = client_for(NW_OWNER).post("/policy/", {**RULE, "action": "preview"})
    assert response.status_code == 200
    assert snapshot() == before and not ApprovalPolicy.objects.exists()
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT count(*), coalesce(sum(amount), 0) FROM (
              SELECT (a.arguments->>'amount_cents')::int AS amount,
                     row_number() OVER (
                       PARTITION BY (a.requested_at AT TIME ZONE m.timezone)::date
                       ORDER BY a.requested_at, a.id) AS nth
              FROM approvals_approval a JOIN desk_merchant m ON m.id = a.merchant_id
              WHERE m.slug = 'northwind' AND a.tool = 'issue_refund'
                AND a.requested_at >= now() - interval '30 days'
                AND (a.arguments->>'amount_cents')::int BETWEEN 1 AND 1500
            ) covered WHERE nth <= 3
            """
        )
        count, cents = cur.fetchone()
    preview = response.context["preview"]
    assert (preview["count"], preview["amount_cents"]) == (count, cents)
    # Three of the four on one day, then 15.00, 1.00 and 14.99 (7 if the four straddle midnight).
    assert count in (6, 7) and preview["tools"]["issue_refund"]["count"] == count
    assert preview["considered"] == 8 and preview["denied"] == 1
    body = response.content.decode()
    assert (
        f"<strong>{count}</strong> of 8 recorded approvals" in body and "Nothing was saved." in body
    )


def test_the_run_page_and_the_admin_show_a_decision_made_by_a_merchant_rule(seeded):
    from django.utils import timezone as tz

    from approvals.models import ApprovalPolicy
    from tests.console.conftest import AUDITOR, user

    rule = ApprovalPolicy.objects.create(
        merchant=Merchant.objects.get(slug="northwind"),
        version=1,
        rules=[{"tool": "issue_refund", "max_amount_cents": 1500, "max_per_day": 3}],
        created_by=user(NW_OWNER),
    )
    run = make_run("NW-1", status="succeeded")
    approval = make_approval(
        run, status="approved", channel="policy", policy=rule, policy_rule=1, decided_at=tz.now()
    )
    page = client_for(NW_OWNER).get(f"/runs/{run.pk}/").content.decode()
    assert "by the merchant's" in page and "policy v1 rule 1" in page
    assert "no person waited" in page
    admin = client_for(AUDITOR).get("/admin/approvals/approval/").content.decode()
    assert "by policy v1 rule 1" in admin and str(approval.pk)[:8] in admin
