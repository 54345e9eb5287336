"""Every role lands somewhere useful, and the audit desk reads like money and people, not columns."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from agent.models import Run
from agent.models.ledger import LedgerEntry
from approvals.models import Approval
from deskhand.domain.desk.models import Merchant, Order, Refund
from tests.console.conftest import (
    AUDITOR,
    LU_OWNER,
    NW_OWNER,
    NW_VIEWER,
    PASSWORD,
    client_for,
    make_approval,
    make_run,
)


def changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


@pytest.mark.parametrize(
    ("email", "lands"),
    [(AUDITOR, "/admin/"), (NW_OWNER, "/"), (NW_VIEWER, "/"), (LU_OWNER, "/")],
)
def test_signing_in_lands_each_role_on_a_page_it_can_use(seeded, email, lands):
    c = Client()
    response = c.post("/accounts/login/", {"username": email, "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == lands
    page = c.get(lands, follow=True)
    assert page.status_code == 200


def test_an_auditor_on_the_console_is_sent_to_the_audit_desk_with_navigation_that_works(seeded):
    c = client_for(AUDITOR)
    response = c.get("/", follow=True)
    assert response.redirect_chain == [("/admin/", 302)]
    assert response.status_code == 200 and "Deskhand audit desk" in response.content.decode()
    assert c.get("/attention/")["Location"] == "/admin/"


def test_a_member_sees_no_audit_desk_link_and_an_auditor_no_dead_console_links(seeded):
    owner = client_for(NW_OWNER).get("/").content.decode()
    assert 'href="/admin/"' not in owner and 'href="/attention/"' in owner
    refused = client_for(AUDITOR).post("/tickets/NW-1/run")
    assert refused.status_code == 403
    body = refused.content.decode()
    nav = body[body.index('<nav aria-label="Console"') :].split("</nav>", 1)[0]
    assert 'href="/admin/"' in nav and 'href="/tickets/"' not in nav


def test_admin_lists_show_dollars_readable_names_and_whole_ids(seeded):
    run = make_run("NW-1", status="succeeded", cost_micros=12_345)
    order = Order.objects.get(reference="NW-1042")
    Refund.objects.create(
        merchant_id=run.merchant_id, order=order, amount_cents=3800, currency="USD",
        reason="stale", run=run,
    )  # fmt: skip
    approval = make_approval(make_run("NW-3", status="awaiting_approval"), amount_cents=15600)
    c = client_for(AUDITOR)

    runs = c.get(changelist(Run)).content.decode()
    assert "Cost micros" not in runs and ">Cost<" in runs.replace("</a>", "<")
    assert "$0.012345" in runs
    assert f">{run.pk}</a>" in runs or str(run.pk) in runs

    refunds = c.get(changelist(Refund)).content.decode()
    assert "$38.00" in refunds and "Amount cents" not in refunds
    assert f">{run.pk}</a>" in refunds  # the whole run id, not its first 8 characters

    orders = c.get(changelist(Order)).content.decode()
    assert "$48.00" in orders and "Total cents" not in orders

    merchants = c.get(changelist(Merchant)).content.decode()
    assert "$1,000.00" in merchants and "$10.00" in merchants  # refund ceiling, spend cap
    assert "micros" not in merchants.lower() and "cents" not in merchants.lower()

    approvals = c.get(changelist(Approval)).content.decode()
    assert "$156.00" in approvals and f">{approval.run_id}</a>" in approvals

    people = c.get(reverse("admin:desk_membership_changelist")).content.decode()
    assert "owner@northwind.test" in people


def test_the_ledger_list_shows_the_whole_args_hash(seeded):
    run = make_run("NW-1", status="succeeded")
    entry = LedgerEntry.objects.create(
        key=f"{run.pk}:toolu_1",
        merchant_id=run.merchant_id,
        run=run,
        root_run=run,
        tool="issue_refund",
        tool_call_id="toolu_1",
        args_hash="ab" * 32,
        identity="cd" * 32,
        ok=True,
        state="done",
        result="{}",
        arguments={"order_reference": "NW-1042", "amount_cents": 3800},
    )
    body = client_for(AUDITOR).get(changelist(LedgerEntry)).content.decode()
    assert entry.args_hash in body and f">{run.pk}</a>" in body
