"""A run records which article versions it read; the run page and ``replay --at`` show them,
and after the article changes they still show the version the run read, whose text stays
reachable."""

from __future__ import annotations

import json

import pytest

from agent.models import Step
from agent.providers.scripted import call, say
from deskhand.domain.desk.knowledge import Draft, article_save, kb_import
from deskhand.domain.desk.models import KbArticle, Merchant
from tests.console.conftest import NW_OWNER, client_for
from tests.durability.helpers import start
from tests.fixtures.dbos import wait_terminal
from tests.replay.conftest import replay_cmd

pytestmark = pytest.mark.django_db(transaction=True)

V1 = (
    "---\ntitle: Descaling your espresso machine\nid: kb-descale\n---\n"
    "Descale every two months with our citric descaler."
)


def test_the_run_page_and_replay_show_the_version_read_after_the_article_changed(
    dbos_executor, provide
):
    northwind = Merchant.objects.get(slug="northwind")
    kb_import(merchant=northwind, filename="descaling.md", data=V1.encode(), by_name="test")
    article = KbArticle.objects.get(merchant=northwind, external_id="kb-descale")
    provide(
        [
            [call("search_kb", query="how do I descale the espresso machine")],
            [say("Read the descaling article.")],
        ]
    )
    run = wait_terminal(str(start("NW-1", NW_OWNER).id))
    assert run.status == "succeeded", run.summary
    search = Step.objects.get(run=run, kind="tool", tool="search_kb")

    # The article moves on: a new title and text, version 2.
    article_save(
        merchant=northwind,
        article=article,
        by_name="test",
        draft=Draft("How to descale", "Descale monthly with vinegar.", "markdown"),
    )
    article.refresh_from_db()
    assert (article.version, article.title) == (2, "How to descale")

    owner = client_for(NW_OWNER)
    page = owner.get(f"/runs/{run.id}/").content.decode()
    assert "Knowledge read" in page
    v1_path = f"/knowledge/{article.slug}/v1/"
    assert f'href="{v1_path}">Descaling your espresso machine</a>' in page
    assert f"version 1, read at step {search.seq}" in page
    assert "How to descale" not in page and "/v2/" not in page
    v1 = owner.get(v1_path)
    assert v1.status_code == 200 and "citric descaler" in v1.content.decode()

    # The console's replay page, as ``--at`` prints it: after the search, and not before it.
    after = owner.get(f"/runs/{run.id}/replay/{search.seq + 1}/").content.decode()
    assert f"Knowledge read before step {search.seq + 1}" in after
    assert f'href="{v1_path}">Descaling your espresso machine</a>' in after
    before = owner.get(f"/runs/{run.id}/replay/{search.seq}/").content.decode()
    assert "Knowledge read" not in before and "What the model" in before

    code, out = replay_cmd(str(run.id), "--at", str(search.seq + 1))
    assert code == 0, out
    assert f"── knowledge read before step {search.seq + 1} (1) ──" in out
    assert (
        f'"Descaling your espresso machine", version 1, read at step {search.seq}: {v1_path}' in out
    )
    code, out = replay_cmd(str(run.id), "--at", str(search.seq + 1), "--json")
    assert json.loads(out)["knowledge_read"] == [
        {
            "seq": search.seq,
            "slug": article.slug,
            "version": 1,
            "title": "Descaling your espresso machine",
            "path": v1_path,
        }
    ]
    # Before the search, nothing was read.
    code, out = replay_cmd(str(run.id), "--at", str(search.seq), "--json")
    assert json.loads(out)["knowledge_read"] == []


def test_a_run_that_read_no_article_shows_no_knowledge_section(dbos_executor, provide):
    provide([[say("Nothing to look up.")]])
    run = wait_terminal(str(start("NW-1", NW_OWNER).id))
    page = client_for(NW_OWNER).get(f"/runs/{run.id}/").content.decode()
    assert run.status == "succeeded" and "Knowledge read" not in page
