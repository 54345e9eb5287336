"""Knowledge in the console: written or imported (Markdown zip, Zendesk, Intercom), every
version kept, imports idempotent, hostile archives refused whole, rendered without script or
tracking image, drafts never searched."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from deskhand.domain.desk.models import KbArticle, KbArticleVersion, Merchant
from deskhand.domain.desk.selectors import kb_search
from tests.console.conftest import LU_OWNER, NW_AGENT, NW_OWNER, NW_VIEWER, client_for

pytestmark = pytest.mark.django_db

URL = "/knowledge/"


def _zendesk(*articles: tuple[int, str, str]) -> SimpleUploadedFile:
    doc = {
        "articles": [{"id": i, "title": t, "body": b, "locale": "en-us"} for i, t, b in articles]
    }
    return SimpleUploadedFile("articles.json", json.dumps(doc).encode(), "application/json")


def _zip(files: dict[str, bytes], name: str = "kb.zip") -> SimpleUploadedFile:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return SimpleUploadedFile(name, buf.getvalue(), "application/zip")


def _import(upload: SimpleUploadedFile, who: str = NW_OWNER) -> tuple[int, str]:
    r = client_for(who).post(URL, {"file": upload})
    return r.status_code, r.content.decode()


def _ours() -> int:
    return KbArticle.objects.filter(merchant__slug="northwind", source="zendesk").count()


def test_importing_the_same_zendesk_export_twice_changes_nothing_and_a_change_is_one_version(
    seeded,
):
    export = [
        (101, "Returns window", "<p>Returns within <b>30 days</b>.</p>"),
        (102, "Shipping", "<p>Ships in 2 days.</p>"),
    ]
    status, page = _import(_zendesk(*export))
    assert status == 201 and "2 new" in page
    versions = KbArticleVersion.objects.count()
    status, page = _import(_zendesk(*export))
    assert status == 201 and "0 new, 0 changed" in page and "2 unchanged" in page
    assert (_ours(), KbArticleVersion.objects.count()) == (2, versions)
    changed = [export[0], (102, "Shipping", "<p>Ships in 3 days.</p>")]
    status, page = _import(_zendesk(*changed))
    assert "1 changed" in page and KbArticleVersion.objects.count() == versions + 1
    shipping = KbArticle.objects.get(source="zendesk", external_id="102")
    assert shipping.version == 2 and "3 days" in shipping.body and "<p>" not in shipping.body
    old = client_for(NW_VIEWER).get(f"/knowledge/{shipping.slug}/v1/").content.decode()
    assert "2 days" in old and "version 2" in old  # the old one still readable


def test_a_zip_of_markdown_with_front_matter_imports_and_drafts_are_never_searched(seeded):
    status, page = _import(
        _zip(
            {
                "kb/grinder-care.md": b"---\ntitle: Caring for your grinder\n---\nClean the burrs monthly.",
                "kb/secret-plan.md": b"---\ntitle: Upcoming grinder sale\nstatus: draft\n---\nNot yet.",
                "__MACOSX/._grinder-care.md": b"",
            }
        )
    )
    assert status == 201 and "2 new" in page
    northwind = Merchant.objects.get(slug="northwind")
    found = [a.slug for a in kb_search(merchant_id=northwind.pk, query="grinder burrs")]
    assert "caring-for-your-grinder" in found
    assert not any("sale" in s for s in found)


@pytest.mark.parametrize(
    ("upload", "said"),
    [
        (lambda: _zip({"../../etc/passwd.md": b"x"}), "climbs out"),
        (lambda: _zip({"a.md": b"ok", "inner.zip": b"PK"}), "archive inside the archive"),
        (lambda: _zip({"a.md": b"ok", "photo.png": b"\x89PNG"}), "not a Markdown or text file"),
        (lambda: _zip({"bomb.md": b"a" * 2_000_000}), "times its size"),
        (lambda: _zip({"latin1.md": "caf\xe9".encode("latin-1")}), "not UTF-8"),
        (lambda: SimpleUploadedFile("x.json", b'{"nope": 1}'), "neither a Zendesk"),
        (lambda: SimpleUploadedFile("x.exe", b"MZ"), "Import a .zip"),
        (lambda: SimpleUploadedFile("kb.zip", b"not a zip"), "not a readable zip"),
    ],
)
def test_a_hostile_or_unreadable_import_is_refused_whole_with_the_reason(seeded, upload, said):
    before = (KbArticle.objects.count(), KbArticleVersion.objects.count())
    status, page = _import(upload())
    assert status == 400 and said in page
    assert (KbArticle.objects.count(), KbArticleVersion.objects.count()) == before


def test_an_article_renders_without_script_or_a_tracking_image(seeded):
    status, _ = _import(
        _zendesk(
            (
                7,
                "Sneaky",
                '<p>Hi</p><script>alert(1)</script><img src="https://t.example/p.gif"><a href="javascript:x()">x</a>',
            )
        )
    )
    assert status == 201
    article = KbArticle.objects.get(external_id="7")
    page = client_for(NW_AGENT).get(f"/knowledge/{article.slug}/").content.decode()
    body = page[page.index('class="kb-article"') :]
    assert "<script>alert" not in body and "t.example" not in body and "javascript:" not in body


def test_an_edit_in_the_console_is_a_new_version_and_the_same_text_is_none(seeded):
    owner = client_for(NW_OWNER)
    r = owner.post(URL, {"title": "Gift cards", "text": "They never expire.", "published": "on"})
    assert r.status_code == 302
    article = KbArticle.objects.get(title="Gift cards")
    same = owner.post(
        f"/knowledge/{article.slug}/",
        {"title": "Gift cards", "text": "They never expire.", "published": "on"},
    )
    assert "Nothing changed" in same.content.decode()
    owner.post(
        f"/knowledge/{article.slug}/",
        {"title": "Gift cards", "text": "They expire after 5 years.", "published": "on"},
    )
    article.refresh_from_db()
    assert article.version == 2 and article.versions.count() == 2


def test_viewers_read_knowledge_and_write_none_and_other_merchants_see_none(seeded):
    viewer = client_for(NW_VIEWER)
    assert viewer.get(URL).status_code == 200
    assert viewer.post(URL, {"title": "x", "text": "y"}).status_code == 403
    status, _ = _import(_zendesk((1, "A", "b")), who=NW_VIEWER)
    assert status == 403
    client_for(NW_OWNER).post(URL, {"title": "Northwind only", "text": "x", "published": "on"})
    assert client_for(LU_OWNER).get("/knowledge/northwind-only/").status_code == 404
    assert not KbArticle.objects.filter(title="x").exists()


def test_an_intercom_export_imports_its_published_and_draft_articles(seeded):
    doc = {
        "type": "list",
        "data": [
            {"id": "9001", "title": "Warranty", "body": "<p>Two years.</p>", "state": "published"},
            {
                "id": "9002",
                "title": "New warranty",
                "body": "<p>Three years.</p>",
                "state": "draft",
            },
        ],
    }
    status, page = _import(SimpleUploadedFile("intercom.json", json.dumps(doc).encode()))
    assert status == 201 and "2 new" in page
    states = dict(
        KbArticle.objects.filter(source="intercom").values_list("external_id", "published")
    )
    assert states == {"9001": True, "9002": False}


def test_search_finds_a_synonym_below_the_customers_own_word_and_reads_any_alphabet(seeded):
    _import(
        _zendesk(
            (301, "Warranty on kettles", "<p>Kettles carry a two-year warranty.</p>"),
            (302, "Our price guarantee", "<p>We guarantee the lowest price.</p>"),
            (303, "Wholesale for cafés", "<p>Cafés buy beans by the sack.</p>"),
        )
    )
    northwind = Merchant.objects.get(slug="northwind")

    def found(query: str) -> list[str]:
        return [a.external_id for a in kb_search(merchant_id=northwind.pk, query=query)]

    # "guarantees" finds both; the article using the customer's own word comes first.
    assert found("kettle guarantees")[:1] == ["301"]  # the title's "kettle" outweighs
    assert found("guarantees")[:2] == ["302", "301"]
    assert found("warranty")[:2] == ["301", "302"]
    assert found("we are a café")[:1] == ["303"]  # not "caf"
    # Query syntax typed by a customer is a word or nothing, never an error.
    assert {"302", "303"} <= set(found("café' | !(guarantee:*"))
    assert found("'|&!():*<>") == []
