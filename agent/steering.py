"""Staff notes reaching a live run: recorded in the step log when the loop takes them."""

from __future__ import annotations

from typing import Any

from agent.models import StepKind
from agent.steplog import log_step
from approvals.models import StaffNote


def notes_record(run_id: str, seq: int, messages: list[Any]) -> list[dict[str, Any]]:
    """Turn pending steer messages (note ids) into the notes the model will read."""
    ids = [
        int(m["note_id"])
        for m in messages
        if isinstance(m, dict) and isinstance(m.get("note_id"), int)
    ]
    notes = list(
        StaffNote.objects.filter(pk__in=ids, run_id=run_id)
        .select_related("author")
        .order_by("created_at")
    )
    out = [{"author": n.author.email or str(n.author), "body": n.body} for n in notes]
    if out:
        log_step(run_id=run_id, seq=seq, kind=StepKind.NOTE, result={"notes": out})
    return out
