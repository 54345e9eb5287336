"""Sign-in with the email as username, and a brake on password guessing."""

from __future__ import annotations

from django.test import Client

from tests.console.conftest import NW_OWNER, PASSWORD


def test_it_signs_in_with_the_email(seeded):
    c = Client()
    response = c.post("/accounts/login/", {"username": NW_OWNER, "password": PASSWORD})
    assert response.status_code == 302 and response["Location"] == "/"
    assert "Northwind" in c.get("/").content.decode()


def test_the_email_is_case_insensitive(seeded):
    response = Client().post(
        "/accounts/login/", {"username": "Owner@Northwind.TEST", "password": PASSWORD}
    )
    assert response.status_code == 302


def test_a_wrong_password_is_refused_with_the_form(seeded):
    response = Client().post("/accounts/login/", {"username": NW_OWNER, "password": "nope"})
    assert response.status_code == 200
    assert "correct" in response.content.decode()


def test_the_eleventh_attempt_after_ten_failures_gets_429_even_with_the_right_password(seeded):
    c = Client()
    for _ in range(10):
        assert (
            c.post("/accounts/login/", {"username": NW_OWNER, "password": "wrong"}).status_code
            == 200
        )
    blocked = c.post("/accounts/login/", {"username": NW_OWNER, "password": PASSWORD})
    assert blocked.status_code == 429
    assert "Too many failed sign-in attempts" in blocked.content.decode()
    # Another account from the same address is not locked out by these failures.
    assert (
        c.post(
            "/accounts/login/", {"username": "agent@northwind.test", "password": PASSWORD}
        ).status_code
        == 302
    )


def test_sign_out_is_a_post(seeded):
    c = Client()
    c.post("/accounts/login/", {"username": NW_OWNER, "password": PASSWORD})
    assert c.get("/accounts/logout/").status_code == 405
    assert c.post("/accounts/logout/").status_code == 302
    assert c.get("/runs/").status_code == 302
