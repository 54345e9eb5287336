"""The edge's answers, one by one: the 400s issue 14 found as 500s, the 405 sentence, the 503."""

from __future__ import annotations

import re

import pytest
from asgiref.sync import async_to_sync
from django.db import OperationalError
from django.test import AsyncClient, RequestFactory

from deskhand.infra.edge.admin_guard import BAD_FILTER
from deskhand.infra.edge.views import server_error
from tests.console.conftest import AUDITOR, NW_OWNER, client_for, make_run, model_step


def test_a_nul_byte_in_a_ticket_path_is_a_400_with_a_sentence(seeded):
    response = client_for(NW_OWNER).get("/tickets/NW-1%00/")
    assert response.status_code == 400
    assert "control character (such as a NUL byte)" in response.content.decode()


def test_a_nul_byte_is_refused_under_asgi_too(seeded):
    response = async_to_sync(AsyncClient().get)("/tickets/%00/")
    assert response.status_code == 400
    assert "control character" in response.content.decode()


SECURITY_HEADERS = (
    "X-Frame-Options",
    "X-Content-Type-Options",
    "Referrer-Policy",
    "Cross-Origin-Opener-Policy",
    "Content-Security-Policy",
)


def _security_headers(response) -> dict[str, str | None]:
    """The response's security headers, the per-response CSP nonce left out."""
    return {
        name: re.sub(r"'nonce-[^']*'", "'nonce'", response.get(name, "")) or None
        for name in SECURITY_HEADERS
    }


@pytest.mark.parametrize("path", ["/tickets/%00/", "/tickets/?q=%00"])
def test_the_page_refusing_a_malformed_request_carries_every_pages_security_headers(seeded, path):
    client = client_for(NW_OWNER)
    refused = client.get(path)
    assert refused.status_code == 400
    assert refused["X-Frame-Options"] == "DENY"
    assert _security_headers(refused) == _security_headers(client.get("/tickets/"))


def test_a_nul_byte_in_a_query_is_a_400(seeded):
    response = client_for(AUDITOR).get("/admin/agent/run/?status__exact=%00")
    assert response.status_code == 400
    assert "query parameter contains a control character" in response.content.decode()


@pytest.mark.parametrize(
    "query",
    [
        "created_at__year=10000",
        "created_at__year=0",
        "created_at__year=" + "9" * 40,
        "created_at__gte=99999-01-01",
        "merchant__id__exact=abc",
    ],
)
def test_an_admin_filter_that_cannot_be_applied_is_a_400_not_a_500_or_a_redirect(seeded, query):
    response = client_for(AUDITOR).get(f"/admin/agent/run/?{query}")
    assert response.status_code == 400
    assert BAD_FILTER in response.content.decode()


def test_good_admin_filters_still_filter(seeded):
    response = client_for(AUDITOR).get("/admin/agent/run/?created_at__year=2026&status__exact=x")
    assert response.status_code == 200


@pytest.mark.parametrize("after", ["\u00b2", "\u0663", "\uff11", "-1", "1" * 10])
def test_after_takes_ascii_digits_only_on_the_steps_url(seeded, after):
    run = make_run("NW-1")
    model_step(run, 1, text="hello")
    c = client_for(NW_OWNER)
    response = c.get(f"/runs/{run.pk}/steps", {"after": after}, HTTP_HX_REQUEST="true")
    assert response.status_code == 400
    assert "after must be a step number." in response.content.decode()
    assert c.get(f"/runs/{run.pk}/steps", {"after": "1"}, HTTP_HX_REQUEST="true").status_code == (
        200
    )


@pytest.mark.parametrize("last_event_id", ["\u00b2", "\u0663", "x"])
def test_last_event_id_takes_ascii_digits_only_on_the_stream_url(seeded, last_event_id):
    run = make_run("NW-1")
    response = client_for(NW_OWNER).get(f"/runs/{run.pk}/stream", HTTP_LAST_EVENT_ID=last_event_id)
    assert response.status_code == 400
    assert b"must be a step number" in response.content


def test_a_get_to_a_post_only_action_is_a_405_with_a_sentence(seeded):
    run = make_run("NW-1")
    response = client_for(NW_OWNER).get(f"/runs/{run.pk}/cancel")
    assert response.status_code == 405
    assert response.content.decode().startswith("This address does not take that method")
    assert "POST" in response.content.decode()


def test_what_no_view_caught_is_a_503_when_the_database_is_down():
    request = RequestFactory().get("/")
    try:
        raise OperationalError("the database system is shutting down")
    except OperationalError:
        response = server_error(request)
    assert response.status_code == 503 and response["Retry-After"] == "5"
    assert "The database is not reachable right now" in response.content.decode()
    try:
        raise RuntimeError("something else")
    except RuntimeError:
        assert server_error(request).status_code == 500
