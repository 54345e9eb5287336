"""The runs list: filters, search, keyset pages — and it stays fast with 100,000 runs."""

from __future__ import annotations

import re
import time

import pytest

from agent.models import Run
from deskhand.domain.desk.models import Merchant
from deskhand.web.console import selectors
from tests.console.conftest import NW_OWNER, client_for, make_run
from tests.devtools.synthetic import synthetic_generate


def run_links(body: str) -> list[str]:
    return re.findall(r'href="/runs/([0-9a-f-]{36})/"', body)


def test_filters_by_status_and_stop_reason(seeded):
    ok = make_run("NW-1", status="succeeded")
    failed = make_run("NW-2", status="failed", stop_reason="approval_expired")
    live = make_run("NW-3", status="running")
    c = client_for(NW_OWNER)
    assert run_links(c.get("/runs/", {"status": "failed"}).content.decode()) == [str(failed.pk)]
    assert run_links(c.get("/runs/", {"stop_reason": "end_turn"}).content.decode()) == [str(ok.pk)]
    assert run_links(c.get("/runs/", {"status": "running"}).content.decode()) == [str(live.pk)]


def test_search_by_ticket_reference_run_id_or_its_prefix(seeded):
    a = make_run("NW-1", status="succeeded")
    b = make_run("NW-2", status="succeeded")
    c = client_for(NW_OWNER)
    assert run_links(c.get("/runs/", {"q": "nw-2"}).content.decode()) == [str(b.pk)]
    assert run_links(c.get("/runs/", {"q": str(a.pk)}).content.decode()) == [str(a.pk)]
    assert str(a.pk) in run_links(c.get("/runs/", {"q": str(a.pk)[:8]}).content.decode())
    assert run_links(c.get("/runs/", {"q": "no such thing"}).content.decode()) == []


def test_keyset_pages_cover_every_run_once(seeded):
    synthetic_generate(260, seed=3)
    merchant = Merchant.objects.get(slug="northwind")
    seen: list[str] = []
    cursor = ""
    while True:
        page = selectors.runs_page(merchant_id=merchant.pk, cursor=cursor)
        seen.extend(str(r.pk) for r in page.rows)
        if not page.next_cursor:
            break
        cursor = page.next_cursor
    expected = [
        str(pk)
        for pk in Run.objects.filter(merchant=merchant)
        .order_by("-created_at", "-id")
        .values_list("pk", flat=True)
    ]
    assert seen == expected and len(seen) == 130


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_hundred_thousand_runs_list_fast_on_an_index(seeded, django_assert_max_num_queries):
    started = time.monotonic()
    # Without step rows: no query of the list reads them (they would be ~1.1 million rows
    # and three quarters of this test's time, 79 s alone on an idle two-core machine).
    synthetic_generate(100_000, seed=11, steps=False)
    # The bound only catches a slide back to row-by-row inserts (tens of minutes); a
    # shared, loaded box can make COPY itself several times slower.
    assert time.monotonic() - started < 300, "synthetic volume must be quick to make"
    merchant = Merchant.objects.get(slug="northwind")
    c = client_for(NW_OWNER)

    # 6 for the page, 2 for its money column (the runs' refunds, the open tickets' named
    # orders: per page, not per row), 4 for the navigation's attention counters (the fourth:
    # tickets at the daily message limit).
    with django_assert_max_num_queries(12):
        first = c.get("/runs/")
    assert (
        first.status_code == 200 and len(run_links(first.content.decode())) == selectors.PAGE_SIZE
    )

    # A page 40,000 runs deep costs what the first page costs: the same queries, and (below)
    # a plan that walks the index from the cursor. Not a wall-clock bound: on a shared
    # two-core box one took 1.75 s (speed lives in `make bench`, not in tests).
    deep_run = Run.objects.filter(merchant=merchant).order_by("-created_at", "-id")[40_000]
    cursor = selectors.run_cursor(deep_run)
    with django_assert_max_num_queries(12):
        deep = c.get("/runs/", {"cursor": cursor})
    links = run_links(deep.content.decode())
    assert len(links) == selectors.PAGE_SIZE and str(deep_run.pk) not in links
    with django_assert_max_num_queries(12):
        assert c.get("/runs/", {"status": "failed", "cursor": cursor}).status_code == 200
    with django_assert_max_num_queries(13):
        assert c.get("/runs/", {"q": str(deep_run.pk)[:6]}).status_code == 200

    plan = selectors.runs_page_queryset_for_explain(
        merchant_id=merchant.pk, cursor=cursor
    ).explain()
    assert "run_merchant_recent" in plan, plan
    assert "Seq Scan" not in plan, plan
