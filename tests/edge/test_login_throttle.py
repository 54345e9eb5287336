"""Sign-in throttling that holds across web processes: failures are rows in Postgres."""

from __future__ import annotations

import dataclasses
import datetime as dt
import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from django.db.models import F
from django.test import Client, RequestFactory, override_settings

from deskhand.infra.edge.models import LoginFailure
from deskhand.infra.edge.throttle import client_address
from tests.console.conftest import (
    AUDITOR,
    NW_AGENT,
    NW_OWNER,
    PASSWORD,
    WebServer,
    web_process_on_test_database,
)

COOLOFF = dt.timedelta(minutes=15)


def post_login(c: Client, password: str, username: str = NW_OWNER, **extra: str) -> int:
    return c.post(
        "/accounts/login/", {"username": username, "password": password}, **extra
    ).status_code


def cool_off_passes() -> None:
    """The clock moves on by the cool-off: every failure row is 15 minutes older."""
    LoginFailure.objects.update(
        at=F("at") - COOLOFF,
        locks_until=F("locks_until") - COOLOFF,
        locks_name_until=F("locks_name_until") - COOLOFF,
    )


class Browser:
    """One browser over real HTTP: its cookies, each form's CSRF token, no redirect followed.

    Both web processes listen on 127.0.0.1, so the browser's cookies go to either, as
    they would behind a load balancer that spreads one person's requests.
    """

    def __init__(self) -> None:
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()), _NoRedirect()
        )

    def sign_in(
        self,
        server: WebServer,
        path: str,
        username: str,
        password: str,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        url = f"{server.url}{path}"
        with self.opener.open(
            urllib.request.Request(url, headers=headers or {}), timeout=30
        ) as page:
            form = page.read().decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
        assert token, form[:2000]
        body = urllib.parse.urlencode(
            {"username": username, "password": password, "csrfmiddlewaretoken": token[1]}
        ).encode()
        request = urllib.request.Request(url, data=body, headers=headers or {})
        try:
            with self.opener.open(request, timeout=60) as r:
                return Answer(r.status, r.read().decode(), r.headers.get("Retry-After"))
        except urllib.error.HTTPError as e:  # 302 (not followed), 429
            return Answer(e.code, e.read().decode(), e.headers.get("Retry-After"))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclasses.dataclass
class Answer:
    status: int
    body: str
    retry_after: str | None


@pytest.fixture
def two_web_processes(tseeded) -> Iterator[tuple[WebServer, WebServer]]:
    """Two uvicorn processes on the test database, each with its own memory and connections."""
    with (
        web_process_on_test_database("test-web-a.log") as a,
        web_process_on_test_database("test-web-b.log") as b,
    ):
        assert a.proc.pid != b.proc.pid
        yield a, b


@pytest.mark.parametrize(
    ("path", "username"), [("/accounts/login/", NW_OWNER), ("/admin/login/", AUDITOR)]
)
def test_the_eleventh_attempt_spread_over_two_web_processes_is_429_in_both_until_the_cool_off(
    two_web_processes, path, username
):
    a, b = two_web_processes
    browser = Browser()
    # Ten wrong passwords, alternating between the processes: each is refused with the form.
    for i in range(10):
        wrong = browser.sign_in((a, b)[i % 2], path, username, "wrong")
        assert wrong.status == 200, (i, wrong.body[-500:])

    # The eleventh attempt is 429 from either process, though the password is right.
    for server in (a, b):
        blocked = browser.sign_in(server, path, username, PASSWORD)
        assert blocked.status == 429, (server.url, blocked.status, server.log())
        assert "Too many failed sign-in attempts" in blocked.body
        assert blocked.retry_after and 0 < int(blocked.retry_after) <= COOLOFF.total_seconds()
    # The lock is on the pair, not the page: the other sign-in form refuses it too.
    other = "/admin/login/" if path == "/accounts/login/" else "/accounts/login/"
    assert browser.sign_in(b, other, username, PASSWORD).status == 429
    # Another name from the same address is not locked.
    assert browser.sign_in(a, path, NW_AGENT, "wrong").status == 200

    cool_off_passes()
    signed_in = browser.sign_in(b, path, username, PASSWORD)
    assert signed_in.status == 302, signed_in.body[-500:]  # a right password signs in after it


def test_the_admin_login_is_throttled_by_the_same_count(seeded, fast_passwords):
    c = Client()
    for _ in range(10):
        r = c.post("/admin/login/", {"username": AUDITOR, "password": "wrong"})
        assert r.status_code == 200
    blocked = c.post("/admin/login/", {"username": AUDITOR, "password": PASSWORD})
    assert blocked.status_code == 429
    assert "Too many failed sign-in attempts" in blocked.content.decode()
    # The console's sign-in shares the lock: the pair is locked, not the page.
    assert post_login(c, PASSWORD, username=AUDITOR) == 429
    cool_off_passes()
    done = c.post("/admin/login/", {"username": AUDITOR, "password": PASSWORD})
    assert done.status_code == 302 and c.get("/admin/").status_code == 200


def test_failures_in_the_console_and_the_admin_add_up(seeded, fast_passwords):
    c = Client()
    for _ in range(5):
        assert post_login(c, "wrong") == 200
        assert c.post("/admin/login/", {"username": NW_OWNER, "password": "x"}).status_code == 200
    assert post_login(c, PASSWORD) == 429


def test_x_forwarded_for_is_ignored_without_a_trusted_proxy(seeded, fast_passwords):
    c = Client()
    for i in range(10):  # a client cannot dodge the count by making up a new address each time
        assert post_login(c, "wrong", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}") == 200
    assert post_login(c, PASSWORD, HTTP_X_FORWARDED_FOR="198.51.100.99") == 429
    assert set(LoginFailure.objects.values_list("address", flat=True)) == {"127.0.0.1"}


# --- through the web process started as the README starts it ----------------------------

# Three failures lock a pair here, so each test checks few (slow, real) password hashes.
SMALL_LIMIT = {"DESKHAND_LOGIN_FAILURE_LIMIT": "3"}


def test_a_forged_x_forwarded_for_moves_nothing_the_throttle_sees_from_an_untrusted_peer(
    tseeded,
):
    """``manage.py web`` with no trusted proxy: uvicorn's own proxy handling is off, even
    when the environment tells uvicorn to trust everyone (``FORWARDED_ALLOW_IPS=*``)."""
    env = {**SMALL_LIMIT, "FORWARDED_ALLOW_IPS": "*", "DESKHAND_TRUSTED_PROXIES": ""}
    with web_process_on_test_database("test-web-forged.log", env) as server:
        browser = Browser()
        for i in range(3):  # a new made-up address each time
            forged = {"X-Forwarded-For": f"198.51.100.{i}", "X-Real-IP": f"198.51.100.{i}"}
            wrong = browser.sign_in(server, "/accounts/login/", NW_OWNER, "wrong", forged)
            assert wrong.status == 200, (i, wrong.status, server.log())
        forged = {"X-Forwarded-For": "198.51.100.99"}
        blocked = browser.sign_in(server, "/accounts/login/", NW_OWNER, PASSWORD, forged)
        assert blocked.status == 429, (blocked.status, server.log())
        assert "from this address" in blocked.body
    assert set(LoginFailure.objects.values_list("address", flat=True)) == {"127.0.0.1"}


def test_behind_a_trusted_proxy_the_web_process_counts_the_client_it_names(tseeded):
    """``DESKHAND_TRUSTED_PROXIES=127.0.0.1``: the test is the proxy; each client it names
    is counted apart, and a made-up hop in front of the proxy's own changes nothing."""
    env = {**SMALL_LIMIT, "DESKHAND_TRUSTED_PROXIES": "127.0.0.1"}
    with web_process_on_test_database("test-web-proxied.log", env) as server:
        browser = Browser()
        client = {"X-Forwarded-For": "203.0.113.5"}
        for _ in range(3):
            assert browser.sign_in(server, "/accounts/login/", NW_OWNER, "x", client).status == 200
        spoofed = {"X-Forwarded-For": "192.0.2.1, 203.0.113.5"}
        assert (
            browser.sign_in(server, "/accounts/login/", NW_OWNER, PASSWORD, spoofed).status == 429
        )
        other = {"X-Forwarded-For": "203.0.113.6"}
        assert browser.sign_in(server, "/accounts/login/", NW_OWNER, PASSWORD, other).status == 302
    assert set(LoginFailure.objects.values_list("address", flat=True)) == {"203.0.113.5"}


@override_settings(DESKHAND_LOGIN_NAME_FAILURE_LIMIT=30)
def test_thirty_failures_spread_over_thirty_addresses_lock_the_name_from_everywhere(
    seeded, fast_passwords
):
    c = Client()
    for i in range(29):  # no address reaches its own limit of ten
        assert post_login(c, "wrong", REMOTE_ADDR=f"198.51.100.{i}") == 200
    assert post_login(c, "wrong", REMOTE_ADDR="198.51.100.29") == 200  # the thirtieth
    blocked = c.post(
        "/accounts/login/",
        {"username": NW_OWNER, "password": PASSWORD},
        REMOTE_ADDR="203.0.113.77",  # an address that never failed, with the right password
    )
    assert blocked.status_code == 429
    assert "locked from everywhere" in blocked.content.decode()
    assert 0 < int(blocked["Retry-After"]) <= COOLOFF.total_seconds()
    # The admin's sign-in shares it; another name is not locked.
    assert (
        c.post(
            "/admin/login/", {"username": NW_OWNER, "password": PASSWORD}, REMOTE_ADDR="192.0.2.8"
        ).status_code
        == 429
    )
    assert post_login(c, PASSWORD, username=NW_AGENT, REMOTE_ADDR="203.0.113.77") == 302
    cool_off_passes()
    assert post_login(Client(), PASSWORD, REMOTE_ADDR="203.0.113.77") == 302


@override_settings(DESKHAND_LOGIN_NAME_FAILURE_LIMIT=30)
def test_twenty_nine_failures_spread_over_addresses_lock_nothing(seeded, fast_passwords):
    c = Client()
    for i in range(29):
        assert post_login(c, "wrong", REMOTE_ADDR=f"198.51.100.{i}") == 200
    assert post_login(c, PASSWORD, REMOTE_ADDR="203.0.113.77") == 302


@override_settings(DESKHAND_TRUSTED_PROXIES=["127.0.0.1"])
def test_behind_a_trusted_proxy_the_forwarded_client_is_counted(seeded, fast_passwords):
    c = Client()  # REMOTE_ADDR 127.0.0.1: the proxy
    for _ in range(10):
        assert post_login(c, "wrong", HTTP_X_FORWARDED_FOR="203.0.113.5") == 200
    assert post_login(c, PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.5") == 429
    # A client that prepends a made-up hop is still who the proxy saw.
    assert post_login(c, PASSWORD, HTTP_X_FORWARDED_FOR="192.0.2.1, 203.0.113.5") == 429
    # Someone else behind the same proxy is not locked out.
    assert post_login(c, PASSWORD, HTTP_X_FORWARDED_FOR="203.0.113.6") == 302


@pytest.mark.parametrize(
    ("trusted", "remote", "forwarded", "expected"),
    [
        ([], "10.0.0.2", "203.0.113.5", "10.0.0.2"),
        (["10.0.0.0/8"], "10.0.0.2", "203.0.113.5", "203.0.113.5"),
        (["10.0.0.0/8"], "10.0.0.2", "198.51.100.7, 203.0.113.5, 10.0.0.9", "203.0.113.5"),
        (["10.0.0.0/8"], "192.0.2.50", "203.0.113.5", "192.0.2.50"),  # not from the proxy
        (["10.0.0.0/8"], "10.0.0.2", "", "10.0.0.2"),
        (["10.0.0.0/8"], "10.0.0.2", "not-an-address", "10.0.0.2"),
        (["10.0.0.0/8", "::1"], "::1", "2001:db8::5", "2001:db8::5"),
    ],
)
def test_client_address(trusted, remote, forwarded, expected):
    request = RequestFactory().get("/", REMOTE_ADDR=remote, HTTP_X_FORWARDED_FOR=forwarded)
    with override_settings(DESKHAND_TRUSTED_PROXIES=trusted):
        assert client_address(request) == expected
