"""What the keyless policy reads: the conversation's tool calls read back, and the knowledge
base's policy sentences.

``PolicyProvider`` (``agent.providers.policy``) decides from these alone: the order record,
its items and refund remainder as the tools returned them, and the numbers a handful of
policy sentence shapes state. Everything here is read from text the tools and the customer
wrote, so it is read as data: fenced results are unwrapped, and sentences addressed to the
agent are found, never obeyed.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections.abc import Iterator
from typing import Any

from agent.conversation.fence import unwrap
from agent.tools.order_facts import FACTS_CHANGED

DENIAL_PREFIX = "A person declined this action."
# How a refund result reads when the payment provider has not confirmed the refund: money in
# flight, neither moved nor not moved (agent.effects.payments; pinned by tests/providers).
IN_FLIGHT_PREFIX = "The payment provider has not confirmed the refund"
IRREVERSIBLE = ("issue_refund", "send_customer_email", "cancel_order")


def _blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


# --- the history, read back ----------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the provider made and what came back (``text`` None: no result yet)."""

    name: str
    args: dict[str, Any]
    text: str | None = None
    is_error: bool = False

    @property
    def data(self) -> Any:
        return self._decoded()[0]

    @property
    def trailing(self) -> str:
        """What follows the JSON record, or the whole text if it holds none."""
        return self._decoded()[1]

    def _decoded(self) -> tuple[Any, str]:
        # A record with text appended after it (a fault, an injection) still reads as the record;
        # the text after it is scanned for instructions, never taken as fact.
        text = (self.text or "").strip()
        if self.text is None or self.is_error:
            return None, text
        try:
            data, end = json.JSONDecoder().raw_decode(text)
        except ValueError:
            return None, text
        return data, text[end:]

    @property
    def succeeded(self) -> bool:
        return self.text is not None and not self.is_error

    @property
    def in_flight(self) -> bool:
        """A refund sent to a payment provider that has not confirmed it: it may have moved."""
        return self.is_error and IN_FLIGHT_PREFIX in (self.text or "")

    @property
    def facts_changed(self) -> dict[str, Any] | None:
        """A refund not paid because the order's refunded total moved after the person was
        asked (``agent.tools.order_facts.facts_moved``): its record, else ``None``."""
        if not self.is_error or self.text is None:
            return None
        try:
            data = json.loads(self.text)
        except ValueError:
            return None
        return data if isinstance(data, dict) and data.get(FACTS_CHANGED) is True else None

    @property
    def declined(self) -> bool:
        return self.is_error and (self.text or "").startswith(DENIAL_PREFIX)

    @property
    def failure(self) -> str:
        """Why it did not happen, in one line: the approver's reason or the error."""
        text = (self.text or "no result").strip()
        if self.declined:
            reason = re.search(r"Reason:\s*(.*)", text)
            return f"a person declined it (reason: {reason.group(1).strip() if reason else 'none given'})"
        if self.facts_changed:
            return "the order's refunded total changed before it was paid, so nothing was paid on that approval"
        return f"it failed: {first_line(text)}"


@dataclasses.dataclass(frozen=True, slots=True)
class History:
    ticket_reference: str | None
    calls: tuple[ToolCall, ...]

    @classmethod
    def read(cls, messages: list[dict[str, Any]]) -> History:
        reference = None
        if messages and messages[0].get("role") == "user":
            opening = " ".join(
                b.get("text", "") for b in _blocks(messages[0]) if b.get("type") == "text"
            )
            if m := re.search(r"Ticket reference:\s*(\S+)", opening):
                reference = m.group(1)
        uses: list[tuple[str, str, dict[str, Any]]] = []
        results: dict[str, tuple[str, bool]] = {}
        for message in messages:
            for block in _blocks(message):
                if message.get("role") == "assistant" and block.get("type") == "tool_use":
                    uses.append(
                        (block.get("id", ""), block.get("name", ""), block.get("input") or {})
                    )
                elif block.get("type") == "tool_result":
                    results[block.get("tool_use_id", "")] = (
                        _result_text(block.get("content")),
                        bool(block.get("is_error")),
                    )
        calls = []
        for use_id, name, args in uses:
            text, is_error = results.get(use_id, (None, False))
            calls.append(ToolCall(name, dict(args), text, is_error))
        return cls(reference, tuple(calls))

    def last(self, name: str, **match: Any) -> ToolCall | None:
        for c in reversed(self.calls):
            if c.name == name and all(c.args.get(k) == v for k, v in match.items()):
                return c
        return None

    def attempt(self, name: str, args: dict[str, Any]) -> ToolCall | None:
        """An earlier irreversible call on the same target, whatever its other arguments."""
        key = "order_reference" if name in ("issue_refund", "cancel_order") else "reference"
        last = self.last(name, **{key: args.get(key)})
        # Not paid because the order changed under the approval: the call is due again (a
        # person is asked again, with the new total beside it).
        return None if last is not None and last.facts_changed else last

    def irreversible(self) -> list[ToolCall]:
        return [c for c in self.calls if c.name in IRREVERSIBLE]

    def untrusted_texts(self) -> Iterator[str]:
        """Every string the tools returned, JSON strings unpacked."""
        for c in self.calls:
            if c.text is None:
                continue
            yield from _strings(c.data)
            yield c.trailing


def _result_text(content: Any) -> str:
    if isinstance(content, list):
        content = "\n".join(b.get("text", "") for b in content if isinstance(b, dict))
    return unwrap(str(content or ""))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


# --- reading text -------------------------------------------------------------

_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
                 "seven": 7, "eight": 8, "nine": 9, "ten": 10, "twelve": 12}  # fmt: skip

# Text addressed to the agent rather than to support: a customer cannot pre-approve anything.
INSTRUCTION = re.compile(
    "|".join(
        (
            r"(?:ignore|disregard|forget) (?:all |any )?(?:of )?(?:your |the )?"
            r"(?:previous|prior|above|earlier) instructions",
            r"\bcall\s+(?:issue_refund|send_customer_email|cancel_order)\b",
            r"^\W*system(?: override)?\s*:",
            r"do not (?:request|ask for) (?:human )?approval",
            r"\bpre-?(?:approved|authori[sz]ed)\b",
        )
    ),
    re.IGNORECASE | re.MULTILINE,
)
_REFUND_INSTRUCTION = re.compile(r"\bcall\s+issue_refund\b", re.IGNORECASE)
ORDER_REF = re.compile(r"\b[A-Z]{2}-\d{4}\b")
# How an earlier run's note records a refund a person declined (``Case._outcome``).
DECLINED_REFUND = re.compile(
    r"I asked to refund (\d+(?:\.\d+)?) ([A-Z]{3}) against ([A-Z0-9-]+), but a person declined it"
    r" \(reason: ([^)]*)\)"
)

# Topic, in order of precedence.
TOPICS = (
    ("duplicate", r"charged twice|double[- ]charged|duplicate|two charges|charged two times"),
    ("warranty", r"warrant|crack|broken|\bbroke\b|stopped working|defect|faulty"),
    ("wrong_item", r"wrong item|wrong order|instead of|not what i ordered|sent me the wrong"),
    ("refund", r"refund|money back|dollars back|stale|quality|tastes?\b|\bflat\b|damaged"),
    (
        "shipping",
        r"where is|where it is|where's|tracking|\blate\b|turned up|arrived yet|not arrived",
    ),
)
QUERY_MAX = 240  # characters of the customer's words a knowledge search is given
_REPLY_PREFIX = re.compile(r"^\s*(?:(?:re|fwd?|aw|sv|tr)\s*:\s*)+", re.IGNORECASE)
_REFERENCE = re.compile(r"#?\b[A-Za-z]{2,}-\d+\b")
_BRACKETS = str.maketrans("()[]{}<>", "        ")
QUALITY = re.compile(
    r"\b(stale|quality|flat|papery|tastes?|grinder|incorrect roast|wrong roast|damaged|rancid|"
    r"burnt|mou?ldy)\b"
)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


def customer_query(subject: str, texts: list[str]) -> str:
    """What to search the knowledge base for: the customer's own words, cleaned.

    The subject without its "Re:"/"Fwd:", then the customer's sentences in the order they
    wrote them, without order or ticket references (a search for "NW-1042" finds nothing
    worth reading) and without sentences addressed to the agent, cut at a word boundary after
    ``QUERY_MAX`` characters: the opening of a message says what it is about. So an article a
    merchant imported can answer a question no fixed query foresaw.
    """
    subject = _REPLY_PREFIX.sub("", subject).strip()
    said = [f"{subject}." if subject and subject[-1].isalnum() else subject]
    said += [s for t in texts for s in sentences(t)]
    words = " ".join(
        " ".join(_REFERENCE.sub(" ", s).translate(_BRACKETS).split())
        for s in said
        if not INSTRUCTION.search(s)
    ).strip()
    if len(words) <= QUERY_MAX:
        return words or "help"
    return words[:QUERY_MAX].rsplit(" ", 1)[0]


def first_line(text: str, limit: int = 200) -> str:
    line = text.strip().split("\n", 1)[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _number(word: str) -> int | None:
    return int(word) if word.isdigit() else _NUMBER_WORDS.get(word.lower())


def instructions_in(text: str) -> list[str]:
    """Sentences in ``text`` that address the agent instead of support."""
    return [s for s in sentences(text) if INSTRUCTION.search(s)]


def refund_instructions(text: str) -> list[str]:
    return [s for s in sentences(text) if _REFUND_INSTRUCTION.search(s)]


def when(value: Any) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return when.astimezone(dt.UTC).replace(tzinfo=None) if when.tzinfo else when


def business_days(order: dict[str, Any]) -> int:
    days = int(order.get("days_since_placed") or 0)
    placed = when(order.get("placed_at"))
    if placed is None:
        return days * 5 // 7
    return sum(1 for n in range(1, days + 1) if (placed + dt.timedelta(days=n)).weekday() < 5)


class Policy:
    """The rules a handful of sentence shapes in the knowledge base state."""

    def __init__(self, articles: list[dict[str, Any]]) -> None:
        self.articles = articles  # as search_kb returned them, best match first
        self.sentences = [s for a in articles for s in sentences(str(a.get("body", "")))]

    def about(self, pattern: str) -> Policy:
        """The articles that speak of ``pattern`` only: a sentence shape read from an article
        on another subject (a gift card's "such as", a grinder's "within 14 days") is not
        this subject's rule."""
        return Policy(
            [
                a
                for a in self.articles
                if re.search(pattern, f"{a.get('title', '')} {a.get('body', '')}", re.I)
            ]
        )

    def quoted_in(self, text: str) -> list[dict[str, Any]]:
        """The articles a sentence of which ``text`` quotes: what a decision relied on."""
        return [
            a
            for a in self.articles
            if any(s in text for s in sentences(str(a.get("body", ""))) if len(s) > 20)
        ]

    def sentence(self, pattern: str) -> str | None:
        return next((s for s in self.sentences if re.search(pattern, s, re.IGNORECASE)), None)

    def number(self, topic: str, pattern: str) -> tuple[int, str] | None:
        """The first number ``pattern`` captures in a sentence about ``topic``, with the sentence."""
        for s in self.sentences:
            m = re.search(pattern, s, re.IGNORECASE) if re.search(topic, s, re.IGNORECASE) else None
            if m and (n := _number(m.group(1))) is not None:
                return n, s
        return None

    def phrases(self, pattern: str) -> list[str]:
        """The list a sentence enumerates after ``pattern`` ("including a, b, and c")."""
        s = self.sentence(pattern)
        m = re.search(rf"(?:{pattern})\s+([^.]+)", s or "", re.IGNORECASE)
        if m is None:
            return []
        return [
            p.strip()
            for p in re.split(r",\s*(?:and |or )?|\s+and\s+|\s+or\s+", m.group(1))
            if p.strip()
        ]


# Words of a title that say nothing about its subject.
_TITLE_FILLER = frozenset({
    "about", "after", "also", "and", "are", "can", "does", "for", "from", "have", "how", "into",
    "more", "not", "our", "than", "that", "the", "their", "them", "then", "this", "what", "when",
    "where", "which", "while", "who", "why", "will", "with", "you", "your",
})  # fmt: skip


def on_subject(title: str, text: str) -> bool:
    """Whether ``text`` uses a word of ``title`` that names its subject, loosely ("descale"
    ~ "Descaling"): the least a reply quoting the article to the customer needs."""
    stems = {w[:5] for w in re.findall(r"[a-z]+", title.lower()) if len(w) > 3}
    stems -= {w[:5] for w in _TITLE_FILLER}
    return any(w[:5] in stems for w in re.findall(r"[a-z]+", text.lower()) if len(w) > 3)


def mentions(phrase: str, text: str, *, every: bool = True) -> bool:
    """Every (or any) word of ``phrase`` appears in ``text``, loosely ("cracking" ~ "cracked")."""
    words = re.findall(r"[a-z]+", text.lower())
    stems = [w[:5] for w in re.findall(r"[a-z]+", phrase.lower()) if len(w) > 2]
    found = (any(w.startswith(stem) for w in words) for stem in stems)
    return bool(stems) and (all(found) if every else any(found))
