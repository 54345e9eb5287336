"""How well ``kb_search`` finds the article that answers a customer's question, measured.

The labelled set lives in ``tests/fixtures/knowledge/``: a Zendesk Guide export of a coffee
shop's help center (``helpcenter_zendesk.json``) and customer questions written the way
customers write them, each with the id of the one article that answers it
(``questions.json``). It was committed before any tuning of the search, so the search was
tuned to the set and not the set to the search.

``kb_quality_measure`` imports the export through ``kb_import`` into a scratch merchant inside
a transaction it rolls back, so nothing it does outlives it, asks ``kb_search`` each question
and counts how often the wanted article is first, and among the first three.
"""

from __future__ import annotations

import json
import unicodedata
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from django.db import connection, transaction

from deskhand.domain.desk.knowledge import KbRefused, kb_import
from deskhand.domain.desk.models import KbArticle, Merchant
from deskhand.domain.desk.selectors import kb_search

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "knowledge"
EXPORT = "helpcenter_zendesk.json"
QUESTIONS = "questions.json"
TOP = 3


class SetInvalid(Exception):
    """The labelled set is missing or not what it should be, with the sentence that says so."""


@dataclass(frozen=True)
class Miss:
    question: str
    wanted: str
    got: list[str]  # the titles of the first ``TOP`` results


@dataclass
class Quality:
    articles: int
    questions: int
    no_shared_word: int  # questions sharing no content word with their article's title
    top1: float
    top3: float
    # The set's two halves (questions 1, 3, 5, … and 2, 4, 6, …): a tuning that helps only
    # the questions it was looked at for shows as a gap between them.
    top3_odd: float
    top3_even: float
    misses: list[Miss] = field(default_factory=list)  # the wanted article not in the top 3

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _labelled_set(folder: Path) -> tuple[bytes, list[tuple[str, str]]]:
    export, questions = folder / EXPORT, folder / QUESTIONS
    for path in (export, questions):
        if not path.is_file():
            raise SetInvalid(f"The labelled set needs {path}, and there is no such file.")
    try:
        doc = json.loads(questions.read_text("utf-8"))
        pairs = [(str(q["question"]), str(q["article_id"])) for q in doc["questions"]]
    except (ValueError, KeyError, TypeError):
        raise SetInvalid(
            f'{questions} is not {{"questions": [{{"question": …, "article_id": …}}, …]}}.'
        ) from None
    if not pairs:
        raise SetInvalid(f"{questions} holds no question.")
    return export.read_bytes(), pairs


def _content_words(text: str) -> set[str]:
    """The words of ``text`` that carry meaning, as Postgres's english configuration stems
    them with its stopwords dropped; accents are taken off first, so "cafe" and "cafés"
    count as one word (sharing a word is then easier, the count stricter)."""
    plain = unicodedata.normalize("NFKD", text)
    plain = "".join(c for c in plain if not unicodedata.combining(c))
    with connection.cursor() as cur:
        cur.execute("SELECT tsvector_to_array(to_tsvector('english', %s))", [plain])
        return set(cur.fetchone()[0])


def kb_quality_measure(folder: Path = FIXTURES) -> Quality:
    """Import the set into a scratch merchant, search each question, roll everything back."""
    data, pairs = _labelled_set(folder)
    with transaction.atomic():
        merchant = Merchant.objects.create(
            slug=f"kb-quality-{uuid.uuid4().hex[:8]}", name="Search quality (scratch)"
        )
        try:
            kb_import(merchant=merchant, filename=EXPORT, data=data, by_name="kb_quality")
        except KbRefused as e:
            raise SetInvalid(f"{folder / EXPORT} cannot be imported: {e}") from None
        titles = dict(
            KbArticle.objects.filter(merchant=merchant).values_list("external_id", "title")
        )
        unknown = sorted({wanted for _, wanted in pairs} - titles.keys())
        if unknown:
            raise SetInvalid(
                f"{folder / QUESTIONS} names article ids the export does not hold: {unknown}."
            )
        first = in_top = no_shared = 0
        halves = [0, 0]
        misses = []
        for i, (question, wanted) in enumerate(pairs):
            found = kb_search(merchant_id=merchant.pk, query=question, limit=TOP)
            ids = [a.external_id for a in found]
            first += ids[:1] == [wanted]
            in_top += wanted in ids
            halves[i % 2] += wanted in ids
            no_shared += not (_content_words(question) & _content_words(titles[wanted]))
            if wanted not in ids:
                misses.append(Miss(question, titles[wanted], [a.title for a in found]))
        transaction.set_rollback(True)
    return Quality(
        articles=len(titles),
        questions=len(pairs),
        no_shared_word=no_shared,
        top1=round(first / len(pairs), 3),
        top3=round(in_top / len(pairs), 3),
        top3_odd=round(halves[0] / max(1, len(pairs[0::2])), 3),
        top3_even=round(halves[1] / max(1, len(pairs[1::2])), 3),
        misses=misses,
    )
