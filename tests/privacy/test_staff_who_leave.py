"""A staff member who leaves: deactivated, they can do nothing more; deleted, their acts still name them."""

from __future__ import annotations

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

from agent.run.services import run_start
from approvals.models import Approval, AuditEvent, StaffNote
from approvals.services import approval_decide
from deskhand.domain.cli import CliError
from deskhand.domain.desk.models import Membership, Merchant, Ticket
from deskhand.domain.desk.permissions import NotAllowed
from tests.console.conftest import make_approval, make_run

SAM = "sam@northwind.test"
PASSWORD = "a-long-enough-passphrase-17"


@pytest.fixture
def sam(seeded, fake_dbos):
    """A Northwind agent who approves a refund and leaves a note on a run."""
    person = get_user_model().objects.create_user(username=SAM, email=SAM, password=PASSWORD)
    Membership.objects.create(user=person, merchant=Merchant.objects.get(slug="northwind"))
    run = make_run("NW-1", status="awaiting_approval")
    approval_decide(approval=make_approval(run), user=person, approve=True, reason="fair")
    StaffNote.objects.create(run=run, author=person, body="Be kind.", channel="web")
    return person


def test_a_deactivated_user_cannot_sign_in_decide_or_start_runs(sam):
    signed_in = Client()
    signed_in.force_login(sam)
    assert signed_in.get("/").status_code == 200

    call_command("deactivate_user", SAM, stdout=io.StringIO())
    sam.refresh_from_db()
    [left] = AuditEvent.objects.filter(action="staff.deactivated")
    assert (left.merchant.slug, left.detail, left.actor_id) == (
        "northwind",
        {"user": sam.pk, "name": SAM},
        None,
    )

    # Their open session no longer carries them, and the sign-in form refuses them.
    assert signed_in.get("/").status_code == 302
    page = Client().post("/accounts/login/", {"username": SAM, "password": PASSWORD})
    assert page.status_code == 200 and "_auth_user_id" not in page.client.session
    # Nor can they act from the command line or through a service.
    pending = make_approval(make_run("NW-2", status="awaiting_approval"), tool_call_id="t2")
    with pytest.raises(CliError, match="deactivated and may no longer act") as refusal:
        call_command("decide", str(pending.pk), "approve", "--as", SAM)
    assert refusal.value.code == "not_allowed"
    with pytest.raises(NotAllowed, match="deactivated"):
        approval_decide(approval=pending, user=sam, approve=True)
    with pytest.raises(NotAllowed, match="deactivated"):
        run_start(ticket=Ticket.objects.get(reference="NW-3"), user=sam)
    assert Approval.objects.get(pk=pending.pk).status == "pending"


def test_a_deleted_user_who_approved_a_refund_is_still_named_by_every_record(sam, nw_owner):
    sam_id = sam.pk
    call_command("deactivate_user", SAM, stdout=io.StringIO())
    call_command("deactivate_user", SAM, "--delete", stdout=io.StringIO())
    assert not get_user_model().objects.filter(pk=sam_id).exists()
    assert AuditEvent.objects.filter(action="staff.deleted", detail__name=SAM).count() == 1

    event = AuditEvent.objects.get(action="approval.approve")
    assert (event.actor_id, event.actor_ref, event.actor_name) == (None, sam_id, SAM)
    assert event.actor_label == SAM and SAM in str(event)
    approval = Approval.objects.get(status="approved")
    assert (approval.decided_by_id, approval.decider) == (None, SAM)
    note = StaffNote.objects.get()
    assert (note.author_id, note.author_name) == (None, SAM)

    page = nw_owner.get(f"/runs/{approval.run_id}/").content.decode()
    assert f"{SAM} approved (via" in page  # the audit list, in words
    assert f"by {SAM} ·" in page  # the approvals list
    out = io.StringIO()
    call_command("approvals", "--merchant", "northwind", "--json", stdout=out)
    rows = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["decided_by"] for r in rows if r["status"] == "approved"] == [SAM]


def test_an_owner_who_wrote_the_approval_policy_can_be_deleted_and_the_version_keeps_their_name(
    seeded,
):
    """A merchant rule decides only because a person wrote it: deleting that person keeps the
    version (its rules untouched) and its author's name; nothing else may change a version."""
    from django.db import IntegrityError, connection, transaction

    from agent.consent.policy import policy_save
    from approvals.models import ApprovalPolicy

    lee = "lee@northwind.test"
    person = get_user_model().objects.create_user(username=lee, email=lee, password=PASSWORD)
    Membership.objects.create(
        user=person, merchant=Merchant.objects.get(slug="northwind"), role="owner"
    )
    version = policy_save(
        merchant=Merchant.objects.get(slug="northwind"),
        user=person,
        rules=[{"tool": "issue_refund", "max_amount_cents": 1500, "max_per_day": 3}],
        channel="cli",
    )
    assert version.author == lee

    call_command("deactivate_user", lee, "--delete", stdout=io.StringIO())

    kept = ApprovalPolicy.objects.get(pk=version.pk)
    assert (kept.created_by_id, kept.created_by_name, kept.author) == (None, lee, lee)
    assert kept.rules == version.rules
    # Clearing the link is the only change the database allows a version.
    with (
        pytest.raises(IntegrityError, match="never edited"),
        transaction.atomic(),
        connection.cursor() as cur,
    ):
        cur.execute(
            "UPDATE approvals_approvalpolicy SET created_by_name = 'someone else' WHERE id = %s",
            [version.pk],
        )
