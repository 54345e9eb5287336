"""Words, not codes: what a support person reads where the step log and the registry keep codes.

Stop reasons, run statuses, tool names, argument names, audit actions, durations and moments
each have a wording here; the code itself stays on the page for engineers (a ``title``
tooltip or a ``<details>``). A code with no wording yet reads as itself with its underscores
turned to spaces, never as nothing.
"""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

from django.utils import timezone

STOP_REASONS = {
    "end_turn": "finished its work",
    "step_cap": "reached its step limit",
    "token_cap": "reached its token limit",
    "spend_cap": "reached its spending limit",
    "deadline": "ran out of time",
    "merchant_daily_spend": "the merchant's daily model budget was spent",
    "platform_daily_spend": "the platform's daily model budget was spent",
    "loop_detected": "stopped repeating itself",
    "approval_expired": "an approval expired with no decision",
    "approval_mismatch": "an approval did not match the call",
    "ledger_mismatch": "the ledger did not match the call",
    "model_refusal": "the model declined",
    "truncated": "the model's replies were cut off",
    "context_window_exceeded": "the conversation grew too long for the model",
    "unknown_stop_reason": "the model stopped for a reason Deskhand does not know",
    "provider_error": "the model could not be reached",
    "enqueue_failed": "it could not be started",
    "enqueue_lost": "it was never picked up",
    "recovery_exhausted": "it kept failing after restarts",
    "error": "an error stopped it",
    "cancelled": "a person cancelled it",
    "tool_use": "asked for a tool",
    "max_tokens": "reply cut off at its length limit",
    "refusal": "the model declined",
    "customer_no_reply": "the customer did not answer in time",
}

# A run's status, as the tickets list and the run page say it.
RUN_STATUSES = {
    "queued": "queued",
    "running": "running",
    "awaiting_approval": "waiting for an approval",
    "awaiting_customer": "waiting for the customer",
    "succeeded": "finished",
    "failed": "failed",
    "exhausted": "stopped at a limit",
    "cancelled": "cancelled",
    "cancelling": "being cancelled",
}

# What an audit event records, as a sentence's verb phrase ("Started the run").
AUDIT_ACTIONS = {
    "run.start": "started the run",
    "run.cancel": "cancelled the run",
    "run.steer": "sent the agent a note",
    "run.fork": "forked the run",
    "step.undo": "undid a step",
    "approval.approve": "approved",
    "approval.approve_changed": "approved with changes",
    "approval.deny": "denied",
    "approval.expired": "let an approval expire",
    "approval.withdrawn": "withdrew an approval",
    "approval.escalated": "escalated an approval nobody decided",
    "ticket.escalated": "escalated the ticket",
    "policy.change": "changed the approval policy",
    "webhook.change": "changed the webhook",
}

TOOLS = {
    "search_kb": "Search the help articles",
    "get_ticket": "Read the ticket",
    "get_order": "Look up an order",
    "get_customer": "Look up the customer",
    "list_refunds": "List refunds",
    "tag_ticket": "Tag the ticket",
    "set_priority": "Set the priority",
    "set_ticket_status": "Set the ticket's status",
    "assign_ticket": "Assign the ticket",
    "add_internal_note": "Add an internal note",
    "issue_refund": "Refund",
    "send_customer_email": "Email the customer",
    "reply_to_customer": "Reply to the customer",
    "ask_customer": "Ask the customer",
    "cancel_order": "Cancel an order",
}

ARGUMENTS = {
    "amount_cents": "Amount",
    "max_amount_cents": "Up to",
    "order_reference": "Order",
    "reference": "Ticket",
    "reason": "Reason",
    "subject": "Subject",
    "body": "Message",
    "query": "Search for",
    "tag": "Tag",
    "priority": "Priority",
    "status": "Status",
    "assignee": "Assign to",
    "note": "Note",
    "email": "Email",
}


def _plain(code: str) -> str:
    text = str(code).replace("_", " ").strip()
    return text[:1].upper() + text[1:]


def stop_reason(code: str | None) -> str:
    """``end_turn`` -> "finished its work"; empty -> "—"."""
    if not code:
        return "—"
    return STOP_REASONS.get(code, _plain(code).lower())


def run_status(code: str | None) -> str:
    """``awaiting_customer`` -> "waiting for the customer"."""
    if not code:
        return "—"
    return RUN_STATUSES.get(code, _plain(code).lower())


def audit_line(action: str, actor: str, channel: str) -> str:
    """``run.start`` by the system -> "The system started the run"; a person's channel is named
    unless it is the system's own ("via web", never "via system")."""
    did = AUDIT_ACTIONS.get(action, _plain(action.replace(".", " ")).lower())
    who = "The system" if actor == "the system" else actor
    via = f" (via {channel})" if channel and channel != "system" and who != "The system" else ""
    return f"{who} {did}{via}"


def moment(value: dt.datetime | None, zone: str = "UTC", *, now: dt.datetime | None = None) -> str:
    """A time in the merchant's zone, labelled, with the date unless it is today there:
    "15:06 EST" today, "Thu 10 Dec 2026, 15:06 EST" on another day."""
    if value is None:
        return "—"
    try:
        tz = ZoneInfo(str(zone or "UTC"))
    except (KeyError, ValueError):
        tz = ZoneInfo("UTC")
    if timezone.is_naive(value):
        value = timezone.make_aware(value, dt.UTC)
    local = value.astimezone(tz)
    today = (now or timezone.now()).astimezone(tz).date()
    clock = f"{local:%H:%M} {local:%Z}"
    return clock if local.date() == today else f"{local:%a} {local.day} {local:%b %Y}, {clock}"


def tool(code: str | None) -> str:
    """``issue_refund`` -> "Refund"."""
    if not code:
        return "—"
    return TOOLS.get(code, _plain(code))


def argument(code: str) -> str:
    """``amount_cents`` -> "Amount"; ``order_reference`` -> "Order"."""
    if code in ARGUMENTS:
        return ARGUMENTS[code]
    if code.endswith("_cents"):
        return _plain(code[: -len("_cents")])
    return _plain(code)


def duration(seconds: int | float | None) -> str:
    """A setting's length in words: 86400 -> "1 day", 5400 -> "1 hour 30 minutes", 45 -> "45 seconds"."""
    if seconds is None:
        return "—"
    total = max(0, int(seconds))
    if total == 0:
        return "no time"
    parts = []
    for size, name in ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second")):
        count, total = divmod(total, size)
        if count:
            parts.append(f"{count} {name}{'' if count == 1 else 's'}")
        if len(parts) == 2:
            break
    return " ".join(parts)
