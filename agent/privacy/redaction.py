"""Redacting a finished run: its words go, its money facts stay.

Used by a customer's erasure (``agent.privacy.erasure``, marker ``[erased]``) and by the
merchant's retention period (``agent.privacy.retention``, marker ``[redacted]``). A run's
words are copied into many places; this module is the one list of them:

* **step rows** — each payload kind loses its text (``redacted_payload``): model
  replies (text blocks; tool calls keep their name, id and the numbers and
  references of their input), tool results, approval previews and reasons,
  staff notes, the closing summary, undo texts; the model's call arguments keep
  only their facts (``redact_json``); an undo's inverse is dropped (it holds
  ticket data, and a redacted step is no longer undone);
* **approvals** — arguments and prior effects keep their keys, amounts and
  references, their text becomes the marker; the preview is re-rendered from
  them by the tool's own preview; a decider's reason becomes the marker. The
  consent guard (approvals migration 0006) allows exactly this, and only inside
  ``redacting()``;
* **staff notes** of the run, and the **audit events** about it (their
  ``detail`` — previews, note bodies, undo texts — redacted by the same rule);
* the run's **summary**, rebuilt from the ledger and approvals (so its effects
  line still reads "Refunded $38.00 against NW-1042");
* **DBOS's history** of the run (checkpointed outputs, its status row, messages):
  deleted by the caller before this runs (``dbos_client.delete_finished_workflows``),
  because a finished workflow's checkpoints serve only recovery, which it no longer
  needs, and forking, which a redacted run refuses (``replay_refusal``).

Kept: statuses, stop reasons, times, tokens and cost, tool names and call ids,
argument hashes, ledger keys, approvers and every number. Erasure also scrubs the
run's ledger entries' words (``redact_ledger``); retention keeps the ledger whole.
Each redaction leaves a ``Redaction`` row saying why, when and how much — counts,
never words — which the run page shows, and which replay and fork read to refuse.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
from collections.abc import Iterator
from typing import Any

from django.db import connection, transaction

from agent.models import Run, Step, payloads
from agent.models.ledger import LedgerEntry
from agent.models.privacy import Redaction, RedactionReason
from agent.run.selectors import effects_summary
from agent.steps import Note
from agent.tools import REGISTRY
from approvals.models import Approval, AuditEvent, StaffNote

ERASED = "[erased]"
REDACTED = "[redacted]"
MARKERS = (ERASED, REDACTED)  # the only words the consent guard lets a redaction write

# Keys whose string values are facts, not words: references, ids, hashes, names of tools,
# enumerated states. Everything else that is a string becomes the marker.
FACT_KEYS = frozenset(
    {
        "approval",
        "approval_id",
        "args_hash",
        "at",
        "channel",
        "forked_from",
        "id",
        "ledger_key",
        "messages_sha256",
        "model",
        "op",
        "order_reference",
        "priority",
        "prompt_sha256",
        "provider",
        "reference",
        "run_id",
        "status",
        "ticket",
        "tool",
        "tool_use_id",
        "type",
        "was",
        "why",
        "withdrawn",
    }
)


class RedactionRefused(Exception):
    """A run that cannot be redacted now (it is still open); the message says why."""


@contextlib.contextmanager
def redacting() -> Iterator[None]:
    """A transaction marked as a redaction, the one kind of write the consent guard lets
    rewrite an approval's or an audit event's words (approvals migration 0006).

    ``SET LOCAL`` lasts until the outermost transaction ends: nested in a caller's
    transaction (an erasure), the whole of it is marked, and nothing after it is.
    """
    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("SET LOCAL deskhand.redaction = 'on'")
        yield


def redact_json(value: Any, marker: str, keep: frozenset[str] = FACT_KEYS) -> Any:
    """``value`` with every string replaced by ``marker``, except under a fact key.

    Keys, list lengths, numbers, booleans and nulls stay: the shape the consent guard checks.
    """
    if isinstance(value, str):
        return value if value in MARKERS else marker
    if isinstance(value, list):
        return [redact_json(v, marker, keep) for v in value]
    if isinstance(value, dict):
        return {
            k: v if k in keep and _fact(v) else redact_json(v, marker, keep)
            for k, v in value.items()
        }
    return value


def _fact(value: Any) -> bool:
    """A reference, an id or a state, or a list of them (a cancel's withdrawn approvals)."""
    return isinstance(value, str) or (
        isinstance(value, list) and all(isinstance(v, str) for v in value)
    )


def _text(value: str, marker: str) -> str:
    return marker if value else value


def _block(block: Any, marker: str) -> Any:
    if not isinstance(block, dict):
        return marker
    kind = block.get("type")
    if kind == "tool_use":
        return {
            "type": "tool_use",
            "id": block.get("id", ""),
            "name": block.get("name", ""),
            "input": redact_json(block.get("input"), marker),
        }
    if kind == "text":
        return {"type": "text", "text": marker}
    return {"type": kind, "redacted": marker}


def preview_of(tool: str, arguments: Any, marker: str, currency: str = "USD") -> str:
    """What an approver read, re-rendered from redacted arguments (amount and order stay)."""
    definition = REGISTRY.get(tool)
    if definition is None or definition.preview is None or not isinstance(arguments, dict):
        return marker
    return definition.preview(arguments, currency)


def redacted_payload(
    p: payloads.StepPayload, *, marker: str, tool: str, arguments: Any, summary: str
) -> payloads.StepPayload:
    """A step payload without its words.

    ``tool`` and ``arguments`` (already redacted): the row's, to re-render an approval's
    preview; ``summary``: the run's rebuilt summary, for the closing row.
    """
    if isinstance(p, payloads.ModelPayload):
        return dataclasses.replace(p, content=[_block(b, marker) for b in p.content])
    if isinstance(p, payloads.ToolPayload):
        return dataclasses.replace(p, text=_text(p.text, marker))
    if isinstance(p, payloads.ApprovalPayload):
        return dataclasses.replace(
            p,
            preview=preview_of(tool, arguments, marker, str(p.facts.get("currency") or "USD"))
            if p.preview
            else "",
            reason=_text(p.reason, marker),
            prior_effects=tuple(marker for _ in p.prior_effects),
        )
    if isinstance(p, payloads.NotePayload):
        return dataclasses.replace(p, notes=tuple(Note(n.author, marker) for n in p.notes))
    if isinstance(p, payloads.EndPayload):
        return dataclasses.replace(p, summary=summary if p.summary else "")
    return dataclasses.replace(p, text=_text(p.text, marker))


def redacted_summary(run: Run, marker: str) -> str:
    """The summary rebuilt from what is kept: how the run ended and what it did (the ledger)."""
    ended = f"Ended {run.status}" + (f" ({run.stop_reason})" if run.stop_reason else "") + "."
    return f"{ended}\n\nEffects:\n{effects_summary(str(run.pk))}\n\nAgent's account: {marker}"


def _steps(run: Run, marker: str, summary: str) -> int:
    n = 0
    for step in Step.objects.select_for_update().filter(run=run).order_by("seq"):
        args = redact_json(step.arguments, marker)
        payload = redacted_payload(
            payloads.read(step), marker=marker, tool=step.tool, arguments=args, summary=summary
        )
        step.result = payload.to_json()
        step.arguments, step.inverse = args, None
        step.save(update_fields=["result", "arguments", "inverse"])
        n += 1
    return n


def _approvals(run: Run, marker: str) -> int:
    n = 0
    for a in Approval.objects.select_for_update().filter(run=run):
        a.arguments = redact_json(a.arguments, marker)
        a.approved_arguments = redact_json(a.approved_arguments, marker)
        a.prior_effects = redact_json(a.prior_effects, marker)
        a.preview = preview_of(a.tool, a.arguments, marker, a.currency)
        a.reason = _text(a.reason, marker)
        a.save(
            update_fields=["arguments", "approved_arguments", "prior_effects", "preview", "reason"]
        )
        n += 1
    return n


def _audit(run: Run, marker: str) -> int:
    n = 0
    for event in AuditEvent.objects.filter(run=run):
        detail = redact_json(event.detail, marker)
        if detail != event.detail:
            # Not .save(): an audit event is append-only; this is the one update the
            # guard allows, and only inside redacting().
            AuditEvent.objects.filter(pk=event.pk).update(detail=detail)
            n += 1
    return n


def redact_ledger(run: Run, marker: str) -> int:
    """Erasure only: the run's ledger entries keep their amounts, orders, keys and hashes;
    their words (a refund's reason, an email's subject and body, the result text) go."""
    n = 0
    for entry in LedgerEntry.objects.select_for_update().filter(run=run):
        entry.arguments = redact_json(entry.arguments, marker)
        entry.result = _text(entry.result, marker)
        entry.save(update_fields=["arguments", "result"])
        n += 1
    return n


def run_redact(
    run: Run,
    *,
    reason: str,
    now: dt.datetime,
    ledger: bool = False,
    dbos_deleted: bool = False,
    extra: dict[str, Any] | None = None,
) -> Redaction:
    """Remove a finished run's words everywhere this project keeps them (see the module).

    The caller has deleted its DBOS history (``dbos_deleted`` records it). ``ledger``:
    scrub the ledger entries' words too (erasure). Raises ``RedactionRefused`` for a run
    that is still open: its workflow may still write, and people may still act on it.
    """
    marker = ERASED if reason == RedactionReason.ERASURE else REDACTED
    with redacting():
        locked = Run.objects.select_for_update().get(pk=run.pk)
        if locked.is_open:
            raise RedactionRefused(
                f"run {locked.pk} is {locked.status}; cancel it or let it finish first."
            )
        what: dict[str, Any] = {
            "ledger_entries": redact_ledger(locked, marker) if ledger else 0,
            "approvals": _approvals(locked, marker),
            "staff_notes": StaffNote.objects.filter(run=locked).update(body=marker),
            "audit_events": _audit(locked, marker),
        }
        summary = redacted_summary(locked, marker) if locked.summary else ""
        what["steps"] = _steps(locked, marker, summary)
        locked.summary = summary
        locked.save(update_fields=["summary", "updated_at"])
        what["dbos_history"] = "deleted" if dbos_deleted else "none"
        what.update(extra or {})
        return Redaction.objects.create(run=locked, reason=reason, what=what, created_at=now)


def replay_refusal(run: Run) -> str | None:
    """Why ``run`` can no longer be replayed or forked, or None.

    A redacted run's transcript is gone; so is the inherited prefix of a fork of one.
    """
    current: Run | None = run
    while current is not None:
        redaction = Redaction.objects.filter(run=current).order_by("created_at").first()
        if redaction is not None:
            how = (
                "erased at the customer's request"
                if redaction.reason == RedactionReason.ERASURE
                else "redacted by the merchant's retention period"
            )
            whose = (
                f"run {run.pk}'s"
                if current.pk == run.pk
                else f"run {run.pk} inherits its first steps from run {current.pk}, whose"
            )
            return (
                f"{whose} words were {how} on {redaction.created_at:%Y-%m-%d}, so it cannot be "
                "replayed or forked; its money facts are on its run page."
            )
        current = (
            Run.objects.filter(pk=current.forked_from_id).first()
            if current.forked_from_id
            else None
        )
    return None
