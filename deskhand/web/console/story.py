"""A run told as a story: one plain sentence per step, for the person reading the run page.

The step log is written for machines (JSON payloads, cents, tool names). A
support person wants "Looked up order NW-1042 — $124.00, nothing refunded
yet" and "owner@northwind.test approved at 14:02". The raw payload stays on
the page behind a disclosure; these sentences are what it reads first.

Money is formatted from integer cents only (``deskhand.domain.desk.money.display_cents``): an amount that
is not an int is left out of the sentence rather than guessed at. Everything a
tool returned or the model sent is outside text: it is parsed defensively and
only a few named fields are quoted, so a sentence never shows raw JSON.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping
from typing import Any

from django.utils import timezone

from agent.conversation import fence
from agent.customer.news import NOTHING_SENT, REPLY_TOOL
from agent.customer.wait import ANSWER_PREFIX
from agent.models import Step, payloads
from agent.models.payloads import StepKind
from agent.replay import compat
from agent.tools.order_facts import FACTS_CHANGED, moved_note
from deskhand.domain.desk.money import display_cents as cents
from deskhand.web.console import words

MAX_QUOTE = 80  # characters of outside text a sentence quotes before it cuts

# Why a run stopped, in words ("Stopped: it used all the steps it was allowed.").
STOP_WORDS = {
    "step_cap": "it used all the steps it was allowed",
    "token_cap": "it used all the tokens it was allowed",
    "spend_cap": "it reached its spending limit",
    "deadline": "it ran out of time",
    "merchant_daily_spend": "the merchant's daily model budget is spent",
    "platform_daily_spend": "the platform's daily model budget is spent",
    "loop_detected": "it kept repeating the same call",
    "approval_expired": "an approval request expired unanswered",
    "approval_mismatch": "the call changed after it was approved",
    "ledger_mismatch": "the ledger holds a different call under the same key",
    "model_refusal": "the model refused to continue",
    "truncated": "the model's replies were cut off at their length limit twice",
    "context_window_exceeded": "the conversation outgrew the model's context window",
    "unknown_stop_reason": "the model stopped for a reason Deskhand does not know",
    "provider_error": "the model could not be reached",
    "enqueue_failed": "the run could not be queued",
    "enqueue_lost": "the run was lost before a worker took it",
    "recovery_exhausted": "it failed again every time it was recovered",
    "cancelled": "it was cancelled",
    "customer_no_reply": "the customer did not answer in time",
    "error": "an unexpected error",
}


def _int(value: Any) -> int | None:
    """An amount only if it really is an integer (never a float, a bool or a string)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _money(value: Any, currency: str) -> str | None:
    amount = _int(value)
    return cents(amount, currency) if amount is not None else None


def _quote(value: Any) -> str:
    text = " ".join(str(value).split())
    return f"“{text[:MAX_QUOTE]}…”" if len(text) > MAX_QUOTE else f"“{text}”"


def _ref(args: Mapping[str, Any], key: str = "reference") -> str:
    value = args.get(key)
    return str(value) if isinstance(value, str | int) and str(value).strip() else "?"


def _json(text: str) -> dict[str, Any]:
    """A tool result's JSON object, or {} (an error text, a redacted marker, anything else)."""
    try:
        value = json.loads(fence.unwrap(text))
    except (ValueError, TypeError):
        return {}
    return value if isinstance(value, dict) else {}


def at_clock(value: str | None) -> str:
    """An ISO timestamp as the page's local clock time, "14:02" (empty if unreadable)."""
    if not value:
        return ""
    try:
        moment = dt.datetime.fromisoformat(value)
    except ValueError:
        return ""
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, dt.UTC)
    return timezone.localtime(moment).strftime("%H:%M")


# --- what a call asks for, as a phrase ("look up order NW-1042") ---------------------------


def intent(name: str, args: Any, currency: str = "USD") -> str:
    a = args if isinstance(args, Mapping) else {}
    amount = _money(a.get("amount_cents"), currency)
    phrases: dict[str, Callable[[], str]] = {
        "get_order": lambda: f"look up order {_ref(a)}",
        "get_ticket": lambda: f"read ticket {_ref(a)}",
        "get_customer": lambda: "look up the customer",
        "list_refunds": lambda: (
            f"list the customer's refunds of the last {_ref(a, 'since_days')} days"
        ),
        "search_kb": lambda: f"search the help articles for {_quote(a.get('query', ''))}",
        "issue_refund": lambda: (
            f"refund {amount or 'an amount'} on order {_ref(a, 'order_reference')}"
        ),
        "send_customer_email": lambda: f"email the customer {_quote(a.get('subject', ''))}",
        "reply_to_customer": lambda: f"reply to the customer on {_ref(a)}",
        "ask_customer": lambda: f"ask the customer on {_ref(a)} and wait for the answer",
        "cancel_order": lambda: f"cancel order {_ref(a, 'order_reference')}",
        "tag_ticket": lambda: f"tag {_ref(a)} with {', '.join(map(str, a.get('tags') or []))}",
        "set_priority": lambda: f"set {_ref(a)}'s priority to {a.get('priority')}",
        "set_ticket_status": lambda: f"set {_ref(a)}'s status to {a.get('status')}",
        "assign_ticket": lambda: f"assign {_ref(a)} to {a.get('assignee_email')}",
        "add_internal_note": lambda: f"add an internal note to {_ref(a)}",
    }
    phrase = phrases.get(name)
    return phrase() if phrase else words.tool(name).lower()


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


# --- one sentence per kind of step ----------------------------------------------------------


def _model(p: payloads.ModelPayload, currency: str) -> str:
    if p.stop_reason == "refusal":
        return "The model refused to answer; nothing it said was acted on."
    if p.stop_reason == "max_tokens":
        return "The model's reply was cut off at its length limit."
    calls = p.calls
    if calls:
        wants = [intent(str(c.get("name", "?")), c.get("input"), currency) for c in calls]
        return f"The agent decided to {_and(wants)}."
    if p.text.strip():
        return "The agent wrote its answer."
    return "The model answered with nothing to do."


def _order(r: dict[str, Any], args: Mapping[str, Any], currency: str) -> str:
    cur = str(r.get("currency") or currency)
    total = _money(r.get("total_cents"), cur)
    refunded = _int(r.get("refunded_cents"))
    in_flight = _int(r.get("refunds_in_flight_cents"))
    left = _money(r.get("refundable_cents"), cur)
    head = f"Looked up order {r.get('reference') or _ref(args)}"
    if total is None:
        return head
    flight = f", {cents(in_flight, cur)} in flight (not yet confirmed)" if in_flight else ""
    if not refunded:
        return f"{head} — {total}, nothing refunded yet{flight}" + (
            f", {left} left" if flight else ""
        )
    return f"{head} — {total}, {cents(refunded, cur)} refunded{flight}, {left} left"


def _tool(step: Step, p: payloads.ToolPayload, currency: str) -> str:
    args = step.arguments if isinstance(step.arguments, dict) else {}
    name = step.tool
    if not step.ok and p.effect_state == "pending":
        # Sent to another system that has not answered: neither done nor failed.
        return (
            f"Sent “{intent(name, args, currency)}” to the {p.adapter or 'other'} system, which has "
            "not confirmed it yet: in flight, it may or may not have happened"
        )
    if not step.ok and (moved := _json(p.text)).get(FACTS_CHANGED) is True:
        try:
            return moved_note(moved)  # why nothing was paid, in the ticket note's own words
        except (KeyError, TypeError, ValueError):
            pass  # a record that does not read (redacted, say): the plain failure below
    if not step.ok:
        reason = fence.unwrap(p.text).strip() or "no reason given"
        if name == REPLY_TOOL and reason.startswith(NOTHING_SENT):
            return reason  # the gate's own sentence, whole: why the customer heard nothing
        return f"Tried to {intent(name, args, currency)}, which failed: {_quote(reason)}"
    if step.replayed:
        return (
            f"Found “{intent(name, args, currency)}” already done in the ledger: "
            "it reported what was done and nothing happened twice"
        )
    r = _json(p.text)
    cur = str(r.get("currency") or currency)
    if name == "get_order":
        return _order(r, args, currency)
    if name == "get_ticket":
        count = len(r.get("messages") or [])
        return f"Read ticket {r.get('reference', _ref(args))} — {count} message{'s' * (count != 1)}"
    if name == "get_customer":
        orders, tickets = len(r.get("orders") or []), len(r.get("tickets") or [])
        return f"Looked up the customer — {orders} order{'s' * (orders != 1)}, {tickets} ticket{'s' * (tickets != 1)}"
    if name == "list_refunds":
        found = len(r.get("refunds") or [])
        total = _money(r.get("total_cents"), cur)
        days = r.get("since_days", _ref(args, "since_days"))
        if not found:
            return f"Checked the customer's refunds of the last {days} days — none"
        if "in_flight_cents" not in r:
            return compat.refunds_without_flight(found, total, days)
        in_flight = _int(r.get("in_flight_cents"))
        flight = f", and {cents(in_flight, cur)} in flight (not yet confirmed)" if in_flight else ""
        return (
            f"Checked the customer's refunds of the last {days} days — {found}, {total} "
            f"refunded{flight}"
        )
    if name == "search_kb":
        found = len(r.get("results") or [])
        return f"Searched the help articles for {_quote(args.get('query', ''))} — {found} found"
    if name == "issue_refund":
        paid = _money(r.get("refunded_cents"), cur) or _money(args.get("amount_cents"), cur)
        left = _money(r.get("refundable_remaining_cents"), cur)
        tail = f" — {left} left to refund" if left else ""
        return f"Refunded {paid or 'the amount'} on order {_ref(args, 'order_reference')}{tail}"
    if name == "send_customer_email":
        return f"Emailed the customer {_quote(args.get('subject', ''))}"
    if name == "reply_to_customer":
        return f"Replied to the customer on {_ref(args)}"
    if name == "ask_customer":
        text = fence.unwrap(p.text).strip()
        if text.startswith(ANSWER_PREFIX):
            return f"The customer answered the question on {_ref(args)}"
        return f"Asked the customer a question on {_ref(args)} and waited for the answer"
    if name == "cancel_order":
        return f"Cancelled order {_ref(args, 'order_reference')}"
    if r.get("changed") is False:
        return f"Nothing to change: asked to {intent(name, args, currency)}, which was already so"
    return _done(name, args)


def _done(name: str, a: Mapping[str, Any]) -> str:
    """A reversible change that was made, in the past tense."""
    if name == "tag_ticket":
        return f"Tagged {_ref(a)} with {', '.join(map(str, a.get('tags') or []))}"
    if name == "set_priority":
        return f"Set {_ref(a)}'s priority to {a.get('priority')}"
    if name == "set_ticket_status":
        return f"Set {_ref(a)}'s status to {a.get('status')}"
    if name == "assign_ticket":
        return f"Assigned {_ref(a)} to {a.get('assignee_email')}"
    if name == "add_internal_note":
        return f"Added an internal note to {_ref(a)}"
    return f"Did this: {words.tool(name).lower()}"


def _approval(step: Step, p: payloads.ApprovalPayload, currency: str) -> str:
    what = intent(step.tool, step.arguments, currency)
    when = at_clock(p.decided_at)
    at = f" at {when}" if when else ""
    who = p.decided_by or "someone"
    if p.event == "requested":
        if p.policy:
            return f"The merchant's {p.policy} approved the request to {what}; no person waited"
        again = " (the earlier request still stands)" if p.reused else ""
        return f"Asked a person to approve: {what}{again}"
    if p.event == "approved":
        if p.policy:
            return f"The merchant's {p.policy} approved it{at}; no person waited"
        changes = f", with changes: {p.changed}" if p.changed else ""
        return f"{who} approved{at}{changes}"
    if p.event == "denied":
        why = f": {_quote(p.reason)}" if p.reason else ""
        return f"{who} denied it{at}{why}"
    if p.event == "expired":
        return f"Nobody decided in time: the request to {what} expired"
    if p.event == "mismatch":
        return f"Refused to {what}: the call no longer matched what was approved"
    return f"Approval of the request to {what}: {p.event or 'no event'}"


def _note(p: payloads.NotePayload) -> str:
    authors = sorted({n.author or "someone" for n in p.notes})
    if not authors:
        return "A staff note reached the agent"
    count = len(p.notes)
    notes = "a note" if count == 1 else f"{count} notes"
    return f"{_and(authors)} sent {notes} the agent read before its next turn"


def _end(step: Step, p: payloads.EndPayload) -> str:
    if step.kind == StepKind.BOUND and p.event == "cancel":
        withdrawn = len(p.withdrawn)
        tail = (
            f"; {withdrawn} pending approval{'s' * (withdrawn != 1)} withdrawn" if withdrawn else ""
        )
        return f"Cancelled by {p.by or 'someone'}{tail}"
    if step.kind == StepKind.FINAL:
        return "The run finished"
    words = STOP_WORDS.get(p.stop_reason, p.stop_reason or p.status or "a bound")
    if step.kind == StepKind.ERROR:
        return f"Failed: {words}"
    return f"Stopped: {words}"


def sentence(step: Step, *, currency: str = "USD") -> str:
    """What happened at ``step``, as one sentence a support person reads."""
    p = payloads.read(step)
    if isinstance(p, payloads.ModelPayload):
        text = _model(p, currency)
    elif isinstance(p, payloads.ToolPayload):
        text = _tool(step, p, currency)
    elif isinstance(p, payloads.ApprovalPayload):
        text = _approval(step, p, currency)
    elif isinstance(p, payloads.NotePayload):
        text = _note(p)
    elif isinstance(p, payloads.EndPayload):
        text = _end(step, p)
    else:
        undid = p.undid_seq if p.undid_seq is not None else "?"
        text = f"Undid step {undid}" + (f" for {p.by}" if p.by else "")
    late = " (finished after the run was closed)" if p.late else ""
    return text.rstrip(".") + late + "."


def ago(moment: dt.datetime, now: dt.datetime) -> str:
    """How long ago, for people: "just now", "4 min ago", "3 h ago", "2 days ago", then the date."""
    seconds = int((now - moment).total_seconds())
    if seconds < 45:
        return "just now"
    if seconds < 3600:
        return f"{max(1, round(seconds / 60))} min ago"
    if seconds < 86_400:
        return f"{seconds // 3600} h ago"
    if seconds < 7 * 86_400:
        days = seconds // 86_400
        return f"{days} day{'s' * (days != 1)} ago"
    return f"on {timezone.localtime(moment):%Y-%m-%d}"


def exact(moment: dt.datetime) -> str:
    """The exact time a hover shows: "2026-12-02 14:02:11 UTC"."""
    return f"{timezone.localtime(moment):%Y-%m-%d %H:%M:%S %Z}"
