"""Effects keyed on what they do, across a run's lineage.

A run's *lineage* is every run sharing its root (``Run.root()``): the origin, its
forks, their forks. Its ledger entries all carry that ``root_run``. An
irreversible call is matched against them by business identity — the fields the
frozen registry declares per tool (``ToolDef.identity``: a refund is its order
and amount, an email its ticket and so its recipient, a cancellation its order;
``ToolDef.content``: an email's body) — never by the model's ``tool_use`` id,
which a real model mints afresh every call, and never by the wording a real model
changes every call (a refund's reason, an email's subject):

* the same identity *and* the same content as an effect already made (the same
  refund whatever its reason; the identical body to the same customer; any
  cancellation of the same order) is answered from that entry: nothing is asked,
  nothing is performed, the model reads "already done in run …";
* anything else — another amount on the order, a reworded email to the same
  customer — is a new effect: a person is asked, and the approval records what
  the lineage and every earlier run on the ticket already did to that order or
  customer (``prior_effects``), so the card can show it.

The same-call-id rule is kept first (a fork under the scripted provider re-derives
the original's ids), so a call the lineage already answered keeps its answer.
Refund ceilings that count across the ticket's runs live in
``deskhand.domain.desk.services.refund_issue``, inside the refund's own transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from django.db.models import Q

from agent.models import Run
from agent.models.ledger import LedgerEntry, LedgerState
from agent.steps import Done
from agent.tools import args_hash, get_tool
from agent.tools.registry import effect_hash, identity_hash
from deskhand.domain.desk.money import format_cents


def call_identity(name: str, args: Any) -> str:
    return identity_hash(get_tool(name), args)


def same_effect(entry: LedgerEntry, name: str, args: Any) -> bool:
    """Whether ``entry`` made the effect ``name(args)`` asks for: one identity, one content."""
    if entry.tool != name:
        return False
    tool = get_tool(name)
    return effect_hash(tool, entry.arguments) == effect_hash(tool, args)


def matching_effect(entries: Iterable[LedgerEntry], call: dict[str, Any]) -> LedgerEntry | None:
    """The lineage's entry that answers ``call``, or ``None`` (it is a new effect).

    The same tool call id with the same arguments first (the call's own record,
    or a fork re-deriving it under a deterministic id); then the first effect
    made with the same identity and the same content (``ToolDef.content``),
    whatever the wording of the rest.
    """
    name, args = call.get("name", ""), call.get("input")
    digest = args_hash(name, args)
    ident = call_identity(name, args)
    ordered = sorted(entries, key=lambda e: e.pk)
    for e in ordered:
        if e.tool_call_id == call.get("id") and e.args_hash == digest:
            return e
    for e in ordered:
        # A pending claim (sent to another system, not yet confirmed) may have been made:
        # it answers the same effect too, so nothing is ever sent twice under two keys.
        if (e.ok or e.is_pending) and e.identity == ident and same_effect(e, name, args):
            return e
    return None


def answer_text(entry: LedgerEntry) -> str:
    """What the model reads for a call the lineage already made: the recorded result, labelled."""
    if entry.is_pending:
        return (
            f"Already claimed in run {entry.run_id} and sent to {entry.adapter}; its outcome is not "
            "yet confirmed. Not performed again: reconciliation confirms whether it was made."
        )
    verb = "done" if entry.ok else "tried"
    note = f"Already {verb} in run {entry.run_id}: answered from the ledger, not performed again."
    try:
        recorded = json.loads(entry.result)
    except ValueError:
        recorded = None
    if isinstance(recorded, dict):
        return json.dumps({**recorded, "note": note}, sort_keys=True)
    return f"{note} The recorded result: {entry.result}"


def lineage_entries(run: Run, root: Run | None = None) -> list[LedgerEntry]:
    """Every entry of the run's lineage, oldest claim first (asked before every gated call)."""
    lineage_root = root or run.root()
    return list(LedgerEntry.objects.filter(root_run_id=lineage_root.pk).order_by("id"))


def lookup(run: Run, call: dict[str, Any], root: Run | None = None) -> LedgerEntry | None:
    return matching_effect(lineage_entries(run, root), call)


def performed(run: Run, call: dict[str, Any]) -> Done | None:
    """Before a person is asked: the answer the model reads when the lineage already made
    this effect, naming the run that made it; ``None`` when it has not (the gate's opening
    step, ``agent.consent.gate.gate_request``)."""
    entry = lookup(run, call)
    return None if entry is None else Done(text=answer_text(entry), ok=entry.ok, replayed=True)


CUSTOMER_MAIL = ("send_customer_email", "reply_to_customer", "ask_customer")
"""The tools whose effect is words to the ticket's customer."""


def currency_of(entry: LedgerEntry) -> str:
    """The currency of a claim's money: its approval's order's (USD when it recorded none)."""
    return entry.approval.currency if entry.approval_id is not None and entry.approval else "USD"


def describe(tool: str, arguments: Any, currency: str = "USD") -> str:
    """One effect in a sentence, from its recorded arguments (never from a result)."""
    a = arguments if isinstance(arguments, dict) else {}
    if tool == "issue_refund":
        money = format_cents(a.get("amount_cents") or 0, currency)
        return f"Refunded {money} against {a.get('order_reference')}."
    if tool == "send_customer_email":
        return f"Emailed the customer on {a.get('reference')}: '{a.get('subject')}'."
    if tool == "reply_to_customer":
        return f"Replied to the customer on {a.get('reference')}."
    if tool == "ask_customer":
        return f"Asked the customer a question on {a.get('reference')}."
    if tool == "cancel_order":
        return f"Cancelled order {a.get('order_reference')}."
    return f"{tool}."


def describe_in_flight(entry: LedgerEntry) -> str:
    """A claim sent to another system that has not confirmed it, in a sentence: in flight,
    neither done nor not done (a refund "in flight" may or may not have moved money)."""
    a = entry.arguments if isinstance(entry.arguments, dict) else {}
    if entry.tool == "issue_refund":
        money = format_cents(a.get("amount_cents") or 0, currency_of(entry))
        what = f"Refund of {money} against {a.get('order_reference')}"
    elif entry.tool == "send_customer_email":
        what = f"Email to the customer on {a.get('reference')}: '{a.get('subject')}'"
    elif entry.tool in ("reply_to_customer", "ask_customer"):
        what = f"Message to the customer on {a.get('reference')}"
    else:
        what = describe(entry.tool, a, currency_of(entry)).rstrip(".")
    return f"{what} in flight (sent to {entry.adapter}, not yet confirmed)."


def prior_effects(run: Run, name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    """What the lineage, and every earlier run on the ticket, already did to this order or customer.

    For a call on an order (a refund, a cancellation): every refund and cancellation of
    that order. For an email: every email already sent to the ticket's customer on it.
    Oldest first, each with the run that did it and whether it is in this run's lineage.
    """
    root = run.root()
    # A claim sent to another system and not yet confirmed may have been made: shown too.
    entries = (
        LedgerEntry.objects.filter(
            Q(ok=True) | Q(state=LedgerState.PENDING),
            Q(root_run_id=root.pk)
            | Q(run_id__in=Run.objects.filter(ticket_id=run.ticket_id).values("id")),
        )
        .select_related("approval")
        .order_by("created_at", "id")
    )
    order = args.get("order_reference")
    out = []
    for e in entries:
        same_order = order is not None and (e.arguments or {}).get("order_reference") == order
        same_customer = name in CUSTOMER_MAIL and e.tool in CUSTOMER_MAIL
        if not (same_order or same_customer):
            continue
        what = (
            describe_in_flight(e) if e.is_pending else describe(e.tool, e.arguments, currency_of(e))
        )
        out.append(
            {
                "run_id": str(e.run_id),
                "tool": e.tool,
                "what": what,
                "at": e.created_at.isoformat(),
                "lineage": e.root_run_id == root.pk,
                "arguments": e.arguments,
            }
        )
    return out


def inherited_effects(run: Run) -> list[LedgerEntry]:
    """For a fork: the lineage's effects made by other runs before it was created (not repeated)."""
    if run.forked_from_id is None:
        return []
    return list(
        LedgerEntry.objects.filter(root_run=run.root(), ok=True, created_at__lt=run.created_at)
        .select_related("approval")
        .exclude(run_id=run.pk)
        .order_by("created_at", "pk")
    )
