"""The subject a customer reads on our answer: ``Re:`` once before their own subject.

``thread.reply_headers`` adds ``Re:`` unless the subject already starts with one, so a
customer whose client had already doubled it ("Re: Re: Where is my order?"), or who answered
"Re:" to our "Re:", got "Re: Re:" back (issue 40). Every answer that leaves, whichever tool
wrote it and whichever merchant sends it, passes through ``reply_subject``.
"""

from __future__ import annotations

import re

# "Re:", "RE :", "Re[2]:", and the German, Scandinavian and Dutch forms mail clients write.
_REPLY_PREFIXES = re.compile(r"^\s*(?:(?:re|aw|sv|antw)\s*(?:\[\d+\])?\s*:\s*)+", re.IGNORECASE)


def reply_subject(subject: str) -> str:
    """``"Re: Re: Where is my order? [#NW-5]"`` -> ``"Re: Where is my order? [#NW-5]"``."""
    return "Re: " + _REPLY_PREFIXES.sub("", subject).strip()
