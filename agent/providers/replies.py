"""What the keyless policy reader says to the customer: the reply and the question.

A support person tells the customer what was done and what happens next; so does the
policy reader, once a case is decided (``reply_body``), and it asks for the one fact it
cannot work without, the order, when the ticket names none (``question_body``).

Everything here reaches a customer, so it is built only from facts the tools returned (the
order, the refunds made, the published policy) and the customer's own name: never from the
reasoning written for staff, never with the provider's internal mark, and never quoting the
customer's text back (it may hold instructions addressed to the agent). A reply that rests on
a knowledge article names it by its title, and a question no policy decides but an article
the customer's own words found is on its subject is answered with that article's opening. It names money as
the customer reads it (``$38.00``) and never the ticket's reference, which the customer has
only seen in the subject's tag. The merchant's name is added as the signature where the
reply is sent (``deskhand.domain.desk.thread.signed``).
"""

from __future__ import annotations

import re
from typing import Any

from agent.providers.policy_reading import INSTRUCTION, sentences
from deskhand.domain.desk.money import display_cents

# ``agent.providers.policy``'s Case and Verdict; not imported, so the two modules make no circle.
Case = Any
Verdict = Any

_TIMING = re.compile(r"(\d+\s*[-\u2013]\s*\d+ business days)")
EXCERPT_MAX = 600  # characters of an article quoted to the customer


def _named(title: str) -> str:
    return f"\u201c{title}\u201d"


def _excerpt(article: dict[str, Any]) -> str:
    """The opening of an article, whole sentences up to ``EXCERPT_MAX`` characters; its own
    title repeated as a heading, Markdown marks and sentences addressed to an agent left out."""
    title = str(article.get("title", "")).strip().lower()
    kept: list[str] = []
    for s in sentences(str(article.get("body", ""))):
        s = s.lstrip("#>*- ").strip()
        if not s or s.lower() == title or INSTRUCTION.search(s):
            continue
        if kept and len(" ".join([*kept, s])) > EXCERPT_MAX:
            break
        kept.append(s)
    return " ".join(kept)[: EXCERPT_MAX + 200]


def _first_name(case: Case) -> str:
    name = str((case.ticket.get("customer") or {}).get("name", "")).strip()
    return name.split(" ")[0] if name else "there"


def _refund_timing(case: Case, results: list[str]) -> str:
    for text in [*results, *case.policy().sentences]:
        if found := _TIMING.search(text):
            return f"It takes {found.group(1)} to show on your statement."
    return "It can take a few business days to show on your statement."


def _refunds(case: Case) -> list[str]:
    """A sentence for every refund the run made or sent, from the tools' results."""
    out = []
    for c in case.history.calls:
        if c.name != "issue_refund" or not (c.succeeded or c.in_flight):
            continue
        ref = c.args.get("order_reference")
        data: dict[str, Any] = c.data if isinstance(c.data, dict) else {}
        currency = data.get("currency") or case.orders().get(str(ref), {}).get("currency", "USD")
        cents = data.get("refunded_cents", c.args.get("amount_cents"))
        # As the customer reads money ("$38.00", "¥4,000"), never the log's "38.00 USD".
        money = display_cents(cents, currency) if isinstance(cents, int) else "the amount"
        if c.succeeded:
            timing = _refund_timing(case, [c.text or ""])
            out.append(
                f"We have refunded {money} against your order {ref} to your original payment "
                f"method. {timing}"
            )
        else:
            out.append(
                f"We have asked our payment provider to refund {money} against your order {ref}; "
                "it has not confirmed it yet, and we will make sure it goes through."
            )
    return out


def _shipping(case: Case, order: dict[str, Any]) -> str:
    late = case.policy().number(r"\blate\b", r"(\w+) business days")
    after = f" If it has not arrived {late[0]} business days after you ordered," if late else ""
    return (
        f"Your order {order['reference']} was placed {order.get('days_since_placed')} days ago "
        f"and is {order.get('status')}, so it is on its way and not late by our shipping "
        f"times.{after or ' If it does not arrive soon,'} reply to this email and we will chase "
        "it with the carrier."
    )


def reply_body(case: Case, verdict: Verdict) -> str:
    """The reply to the customer once the case is decided (the merchant's name signs it)."""
    parts = [f"Hello {_first_name(case)},"]
    refunds = _refunds(case)
    parts += refunds
    order = case.order_in_play()
    if verdict.status == "pending" and order is not None and case.topic == "shipping":
        parts.append(_shipping(case, order))
    elif verdict.status == "pending" and order is not None and case.topic == "warranty":
        parts.append(
            f"Your order {order['reference']} is covered by our warranty, so the answer is a "
            "repair or a replacement rather than a refund. A colleague will be in touch with the "
            "next steps."
        )
    elif (
        verdict.status == "pending"
        and case.topic == "unknown"
        and (article := case.article_answer())
    ):
        parts.append(f"Our help article {_named(str(article.get('title')))} answers this:")
        parts.append(_excerpt(article))
    elif verdict.status == "escalated":
        parts.append(
            "Thank you for your message. I have passed it to a colleague, who will look into it "
            "and get back to you."
        )
    elif not refunds:
        parts.append("Thank you for your message; we have looked into it.")
    if verdict.status != "escalated" and case.topic != "unknown":
        # The rule this reply rests on is the merchant's article: name it, so the customer
        # can read it and a person can see what the answer relied on.
        relied = case.policy().quoted_in(" ".join([verdict.why, *parts]))
        titles = list(dict.fromkeys(_named(str(a.get("title"))) for a in relied))
        if titles:
            which = "article" if len(titles) == 1 else "articles"
            parts.append(f"You can read more in our help {which} {' and '.join(titles)}.")
    parts.append("If anything is unclear, just reply to this email.")
    return "\n\n".join(parts)


def question_body(case: Case) -> str:
    """The question when the ticket names no order: the one fact needed to check anything."""
    return (
        f"Hello {_first_name(case)},\n\n"
        "Thank you for your message. So that I can look into it, could you reply with the order "
        "number it is about? You will find it in your order confirmation email."
    )
