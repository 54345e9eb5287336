"""The fence: how untrusted text reaches the model.

Everything that came from outside — tool results, the ticket's subject and
body, customer names — is wrapped in markers carrying a token that is
unguessable per run (HMAC of the run id under a server secret) and stable
across replay. Content can never close its own fence: before wrapping, any
marker-like run of characters is replaced (never deleted — deletion can
reassemble a marker from its halves) and the token itself is scrubbed, after
folding case, width and common lookalike characters, until nothing is left to
replace.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import unicodedata

from django.conf import settings

PLACEHOLDER = "[fence-marker removed]"

# Characters that render like the ASCII ones a marker or token is made of.
_LOOKALIKES = str.maketrans(
    {
        "\u2039": "<", "\u203a": ">", "\u2329": "<", "\u232a": ">", "\u3008": "<", "\u3009": ">",
        "\u27e8": "<", "\u27e9": ">", "\u276e": "<", "\u276f": ">", "\u02c2": "<", "\u02c3": ">",
        "\u00ab": "<", "\u00bb": ">", "\u300a": "<", "\u300b": ">", "\u2264": "<", "\u2265": ">",
        "\u0430": "a", "\u0435": "e", "\u043e": "o", "\u0441": "c", "\u0501": "d", "\u0440": "p",
        "\u0455": "s", "\u0456": "i", "\u0458": "j", "\u04bb": "h", "\u0443": "y", "\u0445": "x",
        "\u03bf": "o", "\u03b1": "a", "\u0391": "a", "\u0392": "b", "\u0395": "e", "\u039f": "o",
        "\u0131": "i", "\u01c0": "l", "\u2044": "/", "\u2215": "/", "\u29f8": "/", "\uff0f": "/",
        "\u200b": "", "\u200c": "", "\u200d": "", "\u2060": "", "\ufeff": "", "\u00ad": "",
    }
)

# A marker is '<<' or '<</' followed by 'untrusted' — in any case, spacing or lookalike.
_MARKER = re.compile(r"<\s*<\s*/?\s*u\s*n\s*t\s*r\s*u\s*s\s*t\s*e\s*d", re.IGNORECASE)


def token_for(run_id: str) -> str:
    """The fence token for a run: unguessable without the server's fence key."""
    key = settings.FENCE_KEY.encode()
    return hmac.new(key, f"fence:{run_id}".encode(), hashlib.sha256).hexdigest()[:20]


def opener(token: str) -> str:
    return f"<<untrusted:{token}>>"


def closer(token: str) -> str:
    return f"<</untrusted:{token}>>"


def _fold(text: str) -> str:
    """Fold a string so lookalikes, widths and case compare equal, one char per char."""
    out = []
    for ch in text:
        folded = unicodedata.normalize("NFKC", ch).translate(_LOOKALIKES).casefold()
        # Keep positions aligned with the original: one output char per input char.
        out.append(folded[:1] if folded else "\x00")
    return "".join(out)


def _scrub_once(text: str, token: str) -> str:
    folded = _fold(text)
    spans: list[tuple[int, int]] = [m.span() for m in _MARKER.finditer(folded)]
    start = 0
    needle = token.casefold()
    while (i := folded.find(needle, start)) != -1:
        spans.append((i, i + len(needle)))
        start = i + 1
    if not spans:
        return text
    spans.sort()
    pieces, cursor = [], 0
    for a, b in spans:
        if a < cursor:
            a = cursor
        if a >= b:
            continue
        pieces.append(text[cursor:a])
        pieces.append(PLACEHOLDER)
        cursor = b
    pieces.append(text[cursor:])
    return "".join(pieces)


def neutralise(text: str, token: str) -> str:
    """Replace marker-like runs and the token until the text is stable."""
    text = text.replace("\x00", "\ufffd")
    for _ in range(32):
        cleaned = _scrub_once(text, token)
        if cleaned == text:
            return text
        text = cleaned
    raise ValueError("content could not be neutralised")  # pragma: no cover - 32 passes always suffice


def wrap(text: str, token: str) -> str:
    """Quote outside text for the model inside an unforgeable fence."""
    return f"{opener(token)}\n{neutralise(text, token)}\n{closer(token)}"


def unwrap(text: str) -> str:
    """The quoted content of a fenced block (for the scripted provider and the console)."""
    lines = text.split("\n")
    if len(lines) >= 2 and lines[0].startswith("<<untrusted:") and lines[-1].startswith("<</untrusted:"):
        return "\n".join(lines[1:-1])
    return text
