"""The decision service: one decision ever, by the right people, delivered once."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, connection, transaction

from agent.consent.gate import gate_request
from agent.run.services import run_cancel, run_start
from agent.run.steering import SteerRefused, run_steer
from approvals.models import Approval, ApprovalStatus, AuditEvent
from approvals.selectors import approval_for_user
from approvals.services import DecisionRefused, approval_decide
from deskhand.domain.desk.models import Ticket
from deskhand.domain.desk.permissions import NotAllowed, NotVisible
from tests.consent.conftest import bare_run, gate_call
from tests.durability.helpers import decide, pending_approval, start, user
from tests.fixtures.dbos import ROOT, test_database_url, wait_parked, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def opened(tseeded) -> Approval:
    """A pending approval on a Northwind run (no workflow needed to refuse a decision)."""
    run = bare_run()
    return Approval.objects.get(pk=gate_request(str(run.id), 1, gate_call(3800)).approval_id)


def test_a_decision_is_made_once(opened):
    approval_decide(
        approval=opened, user=user("agent@northwind.test"), approve=True, reason="stale, fair"
    )
    with pytest.raises(DecisionRefused, match="already approved; a decision is made once"):
        approval_decide(approval=opened, user=user("owner@northwind.test"), approve=False)
    with pytest.raises(DecisionRefused, match="already approved"):
        approval_decide(approval=opened, user=user("agent@northwind.test"), approve=True)
    opened.refresh_from_db()
    assert (opened.status, opened.decided_by.email, opened.reason) == (
        "approved",
        "agent@northwind.test",
        "stale, fair",
    )
    assert AuditEvent.objects.filter(action__startswith="approval.").count() == 1
    # Not even code that bypasses the service can change a decision, or what was approved.
    with pytest.raises(IntegrityError, match="a decision is made once"), transaction.atomic():
        Approval.objects.filter(pk=opened.pk).update(status=ApprovalStatus.DENIED)
    with pytest.raises(IntegrityError, match="never changes"), transaction.atomic():
        Approval.objects.filter(pk=opened.pk).update(args_hash="0" * 64)
    with (
        pytest.raises(IntegrityError, match="never changes"),
        transaction.atomic(),
        connection.cursor() as cur,
    ):
        cur.execute(
            "UPDATE approvals_approval SET arguments = jsonb_set(arguments, '{amount_cents}', '4800') WHERE id = %s",
            [opened.pk],
        )
    opened.refresh_from_db()
    assert (opened.status, opened.arguments["amount_cents"]) == ("approved", 3800)


def test_a_viewer_is_refused_for_approve_deny_steer_start_and_cancel_with_a_sentence(opened):
    viewer = user("viewer@northwind.test")
    sentence = r"viewer@northwind.test is a viewer at Northwind Coffee and may watch runs but not "
    with pytest.raises(NotAllowed, match=sentence + "approve or deny irreversible actions\\.$"):
        approval_decide(approval=opened, user=viewer, approve=True)
    with pytest.raises(NotAllowed, match=sentence + "approve or deny"):
        approval_decide(approval=opened, user=viewer, approve=False, reason="no")
    with pytest.raises(NotAllowed, match=sentence + "steer runs\\.$"):
        run_steer(run=opened.run, user=viewer, body="refund the shipping too")
    with pytest.raises(NotAllowed, match=sentence + "start runs\\.$"):
        run_start(ticket=Ticket.objects.get(reference="NW-2"), user=viewer)
    with pytest.raises(NotAllowed, match=sentence + "cancel runs\\.$"):
        run_cancel(run=opened.run, user=viewer)
    opened.refresh_from_db()
    opened.run.refresh_from_db()
    assert opened.status == "pending" and opened.run.status == "queued"
    assert opened.run.staff_notes.count() == 0
    assert not AuditEvent.objects.filter(actor=viewer).exists()  # a refusal changes nothing


def test_another_merchants_staff_cannot_even_see_the_approval(opened):
    lumen_owner = user("owner@lumen.test")
    with pytest.raises(NotVisible):
        approval_for_user(user=lumen_owner, approval_id=opened.pk)
    with pytest.raises(NotVisible):
        approval_decide(approval=opened, user=lumen_owner, approve=True)
    with pytest.raises(NotVisible):
        run_steer(run=opened.run, user=lumen_owner, body="hello")
    with pytest.raises(NotVisible):
        run_cancel(run=opened.run, user=lumen_owner)
    # The CLI answers exactly as for an id that does not exist.
    with pytest.raises(CommandError) as foreign:
        call_command("decide", str(opened.pk), "approve", "--as", "owner@lumen.test")
    with pytest.raises(CommandError) as unknown:
        call_command(
            "decide", "00000000-0000-0000-0000-000000000000", "approve", "--as", "owner@lumen.test"
        )
    assert str(foreign.value) == f"no approval {opened.pk}."
    assert str(unknown.value) == "no approval 00000000-0000-0000-0000-000000000000."
    with pytest.raises(CommandError, match=f"^no run {opened.run_id}\\.$"):
        call_command("steer", str(opened.run_id), "hello", "--as", "owner@lumen.test")
    opened.refresh_from_db()
    assert opened.status == "pending"


def test_an_expired_approval_is_refused_as_a_conflict_and_the_expiry_is_recorded(opened):
    Approval.objects.filter(pk=opened.pk).update(
        expires_at=opened.requested_at - dt.timedelta(seconds=1)
    )
    with pytest.raises(DecisionRefused, match=r"expired at .*; it can no longer be decided"):
        approval_decide(approval=opened, user=user("owner@northwind.test"), approve=True)
    opened.refresh_from_db()
    assert opened.status == "expired" and opened.decided_by is None  # committed, not rolled back
    assert (
        AuditEvent.objects.filter(action="approval.expired", actor=None, channel="system").count()
        == 1
    )
    with pytest.raises(DecisionRefused, match="already expired"):
        approval_decide(approval=opened, user=user("owner@northwind.test"), approve=False)


def test_a_steer_on_an_ended_run_or_without_text_is_refused(opened):
    with pytest.raises(SteerRefused, match="a note needs some text"):
        run_steer(run=opened.run, user=user("agent@northwind.test"), body="   ")
    run_cancel(run=opened.run, user=user("owner@northwind.test"))
    with pytest.raises(SteerRefused, match="is already cancelled; notes reach only live runs"):
        run_steer(run=opened.run, user=user("agent@northwind.test"), body="too late")
    # The cancel withdrew it first.
    with pytest.raises(DecisionRefused, match="was withdrawn when its run was cancelled"):
        approval_decide(approval=opened, user=user("owner@northwind.test"), approve=True)


def test_a_double_click_records_one_decision_and_delivers_it_once(dbos_executor):
    run = start("NW-1", "owner@northwind.test")
    wait_parked(str(run.id))
    approval = decide(run, "owner@northwind.test")
    with pytest.raises(DecisionRefused):  # the second click
        approval_decide(
            approval=Approval.objects.get(pk=approval.pk),
            user=user("owner@northwind.test"),
            approve=True,
        )
    from approvals.services import approval_send

    approval_send(approval)  # the reconciler's re-send, or a retried request: same idempotency key
    approval_send(approval)
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM dbos.notifications WHERE topic = %s", [approval.topic])
        assert cur.fetchone()[0] == 1
    assert run.refunds.count() == 1


def test_the_decide_command_refuses_a_viewer_with_one_sentence_and_a_nonzero_exit(opened):
    env = {"DATABASE_URL": test_database_url(), "PATH": "/usr/bin:/bin", "HOME": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "decide",
            str(opened.pk),
            "approve",
            "--as",
            "viewer@northwind.test",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    message = done.stderr.strip()
    assert message == (
        "CommandError: viewer@northwind.test is a viewer at Northwind Coffee and may watch runs "
        "but not approve or deny irreversible actions."
    )
    assert pending_approval(opened.run).pk == opened.pk
