"""What a support inbox must not take at face value: machines writing, quoted history, HTML.

- ``automated``: mail a machine wrote (RFC 3834's ``Auto-Submitted``, the older
  ``Precedence`` / ``X-Autoreply`` / ``X-Autorespond`` headers, list headers, bounces from
  ``MAILER-DAEMON`` / ``postmaster`` or a null sender, RFC 3464 ``multipart/report``
  delivery reports). It is stored and shown, and never starts a run: answering an
  autoresponder is how two bots talk to each other all weekend.
- ``trim_quoted``: the new text of a reply, without the history the mail client quoted
  below it (``>`` lines, an "On … wrote:" block, Outlook's ``From:/Sent:`` header block).
  The model reads the trimmed text; the thread keeps the whole.
- ``html_to_text``: an HTML-only message as plain text (scripts and styles dropped,
  blockquotes marked as quotes so the trimming finds them).
"""

from __future__ import annotations

import re
from email.message import EmailMessage
from html.parser import HTMLParser

from deskhand.domain.mail.models import Automated

_BOUNCE_SENDERS = frozenset({"mailer-daemon", "postmaster"})
_BULK_PRECEDENCE = frozenset({"bulk", "junk", "list"})


def _value(msg: EmailMessage, name: str) -> str:
    try:
        value = msg.get(name)
    except Exception:  # a header the policy cannot parse still says it is there
        return "?"
    return "" if value is None else str(value).strip()


def automated(msg: EmailMessage, *, from_address: str, envelope_sender: str | None = None) -> str:
    """Why a machine wrote ``msg`` (an ``Automated`` value), or "" for a person.

    ``envelope_sender`` is the SMTP ``MAIL FROM``: "" is the null reverse-path, which only
    delivery reports use; None means it was not given (a webhook may not say).
    """
    local = from_address.partition("@")[0].lower()
    if (
        msg.get_content_type() == "multipart/report"
        or local in _BOUNCE_SENDERS
        or envelope_sender == ""
    ):
        return Automated.BOUNCE
    auto = _value(msg, "Auto-Submitted").split(";")[0].strip().lower()
    precedence = _value(msg, "Precedence").lower()
    if (auto and auto != "no") or precedence == "auto_reply":
        return Automated.AUTO_REPLY
    if msg.get("X-Autoreply") is not None or msg.get("X-Autorespond") is not None:
        return Automated.AUTO_REPLY
    if precedence in _BULK_PRECEDENCE:
        return Automated.BULK
    if msg.get("List-Id") is not None or msg.get("List-Unsubscribe") is not None:
        return Automated.BULK
    return Automated.NONE


# --- quoted history -----------------------------------------------------------------

_ATTRIBUTION = re.compile(
    r"^\s*(On\b.{0,300}\bwrote|Le\b.{0,300}\ba écrit|Am\b.{0,300}\bschrieb\b.{0,200})\s*:\s*$",
    re.IGNORECASE,
)
_ATTRIBUTION_OPEN = re.compile(r"^\s*On\b.{0,300}$")
_WROTE_CLOSE = re.compile(r"\bwrote\s*:\s*$", re.IGNORECASE)
_ORIGINAL = re.compile(r"^\s*-{2,}\s*Original Message\s*-{2,}", re.IGNORECASE)
_SEPARATOR = re.compile(r"^\s*_{10,}\s*$")
_HEADER = re.compile(r"^\s*\*?(From|Sent|Date|To|Subject|Cc)\s*:\*?\s", re.IGNORECASE)


def _outlook_block(lines: list[str], i: int) -> bool:
    """``From:`` followed within a few lines by ``Sent:``/``Date:`` and ``To:``/``Subject:``."""
    if not re.match(r"^\s*\*?From\s*:", lines[i], re.IGNORECASE):
        return False
    names = {
        m.group(1).lower()
        for line in lines[i + 1 : i + 6]
        if (m := _HEADER.match(line)) is not None
    }
    return bool(names & {"sent", "date"}) and bool(names & {"to", "subject"})


def trim_quoted(text: str) -> str:
    """The text above the quoted history; the whole text if nothing else would be left."""
    lines = text.split("\n")
    cut = len(lines)
    for i, line in enumerate(lines):
        two_line_attribution = (
            _ATTRIBUTION_OPEN.match(line) is not None
            and i + 1 < len(lines)
            and _WROTE_CLOSE.search(lines[i + 1]) is not None
            and len(line) + len(lines[i + 1]) < 400
        )
        if _ATTRIBUTION.match(line) or _ORIGINAL.match(line) or two_line_attribution:
            cut = i
            break
        if _outlook_block(lines, i):
            cut = i - 1 if i > 0 and _SEPARATOR.match(lines[i - 1]) else i
            break
    kept = [line for line in lines[:cut] if not line.lstrip().startswith(">")]
    trimmed = "\n".join(kept).strip()
    return trimmed or text.strip()


# --- HTML -----------------------------------------------------------------------------

_BLOCKS = frozenset(
    [
        "p",
        "div",
        "br",
        "li",
        "tr",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "table",
        "ul",
        "ol",
        "pre",
        "hr",
        "section",
        "article",
        "header",
        "footer",
        "blockquote",
        "dd",
        "dt",
    ]
)
_SKIPPED = frozenset({"script", "style", "head", "title", "template"})


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.lines: list[tuple[int, str]] = [(0, "")]
        self.quote = 0
        self.skip = 0

    def _newline(self) -> None:
        self.lines.append((self.quote, ""))

    def handle_starttag(self, tag: str, _attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self.skip += 1
        if tag == "blockquote":
            self.quote += 1
        if tag in _BLOCKS:
            self._newline()
        if tag == "li":
            self.handle_data("- ")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED and self.skip:
            self.skip -= 1
        if tag == "blockquote" and self.quote:
            self.quote -= 1
        if tag in _BLOCKS:
            self._newline()

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        depth, text = self.lines[-1]
        self.lines[-1] = (depth, text + re.sub(r"\s+", " ", data))

    def text(self) -> str:
        out: list[str] = []
        for depth, line in self.lines:
            line = line.strip()
            if not line:
                if out and out[-1] != "":
                    out.append("")
                continue
            out.append("> " * depth + line)
        return "\n".join(out).strip()


def html_to_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    parser.close()
    return parser.text()
