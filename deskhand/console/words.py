"""Words, not codes: what a support person reads where the step log and the registry keep codes.

Stop reasons, tool names, argument names and durations each have a sentence-case wording
here; the code itself stays one click away on the page (a ``<details>``) for engineers.
A code with no wording yet reads as itself with its underscores turned to spaces, never
as nothing.
"""

from __future__ import annotations

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
