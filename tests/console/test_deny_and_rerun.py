"""Consistent decisions: a denial always carries a reason (web, bulk, CLI, service), a missing
one is an inline form error, and re-running a ticket that was resolved or acted on asks first."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from django.core.management import call_command

from agent.models import Run
from agent.tools import args_hash
from approvals.models import Approval, AuditEvent
from approvals.services import ReasonRequired, approval_decide
from deskhand.domain.desk.models import Order, OutboundEmail, Refund, Ticket
from tests.console.conftest import (
    LU_OWNER,
    NW_AGENT,
    NW_OWNER,
    NW_VIEWER,
    client_for,
    make_approval,
    make_run,
    user,
)
from tests.fixtures.dbos import ROOT, test_database_url


@pytest.fixture
def gate(seeded) -> Approval:
    args = {"order_reference": "NW-1042", "amount_cents": 3800, "reason": "stale beans"}
    run = make_run("NW-1", status="awaiting_approval")
    return make_approval(run, amount_cents=3800, args_hash=args_hash("issue_refund", args))


# --- deny needs a reason ----------------------------------------------------------------


def test_a_deny_without_a_reason_re_renders_the_inbox_with_the_error_beside_the_field(gate):
    response = client_for(NW_OWNER).post(
        f"/approvals/{gate.pk}/decide", {"decision": "deny", "reason": "  ", "next": "/approvals/"}
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert f'id="reason-error-{gate.pk}"' in body
    assert "Say why you are denying it" in body
    assert f'aria-describedby="reason-error-{gate.pk}"' in body
    assert "<h1>Approvals waiting</h1>" in body  # the page itself, not an error page
    gate.refresh_from_db()
    assert gate.status == "pending" and not AuditEvent.objects.filter(action="approval.deny")


def test_a_deny_without_a_reason_from_the_run_page_comes_back_to_the_run_page(gate):
    run_path = f"/runs/{gate.run_id}/"
    response = client_for(NW_AGENT).post(
        f"/approvals/{gate.pk}/decide", {"decision": "deny", "next": run_path}
    )
    assert response.status_code == 400
    assert response.templates[0].name == "console/run.html"
    assert f'id="reason-error-{gate.pk}"' in response.content.decode()


def test_an_htmx_deny_without_a_reason_gets_the_inbox_partial(gate):
    response = client_for(NW_OWNER).post(
        f"/approvals/{gate.pk}/decide", {"decision": "deny"}, headers={"HX-Request": "true"}
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="inbox">') and "Say why" in body


def test_a_bulk_deny_needs_one_reason_and_applies_it_to_each(gate, fake_dbos):
    other = make_approval(make_run("NW-3", status="awaiting_approval"), tool_call_id="toolu_other")
    picked = [f"{a.pk}:{a.args_hash}" for a in (gate, other)]
    owner = client_for(NW_OWNER)
    response = owner.post("/approvals/bulk", {"decision": "deny", "approval": picked})
    assert response.status_code == 400
    body = response.content.decode()
    assert 'id="bulk-reason-error"' in body and "Say why you are denying them" in body
    assert body.count(" checked>") == 2  # the ticked cards stay ticked
    assert Approval.objects.filter(status="pending").count() == 2

    response = owner.post(
        "/approvals/bulk", {"decision": "deny", "reason": "Photos first.", "approval": picked}
    )
    assert response.status_code == 302
    assert sorted(Approval.objects.values_list("status", "reason")) == [
        ("denied", "Photos first."),
        ("denied", "Photos first."),
    ]


def test_the_service_refuses_a_denial_without_a_reason_on_every_channel(gate):
    with pytest.raises(ReasonRequired, match="a denial needs a reason"):
        approval_decide(approval=gate, user=user(NW_OWNER), approve=False, reason=" ")
    gate.refresh_from_db()
    assert gate.status == "pending"


def _decide_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {"DATABASE_URL": test_database_url(), "PATH": "/usr/bin:/bin", "HOME": str(ROOT)}
    return subprocess.run(
        [sys.executable, "manage.py", "decide", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.django_db(transaction=True)
def test_the_decide_command_refuses_a_denial_without_a_reason(tseeded):
    gate = make_approval(make_run("NW-1", status="awaiting_approval"))
    done = _decide_cli(str(gate.pk), "deny", "--as", NW_OWNER)
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "CommandError: deny needs --reason: the agent reads it, and the audit trail keeps it."
    )
    done = _decide_cli(str(gate.pk), "deny", "--as", NW_OWNER, "--json")
    assert done.returncode == 2
    assert json.loads(done.stdout) == {
        "error": "deny needs --reason: the agent reads it, and the audit trail keeps it.",
        "code": "usage",
    }
    gate.refresh_from_db()
    assert gate.status == "pending"


# --- re-running a ticket already acted on -------------------------------------------------


def _resolved_nw1_with_a_refund() -> Run:
    run = make_run("NW-1", status="succeeded")
    order = Order.objects.get(reference="NW-1042")
    Refund.objects.create(
        merchant_id=run.merchant_id,
        order=order,
        amount_cents=3800,
        currency="USD",
        reason="stale",
        run=run,
    )
    OutboundEmail.objects.create(
        merchant_id=run.merchant_id,
        customer=run.ticket.customer,
        ticket=run.ticket,
        subject="Re: Beans arrived stale [#NW-1]",
        body="Hello Dana,\n\nWe have refunded $38.00 against NW-1042.\n\nNorthwind Coffee",
        run=run,
    )
    Ticket.objects.filter(pk=run.ticket_id).update(status="resolved")
    return run


def test_re_running_a_resolved_ticket_warns_and_shows_what_was_done_first(seeded, fake_dbos):
    first = _resolved_nw1_with_a_refund()
    owner = client_for(NW_OWNER)
    page = owner.get("/tickets/NW-1/").content.decode()
    assert "Already done on this ticket" in page and "Refunded $38.00 against NW-1042" in page
    assert "Run the agent again…" in page

    response = owner.post("/tickets/NW-1/run")
    assert response.status_code == 200
    body = response.content.decode()
    assert 'id="rerun-warning"' in body and "NW-1 is resolved" in body
    # The email told by its words, not by the subject every answer on the thread shares.
    assert "Refunded $38.00 against NW-1042" in body
    assert "Emailed the customer: “We have refunded $38.00 against NW-1042." in body
    assert str(first.pk) in body
    assert Run.objects.count() == 1 and fake_dbos.calls == []  # nothing started yet

    response = owner.post("/tickets/NW-1/run", {"confirm": "rerun"})
    again = Run.objects.exclude(pk=first.pk).get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{again.pk}/"
    assert fake_dbos.calls == [("enqueue", str(again.pk))]


def test_a_fresh_ticket_starts_without_the_confirm_step(seeded, fake_dbos):
    response = client_for(NW_OWNER).post("/tickets/NW-2/run")
    assert response.status_code == 302 and Run.objects.count() == 1


def test_the_confirm_step_keeps_its_roles_and_tenants(seeded, fake_dbos):
    _resolved_nw1_with_a_refund()
    assert client_for(NW_VIEWER).post("/tickets/NW-1/run", {"confirm": "rerun"}).status_code == 403
    # Lumen has no NW-1: another merchant's ticket is not found, even to confirm.
    assert client_for(LU_OWNER).post("/tickets/NW-1/run").status_code == 404
    assert Run.objects.count() == 1


def test_run_ticket_on_the_cli_says_what_was_already_done_before_it_starts(
    seeded, fake_dbos, capsys
):
    _resolved_nw1_with_a_refund()
    call_command("run_ticket", "nw-1", "--json")
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        "warning: ticket NW-1 is resolved and earlier runs already did this:"
        " refunded $38.00 on NW-1042;"
        " emailed the customer ('We have refunded $38.00 against NW-1042. Northwind Coffee')."
    )
    assert json.loads(captured.out.strip().splitlines()[-1])["ticket"] == "NW-1"  # still one object
    assert Run.objects.count() == 2 and [k for k, _ in fake_dbos.calls] == ["enqueue"]


def test_run_ticket_on_a_fresh_ticket_warns_of_nothing(seeded, fake_dbos, capsys):
    call_command("run_ticket", "NW-2")
    assert "warning" not in capsys.readouterr().err


def test_already_done_tells_each_email_by_its_words_and_lists_a_copy_once(seeded):
    run = make_run("NW-1", status="succeeded")
    subject = "Re: Beans arrived stale [#NW-1]"  # every answer on the thread shares it
    for body in ("Hello Dana,\n\nWhich order?", "Hello Dana,\n\nWe refunded $38.00.") * 2:
        OutboundEmail.objects.create(
            merchant_id=run.merchant_id,
            customer=run.ticket.customer,
            ticket=run.ticket,
            subject=subject,
            body=body,
            run=run,
        )
    page = client_for(NW_OWNER).get("/tickets/NW-1/").content.decode()
    done = page[page.index('id="already-done"') :].split("</ul>", 1)[0]
    assert done.count("Emailed the customer: “Which order?”") == 1
    assert done.count("Emailed the customer: “We refunded $38.00.”") == 1
    assert subject not in done
