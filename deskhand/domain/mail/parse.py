"""Reading a raw message with the standard library (``email``, ``policy.default``).

Everything here takes bytes a stranger wrote and never raises on them: a header the
policy cannot parse reads as empty, an unknown charset is decoded with replacement
characters, and what cannot be read at all is reported as a problem (a sentence) for the
row to be rejected with. NUL characters are dropped from every string (Postgres text
cannot hold them).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from collections.abc import Iterator
from email import policy
from email.errors import (
    MissingHeaderBodySeparatorDefect,
    MultipartInvariantViolationDefect,
    NoBoundaryInMultipartDefect,
    StartBoundaryNotFoundDefect,
)
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.utils import getaddresses

from deskhand.domain.mail import hygiene

TEXT_MAX_CHARS = 200_000  # what a thread line holds of one message's text
_MESSAGE_ID = re.compile(r"<[^<>\s]{1,996}>")
_STRUCTURE_DEFECTS = (
    MissingHeaderBodySeparatorDefect,
    MultipartInvariantViolationDefect,
    NoBoundaryInMultipartDefect,
    StartBoundaryNotFoundDefect,
)


def clean(text: str) -> str:
    return text.replace("\x00", "")


def message_from_bytes(raw: bytes, *, headers_only: bool = False) -> EmailMessage:
    parsed = BytesParser(policy=policy.default).parsebytes(raw, headersonly=headers_only)
    assert isinstance(parsed, EmailMessage)
    return parsed


def header(msg: Message, name: str) -> str:
    """A header's (decoded, unfolded) value; "" when absent or unreadable."""
    try:
        value = msg.get(name)
    except Exception:
        return ""
    return clean(" ".join(str(value).split())) if value is not None else ""


def header_all(msg: Message, name: str) -> list[str]:
    try:
        values = msg.get_all(name) or []
    except Exception:
        return []
    return [clean(" ".join(str(v).split())) for v in values]


def addresses(msg: Message, *names: str) -> list[tuple[str, str]]:
    """(display name, address) pairs from these headers, in order; addresses lower-cased."""
    found: list[tuple[str, str]] = []
    for name in names:
        for value in header_all(msg, name):
            for display, addr in getaddresses([value]):
                addr = addr.strip().lower()
                if "@" in addr and (display, addr) not in found:
                    found.append((display.strip(), addr))
    return found


def sender(msg: Message) -> tuple[str, str]:
    """The From's (name, address), or ("", "")."""
    found = addresses(msg, "From")
    return found[0] if found else ("", "")


def message_id(msg: Message) -> str:
    """The Message-ID as ``<…>``, or "" when there is none worth the name."""
    value = header(msg, "Message-ID")
    match = _MESSAGE_ID.search(value)
    if match:
        return match.group(0)
    return f"<{value}>" if value and " " not in value and len(value) < 996 else ""


def date(msg: Message) -> dt.datetime | None:
    try:
        value = msg.get("Date")
        when = getattr(value, "datetime", None)
    except Exception:
        return None
    if not isinstance(when, dt.datetime):
        return None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


def structure_problem(msg: EmailMessage) -> str:
    """A sentence when the message cannot be read as mail, else ""."""
    if not msg.keys():
        return "it has no mail headers, so it cannot be read as an email"
    for part in msg.walk():
        for defect in part.defects:
            if isinstance(defect, _STRUCTURE_DEFECTS):
                return (
                    f"its MIME structure is broken ({type(defect).__name__}), so its parts "
                    "cannot be told apart"
                )
    return ""


@dataclasses.dataclass(frozen=True)
class Verdicts:
    """SPF, DKIM and DMARC results as given to us (lower-case; "" = not given)."""

    spf: str = ""
    dkim: str = ""
    dmarc: str = ""

    def failure(self) -> str:
        """Why the sender is not believed, or "" (a missing verdict is not a failure)."""
        if self.dmarc == "fail":
            return "it failed DMARC"
        if not self.dmarc and self.spf == "fail" and self.dkim != "pass":
            return "it failed SPF and carries no passing DKIM signature"
        return ""


_RESULT = re.compile(r"\b(spf|dkim|dmarc)\s*=\s*([a-z]+)", re.IGNORECASE)


def verdicts_from_authentication_results(msg: Message, trusted: list[str]) -> Verdicts:
    """The topmost ``Authentication-Results`` written by a server we trust (RFC 8601).

    Any other such header could be the sender's own invention, so it is not read.
    """
    for value in header_all(msg, "Authentication-Results"):
        authserv, _, results = value.partition(";")
        words = authserv.split()
        if not words or words[0].lower() not in trusted:
            continue
        found: dict[str, list[str]] = {}
        for method, result in _RESULT.findall(results):
            found.setdefault(method.lower(), []).append(result.lower())
        dkims = found.get("dkim", [])
        return Verdicts(
            spf=found.get("spf", [""])[0],
            dkim="pass" if "pass" in dkims else (dkims[0] if dkims else ""),
            dmarc=found.get("dmarc", [""])[0],
        )
    return Verdicts()


# --- content ------------------------------------------------------------------------


def part_text(part: Message) -> str:
    """A text part's content as str, whatever its charset claims."""
    try:
        content = part.get_content()  # type: ignore[attr-defined]
        text = content if isinstance(content, str) else content.decode("utf-8", "replace")
    except Exception:
        payload = part.get_payload(decode=True)
        data = payload if isinstance(payload, bytes) else b""
        try:
            text = data.decode(part.get_content_charset() or "utf-8", "replace")
        except LookupError:
            text = data.decode("utf-8", "replace")
    return clean(text.replace("\r\n", "\n").replace("\r", "\n"))


@dataclasses.dataclass(frozen=True)
class Attachment:
    filename: str
    content_type: str
    content: bytes
    inline: bool


@dataclasses.dataclass(frozen=True)
class Content:
    text: str  # the whole text (HTML turned into text)
    trimmed: str  # without the quoted history: what a reader, the model included, sees
    from_html: bool
    attachments: list[Attachment]


def _leaves(part: Message) -> Iterator[Message]:
    if part.get_content_maintype() == "multipart" and part.is_multipart():
        for sub in part.get_payload():
            if isinstance(sub, Message):
                yield from _leaves(sub)
    else:
        yield part


def _attachment(part: Message) -> Attachment:
    ctype = part.get_content_type()
    try:
        inner = part.get_payload(0) if ctype == "message/rfc822" and part.is_multipart() else None
        if isinstance(inner, Message):
            data = inner.as_bytes()
        else:
            payload = part.get_payload(decode=True)
            data = payload if isinstance(payload, bytes) else b""
    except Exception:
        data = b""
    try:
        filename = part.get_filename() or ""
    except Exception:
        filename = ""
    filename = clean(re.split(r"[\\/]", filename)[-1])[:255]
    disposition = (part.get_content_disposition() or "").lower()
    return Attachment(filename, ctype[:127], data, inline=disposition == "inline")


def content(msg: EmailMessage) -> Content:
    """The text a reader sees and the files that came with it."""
    try:
        body = msg.get_body(preferencelist=("plain", "html"))
    except Exception:
        body = None
    text, from_html = "", False
    if body is not None:
        text = part_text(body)
        if body.get_content_type() == "text/html":
            text, from_html = hygiene.html_to_text(text), True
    siblings: set[int] = set()
    if body is not None:
        # The other renderings of the body (its HTML twin) are not attachments.
        for part in msg.walk():
            if part.get_content_type() == "multipart/alternative" and body in _leaves(part):
                siblings |= {id(p) for p in _leaves(part)}
    attachments = [
        _attachment(part)
        for part in _leaves(msg)
        if part is not body
        and id(part) not in siblings
        and (
            part.get_content_disposition() == "attachment"
            or part.get_filename()
            or part.get_content_maintype() not in ("text", "message")
            or part.get_content_type() == "message/rfc822"
        )
    ]
    text = text.strip()[:TEXT_MAX_CHARS]
    return Content(text, hygiene.trim_quoted(text), from_html, attachments)


def reported_message_ids(msg: EmailMessage) -> list[str]:
    """The Message-IDs a delivery report (bounce) is about: its returned message's headers."""
    found: list[str] = []
    for part in msg.walk():
        ctype = part.get_content_type()
        try:
            inner: Message | None = None
            if ctype == "message/rfc822" and part.is_multipart():
                payload = part.get_payload(0)
                inner = payload if isinstance(payload, Message) else None
            elif ctype == "text/rfc822-headers":
                inner = message_from_bytes(
                    part_text(part).encode("utf-8", "replace"), headers_only=True
                )
            else:
                continue
        except Exception:
            continue
        mid = message_id(inner) if inner is not None else ""
        if mid and mid not in found:
            found.append(mid)
    return found
