"""Search by what a support lead remembers, and the short run id as an address (issue 29)."""

from __future__ import annotations

import uuid

import pytest

from agent.models import Run
from tests.console.conftest import LU_OWNER, NW_OWNER, client_for, make_approval, make_run


@pytest.fixture
def runs(seeded) -> tuple[Run, Run]:
    nw = make_run("NW-1", status="awaiting_approval")
    make_approval(nw, order="NW-1042")
    lu = make_run("LU-1", "lumen", status="succeeded")
    return nw, lu


def test_the_search_page_finds_a_run_by_short_id_email_and_order_reference(runs):
    nw, _ = runs
    c = client_for(NW_OWNER)
    email = nw.ticket.customer.email
    for q in (str(nw.pk)[:8], email, "NW-1042", "nw-1", nw.ticket.customer.name.split()[0]):
        body = c.get("/search/", {"q": q}).content.decode()
        assert f'id="run-{nw.pk}"' in body, q


def test_search_never_shows_another_merchants_runs(runs):
    _, lu = runs
    body = client_for(NW_OWNER).get("/search/", {"q": str(lu.pk)[:8]}).content.decode()
    assert f'id="run-{lu.pk}"' not in body
    assert "Nothing matches" in body


def test_the_short_run_id_redirects_to_the_run(runs):
    nw, lu = runs
    c = client_for(NW_OWNER)
    response = c.get(f"/runs/{str(nw.pk)[:8]}/")
    assert response.status_code == 302 and response["Location"] == f"/runs/{nw.pk}/"
    # Another merchant's run, or no run at all: 404 with a sentence.
    assert c.get(f"/runs/{str(lu.pk)[:8]}/").status_code == 404
    assert client_for(LU_OWNER).get(f"/runs/{str(nw.pk)[:8]}/").status_code == 404
    missing = c.get("/runs/zzzz-not-hex/")
    assert missing.status_code == 404 and "No run of yours" in missing.content.decode()


def test_an_ambiguous_short_id_is_a_404_that_says_so(seeded):
    make_run("NW-2", status="succeeded", id=uuid.UUID("abcd1234-0000-4000-8000-000000000001"))
    make_run("NW-3", status="succeeded", id=uuid.UUID("abcd1234-0000-4000-8000-000000000002"))
    c = client_for(NW_OWNER)
    response = c.get("/runs/abcd1234/")
    assert response.status_code == 404
    assert "More than one run starts with abcd1234" in response.content.decode()
    longer = c.get("/runs/abcd1234-0000-4000-8000-00000000000/")
    assert longer.status_code == 404  # still two
    assert c.get("/runs/abcd1234-0000-4000-8000-0000000000/").status_code == 404


def test_the_search_box_is_on_every_page(runs):
    body = client_for(NW_OWNER).get("/approvals/").content.decode()
    assert 'role="search"' in body and 'action="/search/"' in body
