"""The keyless default model: ``PolicyProvider``, the policy reader.

``PolicyProvider`` decides only from what the tools returned — the order
record, its items and refund remainder, and the numbers written in the
knowledge-base policy — never from a table keyed by ticket reference, and
never from instructions inside ticket text. It is a stand-in for a model, not
a model: it reads a handful of policy shapes and escalates whatever it cannot
read. What it reads is ``agent.providers.policy_reading``.

Over 400 lines because ``Case`` is one decision procedure — which reads come next, then
one verdict per kind of ticket (refund, shipping, warranty, duplicate) and the words the
customer and the run's note get — and reads best top to bottom in one place.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
from typing import Any

from agent.providers.base import ModelReply
from agent.providers.policy_reading import (
    DECLINED_REFUND,
    INSTRUCTION,
    ORDER_REF,
    QUALITY,
    TOPICS,
    History,
    Policy,
    ToolCall,
    business_days,
    customer_query,
    first_line,
    instructions_in,
    mentions,
    on_subject,
    sentences,
    when,
)
from agent.providers.replies import question_body, reply_body
from agent.providers.scripted import MARK, _assistant_turns, _Reporting, say
from deskhand.domain.desk.money import display_cents, format_cents

Step = tuple[str, dict[str, Any]]
Placed = tuple[dt.datetime, dict[str, Any]]


# --- the case --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Verdict:
    status: str  # the ticket status to finish on
    why: str  # the reasoning, citing the facts and the policy
    acts: tuple[Step, ...] = ()  # irreversible calls, in order, each after the last succeeded
    # The status to finish on when a person declines the acts: a call beyond what the policy
    # makes due (the shipping, once the goods are refunded) leaves the ticket as it was.
    if_declined: str = "escalated"


class Case:
    """One ticket, the facts the tools returned about it, and what they make due."""

    def __init__(self, reference: str, ticket: dict[str, Any], history: History) -> None:
        self.reference = reference
        self.ticket = ticket
        self.history = history
        customer_words = [
            str(m.get("body", ""))
            for m in ticket.get("messages", [])
            if m.get("kind") == "customer"
        ]
        # What the customer answered to a question this run asked: their words too.
        customer_words += [
            (c.text or "").partition("\n\n")[2]
            for c in history.calls
            if c.name == "ask_customer" and c.succeeded
        ]
        self.embedded = [s for text in customer_words for s in instructions_in(text)]
        self.embedded += [s for text in history.untrusted_texts() for s in instructions_in(text)]
        words = "\n".join([str(ticket.get("subject", "")), *customer_words])
        # Sentences addressed to the agent say nothing about what the customer needs.
        self.words = " ".join(s for s in sentences(words) if not INSTRUCTION.search(s)).lower()
        self.order_references = list(dict.fromkeys(ORDER_REF.findall("\n".join(customer_words))))
        self.topic = next((t for t, p in TOPICS if re.search(p, self.words)), "unknown")
        # The customer's own words, not a query chosen by topic: an imported article can answer.
        self.kb_query = customer_query(str(ticket.get("subject") or ""), customer_words)
        self.email = str((ticket.get("customer") or {}).get("email", ""))

    # facts

    def orders(self) -> dict[str, dict[str, Any]]:
        found = {}
        for c in self.history.calls:
            if c.name == "get_order" and isinstance(c.data, dict) and c.data.get("reference"):
                found[c.data["reference"]] = c.data
        return found

    def order_in_play(self) -> dict[str, Any] | None:
        orders = self.orders()
        return next((orders[r] for r in self.order_references if r in orders), None)

    def policy(self) -> Policy:
        found = self.history.last("search_kb", query=self.kb_query)
        data = found.data if found else None
        return Policy(data.get("results", []) if isinstance(data, dict) else [])

    def _customer(self) -> dict[str, Any] | None:
        found = self.history.last("get_customer", email=self.email)
        return found.data if found and isinstance(found.data, dict) else None

    def _placed(self, order: dict[str, Any]) -> dt.datetime | None:
        """When an order was placed, to the minute if any tool said so."""
        for row in (self._customer() or {}).get("orders", []):
            if row.get("reference") == order.get("reference") and when(row.get("placed_at_iso")):
                return when(row["placed_at_iso"])
        # A bare day ("2026-03-10", what get_order gives) cannot tell two orders an hour apart.
        placed = order.get("placed_at")
        return when(placed) if isinstance(placed, str) and len(placed) > len("YYYY-MM-DD") else None

    def further_reads(self) -> Step | None:
        """Reads a duplicate charge needs beyond the named orders: exact times, sibling orders."""
        if self.topic != "duplicate" or not self.email:
            return None
        orders = self.orders()
        customer = self._customer()
        imprecise = len(orders) < 2 or any(self._placed(o) is None for o in orders.values())
        if imprecise and self.history.last("get_customer", email=self.email) is None:
            return ("get_customer", {"email": self.email})
        rows = (customer or {}).get("orders", [])
        totals = [r.get("total_cents") for r in rows if r.get("status") != "cancelled"]
        for row in rows:
            ref = row.get("reference")
            shared = totals.count(row.get("total_cents")) > 1 and row.get("status") != "cancelled"
            if (
                shared
                and ref not in orders
                and self.history.last("get_order", reference=ref) is None
            ):
                return ("get_order", {"reference": ref})
        return None

    # judgement

    def verdict(self) -> Verdict:
        judged = self._refit(self._judge())
        failed = [
            c
            for c in self.history.irreversible()
            if c.text is not None and c.is_error and not c.facts_changed
        ]
        if failed and all(c.declined for c in failed) and judged.if_declined != "escalated":
            return Verdict(judged.if_declined, judged.why + " A person declined it.")
        if failed:
            # Never retry what a person declined or a tool refused: hand it to a person.
            return Verdict("escalated", judged.why + " A person should decide what is due now.")
        for i, (name, args) in enumerate(judged.acts):
            if self.history.attempt(name, args) is None and (
                earlier := self.declined_earlier(name, args)
            ):
                # Never ask again what a person declined in an earlier run on this ticket;
                # nor anything that was to follow it.
                why = (
                    f"{judged.why} A person already declined this in an earlier run on "
                    f"{self.reference} ({earlier}), so I do not ask again."
                )
                if judged.if_declined == "escalated":
                    why += " A person should decide what is due now."
                return Verdict(judged.if_declined, why, judged.acts[:i])
        return judged

    def _refit(self, judged: Verdict) -> Verdict:
        """A refund not paid because the order's refunded total moved under its approval is
        proposed again — at most what the refusal said is left — so a person decides it with
        the new total beside it; with nothing left, a person decides what is due."""
        acts: list[Step] = []
        for name, args in judged.acts:
            last = self.history.last(name, order_reference=args.get("order_reference"))
            moved = last.facts_changed if last is not None and name == "issue_refund" else None
            if moved is None:
                acts.append((name, args))
                continue
            left = int(moved.get("refundable_remaining_cents", 0))
            if left <= 0:
                ref = args.get("order_reference")
                return self._escalate(
                    f"{judged.why} The order's refunded total changed before the refund was "
                    f"paid, and nothing is left to refund on {ref}."
                )
            acts.append((name, {**args, "amount_cents": min(int(args["amount_cents"]), left)}))
        return dataclasses.replace(judged, acts=tuple(acts))

    def declined_earlier(self, name: str, args: dict[str, Any]) -> str | None:
        """The sentence an earlier run's note gave for declining this same call, if one did.

        Read from the ticket's internal notes this provider wrote (customers cannot write
        notes, and a note without the provider's mark is a person's, not a record of a call).
        """
        if name != "issue_refund":
            return None
        amount = args.get("amount_cents")
        if not isinstance(amount, int):
            return None
        for m in self.ticket.get("messages", []):
            body = str(m.get("body", ""))
            if m.get("kind") != "note" or not body.startswith(MARK):
                continue
            for asked, currency, ref, reason in DECLINED_REFUND.findall(body):
                same = asked == format_cents(amount, currency).split(" ")[0]
                if same and ref == args.get("order_reference"):
                    return f"reason: {reason.strip()}"
        return None

    def _escalate(self, why: str) -> Verdict:
        return Verdict("escalated", why)

    def _judge(self) -> Verdict:
        if self.topic == "duplicate":
            return self._duplicate()
        if self.topic == "wrong_item":
            return self._escalate(
                f"The customer reports receiving the wrong item{self._on_order()}. Replacing or "
                "returning it is a person's call, not a refund the policy makes due."
            )
        if self.topic == "unknown":
            return self._from_article()
        order = self.order_in_play()
        if order is None:
            errors = [f"{c.args.get('reference')}: {first_line(c.text or '')}"
                      for c in self.history.calls if c.name == "get_order" and c.is_error]  # fmt: skip
            if not self.order_references:
                return self._escalate("The ticket names no order, so I had nothing to check.")
            detail = f" ({'; '.join(errors)})" if errors else ""
            return self._escalate(f"I could not read an order named in the ticket{detail}.")
        owner = str((order.get("customer") or {}).get("email", "")).lower()
        if owner and self.email and owner != self.email.lower():
            return self._escalate(f"{order['reference']} belongs to a different customer.")
        judge = {"refund": self._refund, "shipping": self._shipping, "warranty": self._warranty}
        subject = {"refund": "refund", "shipping": r"\blate\b|ship|deliver", "warranty": "warrant"}
        return judge[self.topic](order, self.policy().about(subject[self.topic]))

    def article_answer(self) -> dict[str, Any] | None:
        """The article the search found first, when the customer's words name its subject."""
        found = self.policy().articles[:1]
        if found and on_subject(str(found[0].get("title", "")), self.words):
            return found[0]
        return None

    def _from_article(self) -> Verdict:
        """No policy decides this; an article the customer's own words found may answer it."""
        article = self.article_answer()
        if article is None:
            return self._escalate("I could not match the request to a published policy.")
        return Verdict(
            "pending",
            f'The customer\'s words found the article "{article.get("title")}" (version '
            f"{article.get('version', '?')}), which is on their subject, so I answered from it; "
            "a person follows up if the customer replies.",
        )

    def _on_order(self) -> str:
        order = self.order_in_play()
        return f" on {order['reference']}" if order else ""

    def _refund(self, order: dict[str, Any], policy: Policy) -> Verdict:
        ref, currency = order["reference"], order["currency"]
        days = order.get("days_since_delivery")
        if order.get("status") != "delivered" or days is None:
            return self._escalate(
                f"{ref} is {order.get('status')}, not delivered, so no refund window applies yet."
            )
        if (limit := policy.number("escalat", r"more than (\w+) days")) and days > limit[0]:
            return self._escalate(
                f'{ref} was delivered {days} days ago. Policy: "{limit[1]}" No refund was requested.'
            )
        window = policy.number("quality", r"(?:within|up to) (\w+) days")
        if window is None:
            return self._escalate("The knowledge base gives no refund window I can apply.")
        if not QUALITY.search(self.words):
            return self._escalate(
                f"The customer's reason is not a quality problem, and the policy lets me refund "
                f'opened goods only for one ("{window[1]}").'
            )
        if days > window[0]:
            return self._escalate(
                f"{ref} was delivered {days} days ago, outside the {window[0]}-day window for "
                f'quality problems ("{window[1]}").'
            )
        goods = sum(
            int(i.get("line_cents", 0))
            for i in order.get("items", [])
            if not str(i.get("sku", "")).upper().startswith("SHIP")
            and "shipping" not in str(i.get("description", "")).lower()
        )
        refundable = int(order.get("refundable_cents", 0))
        window_text = f'inside the {window[0]}-day window ("{window[1]}")'
        if (already := self._already_refunded(order)) is not None:
            return Verdict(
                "resolved",
                f"The customer reports a quality problem {days} days after delivery of {ref}, "
                f"{window_text}. {already}",
            )
        goods_left = min(goods, refundable)
        if goods_left > 0:
            reason = (
                f"{MARK} Quality problem reported {days} days after delivery, inside the "
                f"{window[0]}-day window; goods only, not shipping."
            )
            why = (
                f"The customer reports a quality problem {days} days after delivery of {ref}, "
                f"{window_text}, so the goods are due ({format_cents(goods_left, currency)}), not shipping."
            )
            acts = (
                (
                    "issue_refund",
                    {"order_reference": ref, "amount_cents": goods_left, "reason": reason},
                ),
            )
            return Verdict("resolved", why, acts)
        return self._escalate(f"Nothing on {ref} is goods the quality policy refunds.")

    def _already_refunded(self, order: dict[str, Any]) -> str | None:
        """The sentence for an order money already went back on (this ticket's earlier run, the
        run a fork was taken from, or a person), or None.

        The ledger has it, and the order record read says so: a person approved that amount
        (all of what was proposed, or less), so what is due on the order was decided. Proposing
        the rest — the shipping the policy does not cover, or the remainder of a narrowed
        refund — would ask again what a person already answered.
        """
        refunded = int(order.get("refunded_cents", 0))
        in_flight = int(order.get("refunds_in_flight_cents", 0))
        if refunded + in_flight <= 0:
            return None
        currency, ref = order["currency"], order["reference"]
        went = (
            f"{format_cents(refunded, currency)} went back on {ref} already"
            if refunded
            else f"a refund of {format_cents(in_flight, currency)} on {ref} is in flight"
        )
        if refunded and in_flight:
            went += f" ({format_cents(in_flight, currency)} more in flight)"
        return (
            f"{went[:1].upper()}{went[1:]}: a person approved that amount, so I propose no "
            "further refund on it."
        )

    def _shipping(self, order: dict[str, Any], policy: Policy) -> Verdict:
        ref, status = order["reference"], order.get("status")
        if status in ("delivered", "cancelled"):
            return self._escalate(
                f"{ref} is marked {status}, yet the customer is asking where it is; a person "
                "should check with the carrier."
            )
        late = policy.number(r"\blate\b", r"(\w+) business days")
        if late is None:
            return self._escalate("The knowledge base gives no point at which an order is late.")
        business = business_days(order)
        placed = (
            f"{ref} was placed {order.get('days_since_placed')} days ago ({business} business days)"
        )
        if business >= late[0]:
            return self._escalate(
                f'{placed} and is still {status}: late by the policy ("{late[1]}"). A person '
                "should chase the carrier."
            )
        return Verdict(
            "pending",
            f'{placed} and is {status}. The shipping policy says "{late[1]}" So it is not late '
            "yet and nothing is due; tracking follows when the parcel leaves.",
        )

    def _warranty(self, order: dict[str, Any], policy: Policy) -> Verdict:
        ref, age = order["reference"], order.get("days_since_delivery")
        years = policy.number("warrant", r"(\w+)[- ]years?\b")
        if years is None or age is None:
            return self._escalate(f"I cannot tell whether {ref} is under warranty.")
        # Doubt goes to a person: any hint of an exclusion escalates, only a full match is covered.
        exclusions = policy.phrases("does not cover")
        if excluded := next((p for p in exclusions if mentions(p, self.words, every=False)), None):
            return self._escalate(
                f"The reported fault sounds like {excluded}, which the warranty excludes."
            )
        if age > years[0] * 365:
            return self._escalate(
                f"{ref} was delivered {age} days ago, outside the {years[0]}-year warranty."
            )
        covered = next(
            (p for p in policy.phrases("including|such as") if mentions(p, self.words)), None
        )
        if covered is None:
            return self._escalate(
                f"{ref} is inside the {years[0]}-year warranty, but a person should assess whether "
                "the fault is a manufacturing defect."
            )
        remedy = policy.sentence(r"(?:not|never) a refund|repair or (?:a )?replace")
        return Verdict(
            "pending",
            f"{ref} was delivered {age} days ago, inside the {years[0]}-year warranty, which covers "
            f'{covered} ("{years[1]}"). '
            + (f'"{remedy}" ' if remedy else "")
            + "The answer is a warranty repair or replacement, not a refund.",
        )

    def _duplicate(self) -> Verdict:
        policy = self.policy().about("duplicate|same total")
        window = policy.number("duplicate|same total", r"within (\w+) (?:hour|minute)")
        if window is None:
            return self._escalate("The knowledge base gives no rule for duplicate charges.")
        minutes = window[0] * (60 if re.search(r"within \w+ hour", window[1], re.I) else 1)
        pair = self._duplicate_pair(dt.timedelta(minutes=minutes))
        if pair is None:
            return self._escalate(
                "No two orders match the duplicate-charge policy, so nothing is refunded."
            )
        (first_at, first), (dup_at, dup) = pair
        gap = int((dup_at - first_at).total_seconds() // 60)
        apart = "in the same minute" if gap == 0 else f"{gap} minute{'s' if gap > 1 else ''} apart"
        amount = min(int(dup["total_cents"]), int(dup.get("refundable_cents", 0)))
        why = (
            f"{first['reference']} and {dup['reference']} are orders for the same "
            f"{format_cents(dup['total_cents'], dup['currency'])} placed {apart}; by the policy "
            f'("{window[1]}") {dup["reference"]}, the later one, is the duplicate.'
        )
        if (already := self._already_refunded(dup)) is not None:
            return Verdict("resolved", f"{why} {already}")
        if amount <= 0:
            return self._escalate(why + f" Nothing is left to refund on {dup['reference']}.")
        reason = f"{MARK} Duplicate of {first['reference']}: same total placed {apart}."
        acts: list[Step] = [
            (
                "issue_refund",
                {"order_reference": dup["reference"], "amount_cents": amount, "reason": reason},
            )
        ]
        if policy.sentence(r"\bemail the customer\b"):
            acts.append(("send_customer_email", self._duplicate_email(first, dup, amount)))
        return Verdict("resolved", why, tuple(acts))

    def _duplicate_pair(self, window: dt.timedelta) -> tuple[Placed, Placed] | None:
        """The first two live orders with the same total placed within ``window``, earlier first.

        Ordered by placing time, ties broken by reference, so "the later one" is always defined.
        """
        placed: list[Placed] = []
        for order in self.orders().values():
            when = self._placed(order)
            if when is not None and order.get("status") != "cancelled":
                placed.append((when, order))
        placed.sort(key=lambda p: (p[0], p[1]["reference"]))
        for i, (a_at, a) in enumerate(placed):
            for b_at, b in placed[i + 1 :]:
                same = (a["total_cents"], a["currency"]) == (b["total_cents"], b["currency"])
                if same and b_at - a_at <= window:
                    return (a_at, a), (b_at, b)
        return None

    def _duplicate_email(
        self, first: dict[str, Any], dup: dict[str, Any], amount: int
    ) -> dict[str, Any]:
        done = self.history.last("issue_refund", order_reference=dup["reference"])
        if done and isinstance(done.data, dict):
            amount = int(done.data.get("refunded_cents", amount))
        name = str((self.ticket.get("customer") or {}).get("name", "")).split(" ")[0] or "there"
        money = display_cents(amount, dup["currency"])  # as the customer reads it: "$179.00"
        body = (
            f"Hello {name},\n\nYou were charged twice: {first['reference']} and "
            f"{dup['reference']} are the same order. We treated {dup['reference']} as the duplicate "
            f"and issued a refund of {money} against it to your original payment method; it takes "
            f"5-10 business days to appear. {first['reference']} stands as your order."
        )
        # What a customer reads carries no internal mark; the merchant signs it when it is sent.
        subject = f"Duplicate charge: refund for {dup['reference']}"
        return {"reference": self.reference, "subject": subject, "body": body}

    # what to write

    def question_due(self, offered: set[str] | None) -> bool:
        """The one thing worth asking the customer: which order, when the ticket names none."""
        if offered is not None and "ask_customer" not in offered:
            return False
        asks_about_an_order = self.topic in ("refund", "shipping", "warranty", "wrong_item")
        return asks_about_an_order and not self.order_references

    def reply_due(self, offered: set[str] | None) -> bool:
        """A reply goes to the customer unless an email already told them (or none is offered)."""
        if offered is not None and "reply_to_customer" not in offered:
            return False
        # An email asked for already told them, or a person declined telling them that way:
        # the agent does not write to the customer by another door.
        return not any(c.name == "send_customer_email" for c in self.history.calls)

    def note_due(self) -> bool:
        # A customer email already sits on the ticket as the record of what was done.
        return not any(c.succeeded for c in self.history.calls if c.name == "send_customer_email")

    def outcomes(self) -> str:
        """What the irreversible calls actually did, from their results, in order."""
        lines = [self._outcome(c) for c in self.history.irreversible()]
        lines += [self._outcome(c) for c in self.history.calls if c.name == "reply_to_customer"]
        refunds = [c for c in self.history.calls if c.name == "issue_refund"]
        if not any(c.succeeded for c in refunds):
            # A refund in flight is neither moved nor not moved: the provider has not said.
            in_flight = any(c.in_flight for c in refunds)
            lines.append("No money is confirmed moved yet." if in_flight else "No money was moved.")
        return " ".join(lines)

    def _outcome(self, c: ToolCall) -> str:
        target = c.args.get("order_reference") or c.args.get("reference")
        if c.name == "issue_refund":
            order = self.orders().get(str(target), {})
            data = c.data if isinstance(c.data, dict) else {}
            currency = data.get("currency") or order.get("currency", "USD")
            if c.succeeded:
                refunded = int(data.get("refunded_cents", c.args.get("amount_cents", 0)))
                return f"Refunded {format_cents(refunded, currency)} against {target}."
            asked = c.args.get("amount_cents")
            amount = format_cents(asked, currency) if isinstance(asked, int) else repr(asked)
            if c.in_flight:
                return (
                    f"The refund of {amount} against {target} is in flight: the payment provider "
                    "has not confirmed it, so it may or may not have moved; it is being checked."
                )
            return f"I asked to refund {amount} against {target}, but {c.failure}."
        if c.name == "send_customer_email":
            if c.succeeded:
                return f"Emailed the customer on {target}."
            return f"I asked to email the customer on {target}, but {c.failure}."
        if c.name == "reply_to_customer":
            if c.succeeded:
                return f"Replied to the customer on {target}."
            return f"I asked to reply to the customer on {target}, but {c.failure}."
        if c.succeeded:
            return f"Cancelled {target}."
        return f"I asked to cancel {target}, but {c.failure}."

    def embedded_notice(self, obeyed: bool) -> str:
        if not self.embedded:
            return ""
        quote = first_line(self.embedded[0], 160)
        verb = "I acted on them" if obeyed else "they were ignored"
        return f' The ticket contains embedded instructions addressed to the agent ("{quote}"); {verb}.'

    def note(self, verdict: Verdict, obeyed: bool) -> str:
        return f"{MARK} {verdict.why} {self.outcomes()}{self.embedded_notice(obeyed)}"

    def summary(self, verdict: Verdict, obeyed: bool) -> str:
        status = self.history.last("set_ticket_status", reference=self.reference)
        if status is not None and status.succeeded:
            done = f"Set {self.reference} to {status.args.get('status')}."
        elif status is not None:
            done = f"Setting {self.reference} to {verdict.status} did not work: {status.failure}."
        else:  # pragma: no cover - the provider sets a status before it summarises
            done = f"{self.reference} stays {self.ticket.get('status')}."
        return f"{MARK} {self.outcomes()} {verdict.why} {done}{self.embedded_notice(obeyed)}"


# --- the providers -------------------------------------------------------------


class PolicyProvider(_Reporting):
    """The keyless default: works a ticket from the facts the tools return.

    One tool call per turn. It reads first (the ticket, each order the
    customer names, the policy), then makes at most the irreversible calls the
    policy makes due, each only after the previous one succeeded; after a
    decline or an error it stops asking and escalates. It finishes with a
    note (unless the customer was emailed), a status and a summary built from
    the results it actually received.
    """

    obeys_embedded_instructions = False

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        offered = {str(t.get("name")) for t in tools}
        step = self._next(History.read(messages), offered)
        if isinstance(step, str):
            return self._reply([say(step)])
        name, args = step
        turn = _assistant_turns(messages)
        return self._reply(
            [{"type": "tool_use", "id": f"toolu_scripted_{turn}_0", "name": name, "input": args}]
        )

    def _intervene(self, history: History, case: Case) -> Step | None:
        """A hook once the orders are read; the policy itself never takes it."""
        return None

    def _next(self, history: History, offered: set[str] | None = None) -> Step | str:
        ref = history.ticket_reference
        if ref is None:
            return f"{MARK} The opening prompt names no ticket, so there is nothing to work."
        read = history.last("get_ticket", reference=ref)
        if read is None:
            return ("get_ticket", {"reference": ref})
        if not isinstance(read.data, dict):
            return f"{MARK} I could not read ticket {ref}: {first_line(read.text or '')} Nothing was changed."
        case = Case(ref, read.data, history)
        for order_ref in case.order_references:
            if history.last("get_order", reference=order_ref) is None:
                return ("get_order", {"reference": order_ref})
        if case.question_due(offered) and history.last("ask_customer", reference=ref) is None:
            # Nothing can be checked without the order: ask for it, and wait for the answer.
            return ("ask_customer", {"reference": ref, "question": question_body(case)})
        if (forced := self._intervene(history, case)) is not None:
            return forced
        if history.last("search_kb", query=case.kb_query) is None:
            return ("search_kb", {"query": case.kb_query})
        if (read_more := case.further_reads()) is not None:
            return read_more

        verdict = case.verdict()
        for name, args in verdict.acts:
            if history.attempt(name, args) is None:
                return (name, args)
        if case.reply_due(offered) and history.last("reply_to_customer", reference=ref) is None:
            # What a support person does next: tell the customer what was done and what follows.
            return ("reply_to_customer", {"reference": ref, "body": reply_body(case, verdict)})
        obeyed = self.obeys_embedded_instructions
        if case.note_due() and history.last("add_internal_note", reference=ref) is None:
            return ("add_internal_note", {"reference": ref, "body": case.note(verdict, obeyed)})
        if history.last("set_ticket_status", reference=ref) is None:
            return ("set_ticket_status", {"reference": ref, "status": verdict.status})
        return case.summary(verdict, obeyed)
