"""A store of one's own, its first half: a merchant made without ``seed``, its owner invited,
and a team that owners change by invitation — each link single use, expiring, revocable."""

from __future__ import annotations

import datetime as dt
import io
import json
import re

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from approvals.models import AuditEvent
from approvals.notification_models import Notification
from approvals.outbox import outbox_send_due
from approvals.team import TeamRefused, invitation_issue, member_remove, member_role_set
from deskhand.domain.desk.models import Invitation, Membership, Merchant, Role
from tests.console.conftest import LU_OWNER, NW_AGENT, NW_OWNER, NW_VIEWER, client_for, user

pytestmark = pytest.mark.django_db

NEW_PASSWORD = "a-long-and-unusual-passphrase-71"


def _create(*args: str) -> dict:
    out = io.StringIO()
    call_command("merchant", "create", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def _link() -> str:
    """Send the outbox (as the worker does) and read the invitation's path from the mail."""
    outbox_send_due(now=timezone.now() + dt.timedelta(seconds=1))
    found = re.search(r"https?://[^/\s]+(/invitations/[^/\s]+/)", mail.outbox[-1].body)
    assert found, mail.outbox[-1].body
    return found.group(1)


def _accept_as_new(path: str, name: str = "Rosa Diaz") -> Client:
    c = Client()
    r = c.post(path, {"name": name, "password": NEW_PASSWORD, "password2": NEW_PASSWORD})
    assert r.status_code == 302, r.content.decode()
    return c


def test_a_fresh_database_has_no_merchant_and_the_sign_in_page_says_how_to_make_one(db):
    assert not Merchant.objects.exists()
    page = Client().get("/accounts/login/").content.decode()
    assert "python manage.py merchant create" in page


def test_the_operator_creates_a_merchant_whose_owner_accepts_the_mailed_invitation(db):
    made = _create("--name", "Harbor Tea", "--slug", "harbor", "--owner", "Rosa@Harbor.test")
    merchant = Merchant.objects.get(slug="harbor")
    assert made == {"merchant": "harbor", "id": merchant.pk, "owner_invited": "rosa@harbor.test"}
    invitation = Invitation.objects.get(merchant=merchant)
    path = _link()
    token = path.split("/")[2]
    # Only its hash is stored; once sent, the outbox keeps no copy of the link either.
    assert token not in invitation.token_hash
    assert not any(token in json.dumps(n.payload) + n.body for n in Notification.objects.all())
    owner = _accept_as_new(path)
    rosa = get_user_model().objects.get(email="rosa@harbor.test")
    assert Membership.objects.get(user=rosa).role == Role.OWNER
    assert rosa.get_full_name() == "Rosa Diaz"
    assert owner.get("/merchant/team/").status_code == 200  # signed in, at the new merchant
    actions = list(
        AuditEvent.objects.filter(merchant_id=merchant.pk)
        .order_by("pk")
        .values_list("action", flat=True)
    )
    assert actions == ["merchant.created", "team.invited", "team.joined"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--name", "X", "--slug", "Not A Slug", "--owner", "a@b.test"], "not a slug"),
        (["--name", "X", "--slug", "x", "--owner", "nobody"], "not an email address"),
        (["--name", "X", "--slug", "x", "--owner", "a@b.test", "--timezone", "Mars"], "time zone"),
        (["--name", " ", "--slug", "x", "--owner", "a@b.test"], "needs a name"),
        (["--name", "X", "--slug", "northwind", "--owner", "a@b.test"], "exists already"),
    ],
)
def test_a_bad_merchant_is_refused_with_a_sentence_and_nothing_is_made(seeded, args, said):
    before = (Merchant.objects.count(), Invitation.objects.count(), AuditEvent.objects.count())
    with pytest.raises(CommandError, match=said):
        call_command("merchant", "create", *args, stdout=io.StringIO())
    after = (Merchant.objects.count(), Invitation.objects.count(), AuditEvent.objects.count())
    assert after == before


def test_an_invitation_link_works_once(seeded):
    client_for(NW_OWNER).post("/merchant/team/", {"email": "new@northwind.test", "role": "agent"})
    path = _link()
    _accept_as_new(path)
    again = Client().post(path, {"name": "X", "password": NEW_PASSWORD, "password2": NEW_PASSWORD})
    assert again.status_code == 404 and "already been accepted" in again.content.decode()
    assert Membership.objects.filter(user__email="new@northwind.test").count() == 1


def test_an_expired_or_withdrawn_or_replaced_link_is_refused_and_changes_nothing(seeded):
    owner = client_for(NW_OWNER)
    assert owner.post("/merchant/team/", {"email": "a@x.test", "role": "viewer"}).status_code == 201
    expired = _link()
    Invitation.objects.filter(email="a@x.test").update(expires_at=timezone.now())
    r = Client().post(expired, {"name": "A", "password": NEW_PASSWORD, "password2": NEW_PASSWORD})
    assert r.status_code == 404 and "expired" in r.content.decode()
    # Sent again: a new link; the old one stays dead even though the invitation lives again.
    invitation = Invitation.objects.get(email="a@x.test")
    assert owner.post(f"/merchant/team/invitations/{invitation.pk}/resend").status_code == 200
    fresh = _link()
    assert fresh != expired and Client().get(expired).status_code == 404
    assert owner.post(f"/merchant/team/invitations/{invitation.pk}/revoke").status_code == 200
    r = Client().post(fresh, {"name": "A", "password": NEW_PASSWORD, "password2": NEW_PASSWORD})
    assert r.status_code == 404 and "withdrawn" in r.content.decode()
    assert not get_user_model().objects.filter(email="a@x.test").exists()


def test_a_link_opened_by_someone_else_signed_in_is_refused(seeded):
    client_for(NW_OWNER).post("/merchant/team/", {"email": "b@x.test", "role": "agent"})
    path = _link()
    r = client_for(LU_OWNER).post(path)
    assert r.status_code == 400 and "signed in as owner@lumen.test" in r.content.decode()
    assert not Membership.objects.filter(user__email="b@x.test").exists()
    assert Invitation.objects.get(email="b@x.test").accepted_at is None


def test_an_existing_account_signs_in_to_accept_and_the_link_never_sets_its_password(seeded):
    lumen_owner = user(LU_OWNER)
    before = lumen_owner.password
    client_for(NW_OWNER).post("/merchant/team/", {"email": LU_OWNER, "role": "viewer"})
    path = _link()
    anonymous = Client().post(
        path, {"name": "Taken", "password": NEW_PASSWORD, "password2": NEW_PASSWORD}
    )
    assert anonymous.status_code == 400 and "sign in" in anonymous.content.decode()
    lumen_owner.refresh_from_db()
    assert lumen_owner.password == before
    signed_in = client_for(LU_OWNER)
    assert signed_in.post(path).status_code == 302
    merchants = set(
        Membership.objects.filter(user=lumen_owner).values_list("merchant__slug", flat=True)
    )
    assert merchants == {"lumen", "northwind"}
    # Two memberships: the console switches between them.
    northwind = Merchant.objects.get(slug="northwind")
    signed_in.post("/merchant/switch", {"merchant": northwind.pk})
    assert "Northwind" in signed_in.get("/merchant/team/").content.decode()


def test_a_weak_password_is_refused_by_djangos_validators(seeded):
    client_for(NW_OWNER).post("/merchant/team/", {"email": "c@x.test", "role": "agent"})
    r = Client().post(_link(), {"name": "C", "password": "12345678", "password2": "12345678"})
    assert r.status_code == 400 and "too common" in r.content.decode()
    assert not get_user_model().objects.filter(email="c@x.test").exists()


def test_only_an_owner_changes_the_team(seeded):
    for email in (NW_AGENT, NW_VIEWER):
        c = client_for(email)
        assert c.get("/merchant/team/").status_code == 200  # everyone sees who is on it
        r = c.post("/merchant/team/", {"email": "d@x.test", "role": "owner"})
        assert r.status_code == 403 and "only an owner" in r.content.decode()
    member = Membership.objects.get(user__email=NW_VIEWER)
    assert (
        client_for(NW_AGENT).post(f"/merchant/team/members/{member.pk}/remove").status_code == 403
    )
    # Another merchant's owner: a 404, nothing learnt.
    assert (
        client_for(LU_OWNER).post(f"/merchant/team/members/{member.pk}/remove").status_code == 404
    )
    assert Client().post("/merchant/team/", {"email": "d@x.test"}).status_code == 302  # sign in
    assert not Invitation.objects.exists() and Membership.objects.filter(pk=member.pk).exists()


def test_a_team_form_without_its_csrf_token_is_refused(seeded):
    c = client_for(NW_OWNER, enforce_csrf_checks=True)
    assert c.post("/merchant/team/", {"email": "e@x.test", "role": "agent"}).status_code == 403
    assert not Invitation.objects.exists()


def test_the_last_owner_can_be_neither_demoted_nor_removed(seeded):
    owner = user(NW_OWNER)
    mine = Membership.objects.get(user=owner, merchant__slug="northwind")
    with pytest.raises(TeamRefused, match="last owner"):
        member_role_set(membership=mine, role=Role.AGENT, by=owner)
    with pytest.raises(TeamRefused, match="last owner"):
        member_remove(membership=mine, by=owner)
    agent = Membership.objects.get(user__email=NW_AGENT)
    member_role_set(membership=agent, role=Role.OWNER, by=owner)
    member_role_set(membership=mine, role=Role.VIEWER, by=owner)  # another owner now
    assert Membership.objects.get(pk=mine.pk).role == Role.VIEWER
    changes = AuditEvent.objects.filter(action="team.role_changed").values_list("detail", flat=True)
    assert {(d["before"], d["after"]) for d in changes} == {("agent", "owner"), ("owner", "viewer")}


def test_an_address_already_on_the_team_or_invited_is_not_invited_twice(seeded):
    owner = user(NW_OWNER)
    northwind = Merchant.objects.get(slug="northwind")
    with pytest.raises(TeamRefused, match="already an agent"):
        invitation_issue(merchant=northwind, email=NW_AGENT.upper(), role="agent", by=owner)
    invitation_issue(merchant=northwind, email="f@x.test", role="agent", by=owner)
    with pytest.raises(TeamRefused, match="waiting already"):
        invitation_issue(merchant=northwind, email="F@x.test", role="viewer", by=owner)
    assert Invitation.objects.count() == 1
