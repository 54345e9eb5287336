"""Knowledge search measured, not assumed: the labelled set in ``tests/fixtures/knowledge``
(a coffee shop's Zendesk export and customer questions, committed before any tuning) is big
and hard enough, and the share of questions whose article search puts in its top three is
pinned, so a change to the ranking cannot quietly make it worse."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from deskhand.domain.desk.models import KbArticle, Merchant
from tests.devtools.kb_quality import EXPORT, FIXTURES, QUESTIONS, kb_quality_measure

pytestmark = pytest.mark.django_db

# Measured by ``manage.py kb_quality`` (docs/merchants.md, Knowledge, Search): 56 of 63 in
# the top three, 43 first; 30 of 32 odd questions, 26 of 31 even ones. Issue 38 asks for 0.85.
TOP3_PINNED = 0.889
TOP1_PINNED = 0.683
TOP3_ODD_PINNED, TOP3_EVEN_PINNED = 0.938, 0.839


def test_search_puts_the_answering_article_in_its_top_three_as_often_as_measured():
    before = (Merchant.objects.count(), KbArticle.objects.count())
    q = kb_quality_measure()
    assert q.articles >= 60 and q.questions >= 40
    assert q.no_shared_word >= 10  # questions that share no content word with the title
    assert q.top3 >= TOP3_PINNED, [(m.question, m.wanted, m.got) for m in q.misses]
    assert q.top1 >= TOP1_PINNED
    assert q.top3_odd >= TOP3_ODD_PINNED and q.top3_even >= TOP3_EVEN_PINNED
    assert (Merchant.objects.count(), KbArticle.objects.count()) == before  # rolled back


def test_the_command_prints_the_rates_and_refuses_a_missing_or_broken_set(tmp_path: Path):
    out = StringIO()
    call_command("kb_quality", "--json", stdout=out)
    printed = json.loads(out.getvalue())
    assert printed["top3"] >= TOP3_PINNED and printed["questions"] >= 40
    assert {"top1", "top3_odd", "top3_even", "no_shared_word", "misses"} <= printed.keys()
    out = StringIO()
    call_command("kb_quality", stdout=out)
    assert f"top-3 {printed['top3']:.3f}" in out.getvalue()
    assert f"on the odd questions {printed['top3_odd']:.3f}" in out.getvalue()

    with pytest.raises(CommandError, match="no such file"):
        call_command("kb_quality", "--set", str(tmp_path))
    (tmp_path / EXPORT).write_bytes((FIXTURES / EXPORT).read_bytes())
    (tmp_path / QUESTIONS).write_text('{"questions": [{"question": "hi"}]}')
    with pytest.raises(CommandError, match="is not"):
        call_command("kb_quality", "--set", str(tmp_path))
    (tmp_path / QUESTIONS).write_text('{"questions": [{"question": "hi", "article_id": 7}]}')
    with pytest.raises(CommandError, match="does not hold"):
        call_command("kb_quality", "--set", str(tmp_path))
