"""The fence: how untrusted text reaches the model.

Everything that came from outside — tool results, the ticket's subject and
body, customer names, staff-visible text echoed back — is wrapped in markers
carrying a token that is unguessable per run (HMAC of the root run id under
``settings.FENCE_KEY``) and stable across replay and forks.

Content can never close its own fence. Before wrapping, the content is read
the way a model might read it — escapes decoded (``\\u003c``, ``&lt;``,
``%3C``), compatibility forms folded (fullwidth, ligatures, mathematical
letters), invisible characters dropped (zero-width, bidi controls, combining
marks), common lookalikes mapped to ASCII, case folded — and every run that
reads as a marker (``<<untrusted``, ``<</untrusted``, one bracket or two, with
a little punctuation or space between the letters) and every occurrence of the
token is *replaced* in the original text by a placeholder. Replaced, never
deleted: deleting can reassemble a marker from the halves around it. The pass
repeats until nothing changes; if it ever did not settle, the content is
withheld rather than quoted.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import unicodedata

from django.conf import settings

PLACEHOLDER = "[fence-marker removed]"
WITHHELD = "[content withheld: it could not be quoted safely]"
_PREFIX = "<<untrusted:"
_CLOSE_PREFIX = "<</untrusted:"

# Characters that render like the ASCII a marker or a hex token is made of, and
# that Unicode compatibility folding (NFKD) leaves alone.
_LOOKALIKES = {
    **dict.fromkeys("\u2039\u2329\u3008\u27e8\u276e\u02c2\u00ab\u300a\u2264\u1438\u276c\u29fc\u227a", "<"),
    **dict.fromkeys("\u203a\u232a\u3009\u27e9\u276f\u02c3\u00bb\u300b\u2265\u1433\u276d\u29fd\u227b", ">"),
    **dict.fromkeys("\u2044\u2215\u29f8\u2571\u30ce\u4e3f\u0338", "/"),
    "\u0430": "a", "\u03b1": "a", "\u0251": "a",
    "\u0432": "b", "\u0184": "b", "\u042c": "b",
    "\u0441": "c", "\u03f2": "c", "\u217d": "c",
    "\u0501": "d", "\u217e": "d",
    "\u0435": "e", "\u03b5": "e", "\u0454": "e", "\u212e": "e",
    "\u0493": "f", "\u017f": "f",
    "\u0578": "n", "\u057c": "n", "\u0274": "n", "\u03b7": "n",
    "\u0433": "r", "\u0280": "r",
    "\u0455": "s", "\u01bd": "s",
    "\u0442": "t", "\u03c4": "t", "\u0167": "t",
    "\u057d": "u", "\u03c5": "u", "\u028b": "u", "\u1d1c": "u", "\u0446": "u",
    "\u03bf": "o", "\u043e": "o", "\u0585": "o",
    "\u0456": "i", "\u0131": "i", "\u03b9": "i",
    "\u0440": "p", "\u0445": "x", "\u0443": "y", "\u0458": "j", "\u04bb": "h", "\u01c0": "l",
}  # fmt: skip
# Renders as nothing (or as blank space a reader skips): dropped before matching.
_INVISIBLE = frozenset("\u115f\u1160\u3164\uffa0\u180e\u2800\u034f")
# Escapes a model reads as the character they encode.
_ESCAPE = re.compile(
    r"\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})|&#[xX]([0-9a-fA-F]{1,6});?|&#([0-9]{1,7});?"
    r"|&(lt|gt|sol|frasl);|%([0-9a-fA-F]{2})"
)
_ENTITIES = {"lt": "<", "gt": ">", "sol": "/", "frasl": "/"}
# Between the characters of a marker: a few spaces or punctuation, nothing that is a letter.
_GAP = r"[^0-9a-z<>/]{0,3}?"
_MARKER = re.compile("<" + _GAP + "(?:<" + _GAP + ")?(?:/" + _GAP + ")?" + _GAP.join("untrusted"))


def token_for(run_id: str) -> str:
    """The fence token for a run: unguessable without the server's fence key, stable for the run."""
    key = settings.FENCE_KEY.encode()
    return hmac.new(key, f"fence:{run_id}".encode(), hashlib.sha256).hexdigest()[:20]


def opener(token: str) -> str:
    return f"{_PREFIX}{token}>>"


def closer(token: str) -> str:
    return f"{_CLOSE_PREFIX}{token}>>"


def _decoded(text: str) -> list[tuple[str, int, int]]:
    """(character, start, end) in ``text``, with escapes decoded to the character they name."""
    out: list[tuple[str, int, int]] = []
    i = 0
    while i < len(text):
        m = _ESCAPE.match(text, i) if text[i] in "\\&%" else None
        if m is not None:
            hex4, hex2, ent_hex, ent_dec, named, pct = m.groups()
            code = (
                int(hex4 or hex2 or ent_hex or pct, 16)
                if (hex4 or hex2 or ent_hex or pct)
                else int(ent_dec)
                if ent_dec
                else ord(_ENTITIES[named])
            )
            if code < 0x110000:
                out.append((chr(code), i, m.end()))
                i = m.end()
                continue
        out.append((text[i], i, i + 1))
        i += 1
    return out


@functools.lru_cache(maxsize=8192)
def _fold_char(ch: str) -> str:
    """How a reader sees ``ch``: zero or more lower-case, mostly ASCII characters."""
    mapped = "".join(_LOOKALIKES.get(c, c) for c in unicodedata.normalize("NFKD", ch))
    return "".join(
        _LOOKALIKES.get(c, c)
        for c in unicodedata.normalize("NFKD", mapped.casefold())
        if unicodedata.category(c) not in ("Mn", "Me", "Cf") and c not in _INVISIBLE
    )


def _folded(text: str) -> tuple[str, list[tuple[int, int]] | None]:
    """The folded text, and for each folded character the span of ``text`` it came from.

    ``None`` for the spans means one folded character per original (plain ASCII).
    """
    if text.isascii() and not any(c in text for c in "\\&%"):
        return text.lower(), None
    chars: list[str] = []
    spans: list[tuple[int, int]] = []
    for ch, start, end in _decoded(text):
        for c in _fold_char(ch):
            chars.append(c)
            spans.append((start, end))
    return "".join(chars), spans


@functools.lru_cache(maxsize=256)
def _token_pattern(token: str) -> re.Pattern[str]:
    return re.compile(_GAP.join(re.escape(c) for c in token.casefold()))


def _scrub_once(text: str, token_re: re.Pattern[str]) -> str:
    folded, spans = _folded(text)
    hits = [m.span() for m in _MARKER.finditer(folded)]
    hits += [m.span() for m in token_re.finditer(folded)]
    if not hits:
        return text
    if spans is None:
        ranges = sorted(h for h in hits if h[1] > h[0])
    else:
        ranges = sorted((spans[a][0], spans[b - 1][1]) for a, b in hits if b > a)
    pieces, cursor = [], 0
    for a, b in ranges:
        a = max(a, cursor)
        if a >= b:
            continue
        pieces += [text[cursor:a], PLACEHOLDER]
        cursor = b
    pieces.append(text[cursor:])
    return "".join(pieces)


def neutralise(text: str, token: str) -> str:
    """``text`` with every marker-like run and every trace of ``token`` replaced, until stable."""
    text = text.replace("\x00", "\ufffd")
    token_re = _token_pattern(token)
    for _ in range(16):
        cleaned = _scrub_once(text, token_re)
        if cleaned == text:
            return text
        text = cleaned
    return WITHHELD  # pragma: no cover - each pass shrinks what is left to match


def wrap(text: str, token: str) -> str:
    """Quote outside text for the model inside an unforgeable fence."""
    return f"{opener(token)}\n{neutralise(text, token)}\n{closer(token)}"


def unwrap(text: str) -> str:
    """The quoted content of a fenced block (for the scripted provider and the console)."""
    lines = text.split("\n")
    if len(lines) >= 2 and lines[0].startswith(_PREFIX) and lines[-1].startswith(_CLOSE_PREFIX):
        return "\n".join(lines[1:-1])
    return text
