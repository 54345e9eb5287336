"""Exactly once across two systems: claim, call under the key, record.

For an effect in another system the ledger cannot share the effect's transaction, so
``execute_irreversible`` runs it in three moves, each its own transaction:

1. **Claim** (under the run's row lock, as every effect): the ledger entry is written
   ``pending`` with its key, and the adapter's ``prepare`` makes the local checks and
   reservations (a pending refund counts against every ceiling). Committed before
   anything leaves. A cancel that takes the run lock after this commit finds the claim
   in the ledger and reports it as in flight.
2. **Call** (``settle``, holding the entry's row lock): the other system is called with
   the ledger key as its idempotency key; safe retries inside the step's budget reuse
   that key.
3. **Record** (same transaction as 2): done, failed or still unknown, the local rows and
   the step row.

A step re-executed after a crash (or a retry, or recovery on another worker) finds its
own pending claim and goes to 2 again: the provider sees the same key and returns the
refund it already made. A claim that may no longer be re-sent — the provider's key
window has passed, or the run was cancelled or ended meanwhile — is never sent again: it
is **looked up** (``find``). A claim nobody is working on (its run ended with it still
pending) is settled the same way by reconciliation (``resolve_stale``), which records
what the provider says and never sends.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from agent.effects import config
from agent.effects.base import Adapter, Outcome
from agent.effects.mail import SmtpAdapter
from agent.effects.payments import PaymentsAdapter
from agent.effects.shopify import ShopifyAdapter
from agent.ledger.answers import log_effect_answer
from agent.ledger.lineage import currency_of, describe
from agent.models import TERMINAL_STATUSES, Run
from agent.models.ledger import LedgerEntry, LedgerState
from agent.record import faults
from agent.record.steplog import storable
from agent.steps import Done, ToolPayload
from agent.tools import get_tool
from agent.tools.masking import mask_result
from agent.tools.registry import ToolContext, ToolDef, ToolError
from deskhand.domain.apikeys.relay import relays_replies
from deskhand.infra import events
from deskhand.infra.crashpoints import Point

DATABASE = "database"
ADAPTERS: dict[str, Adapter] = {
    PaymentsAdapter.name: PaymentsAdapter(),
    ShopifyAdapter.name: ShopifyAdapter(),
    SmtpAdapter.name: SmtpAdapter(),
}


def adapter_name(
    merchant: Any, tool: ToolDef, ticket_id: int | None = None, *, order_source: str = ""
) -> str:
    """Where ``tool``'s effect happens for ``merchant``: ``database``, ``payments``,
    ``shopify`` or ``smtp``.

    A refund on a run whose orders are at Shopify (``order_source``, the run's own) is made
    through Shopify, whatever ``refund_adapter`` says: the order's sale is there.

    Mail on a ticket whose help desk takes replies stays in the database: the line it
    writes on the thread is relayed to the desk as a signed webhook
    (``deskhand.domain.apikeys.relay``), and the customer gets it there, not also as an email.
    """
    if tool.external == "payments" and order_source == ShopifyAdapter.name:
        return ShopifyAdapter.name
    if tool.external == "payments" and merchant.refund_adapter == "payments":
        return PaymentsAdapter.name
    if tool.external == "mail" and merchant.mail_adapter == "smtp":
        if ticket_id is not None and relays_replies(ticket_id):
            return DATABASE
        return SmtpAdapter.name
    return DATABASE


def lookup_grace() -> dt.timedelta:
    """How old a claim must be before "the provider lists no such refund" means it was not made.

    A request from a worker that died may still be finishing at the provider; long past
    any request's timeout, a refund the provider does not list was never made.
    """
    return dt.timedelta(seconds=config._int("DESKHAND_EFFECT_LOOKUP_GRACE_SECONDS", 600))


def claim(entry: LedgerEntry, tool: ToolDef, ctx: ToolContext, args: dict[str, Any]) -> str | None:
    """In the claim's transaction: the adapter's checks and reservations for a new pending entry.

    Returns ``None`` when the claim stands (commit, then ``settle``), or the refusal the
    model reads, with the entry recorded ``failed`` (nothing was sent).
    """
    adapter = ADAPTERS[entry.adapter]
    try:
        with transaction.atomic():  # a savepoint: a refused claim reserves nothing
            faults.before_tool(tool.name, ctx.run_id)
            adapter.prepare(ctx, args, entry)
    except ToolError as exc:
        entry.state, entry.ok = LedgerState.FAILED, False
        entry.result = storable(config.redact(str(exc)))
        entry.recorded_at = timezone.now()
        entry.save(update_fields=["state", "ok", "result", "recorded_at"])
        return entry.result
    entry.save(update_fields=["provider_ref"])
    return None


def _find(adapter: Adapter, entry: LedgerEntry) -> Outcome:
    """Look the claim up without sending; "not listed" settles it only once it is old enough."""
    outcome = adapter.find(entry)
    if (
        outcome.state == "unknown"
        and outcome.code == "not_found"
        and timezone.now() - entry.created_at >= lookup_grace()
    ):
        return Outcome(
            "failed",
            code="not_made",
            reason="the provider has no refund under this claim's key, long after it was sent",
            calls=outcome.calls,
        )
    return outcome


def _record(
    entry: LedgerEntry, adapter: Adapter, outcome: Outcome, run_id: str
) -> tuple[str, bool]:
    text, ok = adapter.record(entry, outcome)
    # What the model reads, masked as every tool result is (``agent.tools.masking``).
    text = mask_result(text, get_tool(entry.tool).unmasked)
    text = storable(config.redact(faults.after_tool(entry.tool, run_id, text)))
    entry.provider_calls += outcome.calls
    if outcome.provider_ref:
        entry.provider_ref = outcome.provider_ref
    if outcome.state == "unknown":
        entry.save(update_fields=["provider_calls", "provider_ref"])
        return text, False
    entry.state = LedgerState.DONE if outcome.state == "done" else LedgerState.FAILED
    entry.ok, entry.result, entry.recorded_at = ok, text, timezone.now()
    entry.save(
        update_fields=["state", "ok", "result", "recorded_at", "provider_calls", "provider_ref"]
    )
    _amend_closed_run(entry, outcome)
    return text, ok


def _amend_closed_run(entry: LedgerEntry, outcome: Outcome) -> None:
    """A claim settled after its run ended: the run's summary gains the truth, labelled."""
    run = Run.objects.select_for_update().get(pk=entry.run_id)
    if run.status not in TERMINAL_STATUSES or not run.summary:
        return
    if outcome.state == "done":
        line = (
            f"{describe(entry.tool, entry.arguments, currency_of(entry)).rstrip('.')} (confirmed by {entry.adapter} "
            "after the run ended)."
        )
    else:
        what = entry.approval.preview.splitlines()[0] if entry.approval else entry.tool
        line = (
            f"Not done: {what.rstrip('.')} — {entry.adapter} settled it after the run ended: "
            f"{outcome.reason} [{outcome.code}]. No money moved for it."
            if entry.tool == "issue_refund"
            else f"Not done: {what.rstrip('.')} — {outcome.reason} [{outcome.code}]."
        )
    run.summary = f"{run.summary}\n\nSettled later: {line}"
    run.save(update_fields=["summary", "updated_at"])


def _payload(entry: LedgerEntry, text: str, approval_id: str) -> ToolPayload:
    return ToolPayload(
        text=text,
        ledger_key=entry.key,
        approval_id=approval_id,
        adapter=entry.adapter,
        effect_state=entry.state,
        provider_ref=entry.provider_ref,
        provider_calls=entry.provider_calls,
    )


def settle(
    entry_id: int,
    *,
    run_id: str,
    seq: int,
    call: dict[str, Any],
    approval_id: str,
    may_send: bool,
    note: Callable[[str], str] = str,
) -> Done:
    """Call the other system under the claim's key (or look it up) and record the answer.

    Holds the entry's row lock throughout, so reconciliation never settles a claim a step
    is working on. ``may_send``: the run was active when the claim was (re-)read; a claim
    past the provider's key window is looked up even then. ``note`` turns the recorded
    result into what the model reads (a person's changes to the call, ``agent.tools.narrowing``);
    the ledger keeps the adapter's own words.
    """
    name, call_id, args = call["name"], call["id"], call["input"]
    started = time.monotonic()
    with transaction.atomic():
        entry = LedgerEntry.objects.select_for_update().get(pk=entry_id)
        if not entry.is_pending:
            # Settled meanwhile (by reconciliation): report what was recorded, do nothing.
            return log_effect_answer(
                run_id=run_id,
                seq=seq,
                tool=name,
                call_id=call_id,
                arguments=args,
                result=_payload(entry, note(entry.result), approval_id),
                ok=entry.ok,
                replayed=True,
            )
        adapter = ADAPTERS[entry.adapter]
        sending = may_send and adapter.may_resend(entry)
        outcome = adapter.perform(entry) if sending else _find(adapter, entry)
        faults.at(Point.AFTER_PROVIDER, name)  # the other system acted; nothing here says so yet
        text, ok = _record(entry, adapter, outcome, run_id)
        text = note(text)
        if outcome.state != "unknown":
            events.emit(
                "run.effect",
                run_id=run_id,
                tool=name,
                approval_id=approval_id,
                ok=ok,
                seq=seq,
                adapter=entry.adapter,
            )
        faults.at(Point.AFTER_EFFECT, name)
        log_effect_answer(
            run_id=run_id,
            seq=seq,
            tool=name,
            call_id=call_id,
            arguments=args,
            result=_payload(entry, text, approval_id),
            ok=ok,
            latency_ms=int((time.monotonic() - started) * 1000),
        )
    faults.at(Point.AFTER_COMMIT, name)
    return Done(text=text, ok=ok)


def resolve_stale(entry_id: int) -> str | None:
    """Settle a pending claim nobody is working on, from what the other system says; never send.

    Only for claims whose run is no longer active (a run that is still active will settle
    its own claim when its step runs again). Skips a claim a step holds. Returns the state
    recorded (``done``/``failed``), or ``None`` if it is still unknown or was skipped.
    """
    run_id = (
        LedgerEntry.objects.filter(pk=entry_id, state=LedgerState.PENDING)
        .values_list("run_id", flat=True)
        .first()
    )
    if run_id is None:
        return None
    with transaction.atomic():
        # The run's lock first, as a claim takes them; the entry's is never waited for (a step
        # settling it holds it), so this cannot deadlock with a step.
        if Run.objects.select_for_update().get(pk=run_id).is_active:
            return None
        entry = (
            LedgerEntry.objects.select_for_update(skip_locked=True)
            .filter(pk=entry_id, state=LedgerState.PENDING)
            .first()
        )
        if entry is None:
            return None
        adapter = ADAPTERS[entry.adapter]
        outcome = _find(adapter, entry)
        if outcome.state == "unknown":
            entry.provider_calls += outcome.calls
            entry.save(update_fields=["provider_calls"])
            return None
        text, ok = _record(entry, adapter, outcome, str(entry.run_id))
        # The run is closed: this lands as a late row after its closing one.
        log_effect_answer(
            run_id=str(entry.run_id),
            seq=1,
            tool=entry.tool,
            call_id=entry.tool_call_id,
            arguments=entry.arguments,
            result=_payload(entry, text, str(entry.approval_id or "")),
            ok=ok,
        )
        return entry.state
