"""Knowledge articles: writing one, keeping every version, importing a help center's export.

**Versions.** Saving an article whose title, text and state are unchanged does nothing; any
change is a new ``KbArticleVersion`` and the article's current copy moves to it. Nothing is
ever rewritten, so a replay of a run that read version 2 can show version 2.

**Import** (``kb_import``), idempotent: each article is keyed by where it came from
(``source``, ``external_id``: a Zendesk or Intercom id, a Markdown file's ``id`` or path), so
importing the same export twice changes nothing and a changed article becomes one new
version. Accepted: a Markdown file, a zip of Markdown files with optional front matter
(``title``, ``slug``, ``status: draft``, ``id``), a Zendesk Guide ``articles`` export (JSON,
HTML bodies) and an Intercom articles export (JSON). A whole import is one transaction: an
archive over a limit (compressed, uncompressed, or by compression ratio), nested, with a path
that climbs out, or holding anything but UTF-8 text is refused with the reason and nothing
of it is stored.

**Rendering** (``kb_html``): Markdown through markdown-it with raw HTML off, an export's HTML
as it is, and both through nh3 with no script, no style, no image (a remote image tracks
whoever reads the page) and links marked ``noopener``. The agent reads ``body``: plain text.

**Ranking** (``kb_ranked``): BM25F over the stored full-text vector, a customer's words
widened by a short list of support synonyms (``SYNONYMS``), see its docstring.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import posixpath
import re
import zipfile
from dataclasses import dataclass, field
from typing import Any

import nh3
import yaml
from django.db import connection, transaction
from django.utils.text import slugify
from markdown_it import MarkdownIt

from deskhand.domain.desk.models import KbArticle, KbArticleVersion, Merchant

TITLE_MAX = 200
TEXT_MAX = 200_000  # characters of one article
UPLOAD_MAX = 10 * 1024 * 1024  # bytes of the file sent
UNZIPPED_MAX = 50 * 1024 * 1024  # bytes of everything in an archive
RATIO_MAX = 100  # uncompressed ÷ compressed, per file: more is a zip bomb
FILES_MAX = 2000
TEXT_SUFFIXES = (".md", ".markdown", ".txt")
IGNORED = ("__MACOSX/", ".DS_Store")
SAFE_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "dd", "del", "div", "dl", "dt", "em",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "kbd", "li", "ol", "p", "pre", "s",
    "span", "strong", "sub", "sup", "table", "tbody", "td", "th", "thead", "tr", "u", "ul",
}  # fmt: skip
_MD = MarkdownIt("commonmark", {"html": False}).enable("table")


class KbRefused(Exception):
    """Input that cannot be an article or an import, with the sentence that says why."""


@dataclass
class ImportReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)

    def sentence(self) -> str:
        return (
            f"{len(self.created)} new, {len(self.updated)} changed (a new version each),"
            f" {len(self.unchanged)} unchanged."
        )


@dataclass(frozen=True)
class Draft:
    """One article as an import or a form gives it."""

    title: str
    source_text: str
    source_format: str  # "markdown" or "html"
    published: bool = True
    slug: str = ""
    external_id: str = ""


def kb_html(source_text: str, source_format: str) -> str:
    """The article as safe HTML for a page (see the module)."""
    raw = _MD.render(source_text) if source_format == "markdown" else source_text
    return nh3.clean(
        raw,
        tags=SAFE_TAGS,
        attributes={
            "a": {"href", "title"},
            "abbr": {"title"},
            "td": {"colspan"},
            "th": {"colspan"},
        },
        url_schemes={"http", "https", "mailto"},
        link_rel="noopener noreferrer nofollow",
    )


def kb_text(source_text: str, source_format: str) -> str:
    """The plain text the agent reads and search ranks."""
    if source_format == "markdown":
        return source_text.strip()
    blocks = re.sub(r"(?i)<\s*(br|/p|/div|/li|/h[1-6]|/tr)\s*/?>", "\n", source_text)
    text = html.unescape(nh3.clean(blocks, tags=set()))
    return "\n".join(" ".join(line.split()) for line in text.splitlines()).strip()


def _hash(d: Draft) -> str:
    return hashlib.sha256(f"{d.title}\n{d.source_text}\n{int(d.published)}".encode()).hexdigest()


def _checked(d: Draft) -> Draft:
    title = " ".join(d.title.split())
    if not title:
        raise KbRefused("An article needs a title.")
    if len(title) > TITLE_MAX:
        raise KbRefused(f"A title is at most {TITLE_MAX} characters ({title[:40]!r}…).")
    if len(d.source_text) > TEXT_MAX:
        raise KbRefused(f"{title!r} is longer than {TEXT_MAX:,} characters.")
    if d.source_format not in ("markdown", "html"):
        raise KbRefused(f"unknown format {d.source_format!r}.")
    return Draft(title, d.source_text, d.source_format, d.published, d.slug, d.external_id)


def _free_slug(merchant: Merchant, wanted: str, title: str) -> str:
    base = slugify(wanted or title)[:45] or "article"
    slug, n = base, 1
    while KbArticle.objects.filter(merchant=merchant, slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


def article_save(
    *,
    merchant: Merchant,
    draft: Draft,
    by_name: str,
    article: KbArticle | None = None,
    source: str = "console",
) -> tuple[KbArticle, str]:
    """Create or change an article; ``(article, "created" | "updated" | "unchanged")``."""
    d = _checked(draft)
    with transaction.atomic():
        if article is None and d.external_id:
            article = (
                KbArticle.objects.select_for_update()
                .filter(merchant=merchant, source=source, external_id=d.external_id)
                .first()
            )
        if article is not None:
            article = KbArticle.objects.select_for_update().get(pk=article.pk)
            current = article.versions.filter(version=article.version).first()
            if current is not None and current.content_hash == _hash(d):
                return article, "unchanged"
            article.version += 1
            outcome = "updated"
        else:
            article = KbArticle(
                merchant=merchant,
                slug=_free_slug(merchant, d.slug, d.title),
                source=source,
                external_id=d.external_id,
                version=1,
            )
            outcome = "created"
        article.title, article.body = d.title, kb_text(d.source_text, d.source_format)
        article.published = d.published
        article.save()
        KbArticleVersion.objects.create(
            article=article,
            version=article.version,
            title=d.title,
            source_text=d.source_text,
            source_format=d.source_format,
            body=article.body,
            published=d.published,
            content_hash=_hash(d),
            created_by_name=by_name,
        )
        return article, outcome


# --- import ------------------------------------------------------------------------


def kb_import(*, merchant: Merchant, filename: str, data: bytes, by_name: str) -> ImportReport:
    """Import a Markdown file, a zip of them, or a Zendesk or Intercom export (see the module)."""
    if len(data) > UPLOAD_MAX:
        raise KbRefused(f"The file is over {UPLOAD_MAX // 1024 // 1024} MB.")
    name = (filename or "").lower()
    if name.endswith(".zip"):
        source, drafts = "markdown", _from_zip(data)
    elif name.endswith(".json"):
        source, drafts = _from_json(data)
    elif name.endswith(TEXT_SUFFIXES):
        source, drafts = "markdown", [_from_markdown(filename, _utf8(filename, data))]
    else:
        raise KbRefused(
            "Import a .zip of Markdown files, a .md file, or a Zendesk or Intercom .json export."
        )
    if not drafts:
        raise KbRefused("There is no article in it.")
    report = ImportReport()
    with transaction.atomic():
        for d in drafts:
            article, outcome = article_save(
                merchant=merchant, draft=d, by_name=by_name, source=source
            )
            getattr(report, outcome).append(article.slug)
    return report


def _utf8(name: str, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise KbRefused(f"{name} is not UTF-8 text.") from None


def _from_zip(data: bytes) -> list[Draft]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, OSError):
        raise KbRefused("The file is not a readable zip archive.") from None
    if len(infos) > FILES_MAX:
        raise KbRefused(f"The archive holds more than {FILES_MAX} files.")
    total = sum(i.file_size for i in infos)
    if total > UNZIPPED_MAX:
        raise KbRefused(f"Unpacked, the archive is over {UNZIPPED_MAX // 1024 // 1024} MB.")
    drafts = []
    for info in infos:
        path = info.filename
        if path.startswith("/") or "\\" in path or ".." in path.split("/"):
            raise KbRefused(f"{path[:100]!r} climbs out of the archive.")
        if info.is_dir() or any(path.startswith(i) or path.endswith(i) for i in IGNORED):
            continue
        if path.lower().endswith(".zip"):
            raise KbRefused(f"{path[:100]!r} is an archive inside the archive: unpack it first.")
        if not path.lower().endswith(TEXT_SUFFIXES):
            raise KbRefused(f"{path[:100]!r} is not a Markdown or text file.")
        if info.compress_size and info.file_size / info.compress_size > RATIO_MAX:
            raise KbRefused(f"{path[:100]!r} unpacks to over {RATIO_MAX} times its size.")
        with archive.open(info) as f:
            raw = f.read(TEXT_MAX * 4 + 1)
        drafts.append(_from_markdown(path, _utf8(path, raw)))
    return drafts


_FRONT = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.S)


def _from_markdown(path: str, text: str) -> Draft:
    meta: dict[str, Any] = {}
    found = _FRONT.match(text)
    if found:
        try:
            loaded = yaml.safe_load(found.group(1))
        except yaml.YAMLError:
            raise KbRefused(f"{path[:100]!r}: its front matter is not readable YAML.") from None
        meta = loaded if isinstance(loaded, dict) else {}
        text = text[found.end() :]
    title = str(meta.get("title") or "").strip()
    if not title:
        heading = re.search(r"^#\s+(.+)$", text, re.M)
        stem = posixpath.splitext(posixpath.basename(path))[0]
        title = heading.group(1).strip() if heading else stem.replace("-", " ").replace("_", " ")
    return Draft(
        title=title,
        source_text=text.strip(),
        source_format="markdown",
        published=str(meta.get("status", "published")).lower() != "draft",
        slug=str(meta.get("slug") or ""),
        external_id=str(meta.get("id") or path)[:200],
    )


def _from_json(data: bytes) -> tuple[str, list[Draft]]:
    try:
        doc = json.loads(_utf8("The export", data))
    except json.JSONDecodeError:
        raise KbRefused("The .json file is not JSON.") from None
    if isinstance(doc, dict) and isinstance(doc.get("articles"), list):
        return "zendesk", [_zendesk(a) for a in doc["articles"]]
    items = doc.get("data") if isinstance(doc, dict) else doc
    if isinstance(items, list) and all(isinstance(a, dict) and "state" in a for a in items):
        return "intercom", [_intercom(a) for a in items]
    raise KbRefused(
        'The JSON is neither a Zendesk Guide export ({"articles": […]}) nor an Intercom'
        ' articles export ({"data": […]} of articles with a state).'
    )


def _field(a: Any, key: str) -> str:
    if not isinstance(a, dict) or a.get(key) is None:
        raise KbRefused(f"An article of the export has no {key}.")
    return str(a[key])


def _zendesk(a: Any) -> Draft:
    return Draft(
        title=_field(a, "title"),
        source_text=str(a.get("body") or ""),
        source_format="html",
        published=not a.get("draft", False),
        external_id=_field(a, "id"),
    )


def _intercom(a: Any) -> Draft:
    return Draft(
        title=_field(a, "title"),
        source_text=str(a.get("body") or ""),
        source_format="html",
        published=str(a.get("state")) == "published",
        external_id=_field(a, "id"),
    )


# --- ranking -----------------------------------------------------------------------

# BM25F's textbook constants, not fitted to any set: term-frequency saturation, how much a
# field's length discounts a match in it, and a title word worth the stored vector's A/B
# weight ratio (1.0 / 0.4) of a body word.
BM25_K1, BM25_B, BM25_TITLE = 1.2, 0.75, 2.5

# Words customers and help centres use for one thing, each group interchangeable. General
# support vocabulary (orders, delivery, returns, payment, accounts) and British/American
# spellings, written for any shop: not fitted to a labelled question, and most groups are
# used by none of them. A word the customer wrote counts in full, its group's other words
# ``SYNONYM_WEIGHT`` of that, so a synonym helps an article the customer's own words do not
# find, and does not outrank one they do. A phrase counts word by word.
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("warranty", "guarantee"),
    ("repair", "fix", "mend"),
    ("exchange", "swap"),
    ("gift", "present"),
    ("declined", "rejected", "refused"),
    ("parcel", "package", "packet", "shipment"),
    ("postage", "shipping"),
    ("courier", "carrier"),
    ("next day", "tomorrow", "overnight"),
    ("refund", "reimburse", "money back"),
    ("broken", "faulty", "defective"),
    ("receipt", "invoice"),
    ("discount", "coupon", "voucher", "promo"),
    ("unsubscribe", "opt out"),
    ("wholesale", "bulk", "trade"),
    ("purchase", "order"),
    ("lost", "missing"),
    ("late", "delayed", "overdue"),
    ("login", "log in", "sign in"),
    ("instalment", "installment"),
    ("colour", "color"),
    ("programme", "program"),
    ("cheque", "check"),
    ("jewellery", "jewelry"),
)
SYNONYM_WEIGHT = 0.5


def _forms(word: str) -> set[str]:
    """A word and its regular inflections ("fix": "fixes", "fixed", "fixing")."""
    stem = word[:-1] if word.endswith("e") else word
    return {word, word + "s", word + "es", word + "d", word + "ed", stem + "ing"}


def _said(phrase: str, words: list[str]) -> bool:
    parts = phrase.split()
    last = _forms(parts[-1])
    n = len(parts)
    return any(
        words[i : i + n - 1] == parts[:-1] and words[i + n - 1] in last
        for i in range(len(words) - n + 1)
    )


def kb_expanded(words: list[str]) -> list[tuple[str, float]]:
    """``words`` with weight 1, and the words of their synonyms (``SYNONYMS``) with less."""
    weighted = dict.fromkeys(words, 1.0)
    for group in SYNONYMS:
        if any(_said(phrase, words) for phrase in group):
            for phrase in group:
                for w in phrase.split():
                    weighted.setdefault(w, SYNONYM_WEIGHT)
    return list(weighted.items())


_RANKED = f"""
WITH asked AS (
  SELECT lexeme, max(q.w) AS w
  FROM unnest(%(words)s::text[], %(weights)s::float[]) AS q(word, w),
    unnest(tsvector_to_array(to_tsvector('english', q.word))) AS lexeme
  GROUP BY lexeme
), docs AS (
  SELECT a.id, a.slug, a.search,
    (SELECT count(*) FROM unnest(a.search) u, unnest(u.weights) w WHERE w = 'A') AS title_len,
    (SELECT count(*) FROM unnest(a.search) u, unnest(u.weights) w WHERE w <> 'A') AS body_len
  FROM {KbArticle._meta.db_table} a
  WHERE a.merchant_id = %(merchant)s AND a.published
    AND a.search @@ (SELECT string_agg(quote_literal(lexeme), ' | ') FROM asked)::tsquery
), stats AS (
  SELECT (SELECT count(*) FROM {KbArticle._meta.db_table}
          WHERE merchant_id = %(merchant)s AND published)::float AS n,
    greatest(avg(title_len), 1)::float AS title_avg, greatest(avg(body_len), 1)::float AS body_avg
  FROM docs
), hits AS (
  SELECT d.id, d.slug, u.lexeme,
    %(title)s * cardinality(array_positions(u.weights, 'A'))
      / (1 - %(b)s + %(b)s * d.title_len / s.title_avg)
    + (cardinality(u.weights) - cardinality(array_positions(u.weights, 'A')))
      / (1 - %(b)s + %(b)s * d.body_len / s.body_avg) AS tf
  FROM docs d CROSS JOIN stats s CROSS JOIN unnest(d.search) u
  WHERE u.lexeme IN (SELECT lexeme FROM asked)
), idf AS (
  SELECT h.lexeme, ln(1 + (s.n - count(*) + 0.5) / (count(*) + 0.5)) AS idf
  FROM hits h CROSS JOIN stats s GROUP BY h.lexeme, s.n
)
SELECT h.id FROM hits h JOIN idf USING (lexeme) JOIN asked USING (lexeme)
GROUP BY h.id, h.slug
ORDER BY sum(asked.w * idf.idf * h.tf / (%(k1)s + h.tf)) DESC, h.slug
LIMIT %(limit)s
"""


def kb_ranked(*, merchant_id: int, words: list[str], limit: int) -> list[int]:
    """The ids of the merchant's published articles holding any of ``words``, best first.

    BM25F over the stored vector (title weight A, body weight B, english stemming and
    stopwords). Each query word counts by its rarity among the merchant's articles (IDF), so
    "machine", in a third of a coffee shop's articles, weighs less than "descale", in a few.
    Repeats of a word saturate (``BM25_K1``). A match in a short title or body counts more
    than one in a long one (``BM25_B``, per field; the average length is taken over the
    matching articles, which keeps the query on the GIN index). A title match counts
    ``BM25_TITLE`` body matches.
    Postgres's own ``ts_rank`` has neither IDF nor per-field length, and measured worse
    (``manage.py kb_quality``). Ties keep the slug order, so a search repeats itself.
    The OR query is built from the lexemes Postgres made of ``words``, each quoted, so no
    character a customer typed is read as query syntax.
    """
    weighted = kb_expanded(words)
    with connection.cursor() as cur:
        cur.execute(
            _RANKED,
            {
                "words": [w for w, _ in weighted],
                "weights": [x for _, x in weighted],
                "merchant": merchant_id,
                "title": BM25_TITLE,
                "b": BM25_B,
                "k1": BM25_K1,
                "limit": limit,
            },
        )
        return [row[0] for row in cur.fetchall()]
