"""Password change and reset for everyone: Django's tokens, the mail through the outbox (the
link kept only until sent), no answer that tells who has an account, a few mails an hour."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.test import Client
from django.utils import timezone

from approvals.notification_models import Notification
from approvals.outbox import outbox_send_due
from deskhand.web.console.passwords import RESETS_PER_HOUR
from tests.console.conftest import NW_AGENT, PASSWORD, client_for

pytestmark = pytest.mark.django_db

NEW = "another-long-passphrase-for-tests-9"


def _sent_link() -> str:
    outbox_send_due(now=timezone.now() + dt.timedelta(seconds=1))
    found = re.search(r"https?://[^/\s]+(/accounts/password/reset/\S+/)", mail.outbox[-1].body)
    assert found, mail.outbox[-1].body
    return found.group(1)


def test_a_forgotten_password_is_reset_through_a_mailed_link_that_works_once(seeded):
    r = Client().post("/accounts/password/reset/", {"email": NW_AGENT})
    assert r.status_code == 302
    link = _sent_link()
    assert not any(
        "/accounts/password/reset/" in n.body + str(n.payload) for n in Notification.objects.all()
    )
    c = Client()
    form = c.get(link, follow=True)  # Django moves the token into the session, then asks
    r = c.post(form.redirect_chain[-1][0], {"new_password1": NEW, "new_password2": NEW})
    assert r.status_code == 302
    assert Client().login(username=NW_AGENT, password=NEW)
    again = Client().get(link, follow=True)
    assert "does not work any more" in again.content.decode()


def test_an_unknown_address_gets_the_same_answer_and_no_mail(seeded):
    r = Client().post("/accounts/password/reset/", {"email": "nobody@nowhere.test"})
    assert r.status_code == 302 and r.url == "/accounts/password/reset/sent/"
    assert not Notification.objects.filter(event="account.password_reset").exists()


def test_one_account_gets_a_few_reset_mails_an_hour_at_most(seeded):
    for _ in range(RESETS_PER_HOUR + 2):
        assert Client().post("/accounts/password/reset/", {"email": NW_AGENT}).status_code == 302
    assert Notification.objects.filter(event="account.password_reset").count() == RESETS_PER_HOUR


def test_a_signed_in_person_changes_their_password_with_the_old_one(seeded):
    c = client_for(NW_AGENT)
    wrong = c.post(
        "/accounts/password/",
        {"old_password": "not-it", "new_password1": NEW, "new_password2": NEW},
    )
    assert wrong.status_code == 200 and "incorrectly" in wrong.content.decode()
    weak = c.post(
        "/accounts/password/",
        {"old_password": PASSWORD, "new_password1": "password", "new_password2": "password"},
    )
    assert weak.status_code == 200 and "too common" in weak.content.decode()
    ok = c.post(
        "/accounts/password/",
        {"old_password": PASSWORD, "new_password1": NEW, "new_password2": NEW},
    )
    assert ok.status_code == 302
    assert get_user_model().objects.get(email=NW_AGENT).check_password(NEW)
