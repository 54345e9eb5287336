"""Writing the step log: the audit trail and the live feed are the same rows.

``log_step`` is the one writer, and the boundary where a step's typed payload
(``agent.steps``' ``Row`` types) becomes the row's JSON. Its rules, in order, all under a
lock on the run's row:

* **Same call, same row.** ``seq`` comes from the loop's deterministic count,
  so a step that re-executes after a crash lands on the row it wrote before.
  That row must be the same call — same kind, tool, tool call id and
  ``args_hash`` (``call_hash``) — and then its accounting is *added* (a
  retried model call was paid for twice, and the log must say so) while the
  result becomes the latest attempt's (the one the workflow checkpointed and
  goes on from). Anything else at that ``seq`` raises ``StepConflict``: a row
  is never overwritten by another call. Rows written before ``args_hash`` was
  recorded are matched on kind, tool and call id, then given their hash.
* **Late rows.** A run closed from outside (a person cancelled it while a
  model call or an effect was in flight) took ``max(seq) + 1`` for its closing
  row, under this same lock — which may be the ``seq`` a step in flight was
  about to write. A step finishing on a terminal (or cancelling) run is
  therefore appended past the closing row, at ``max(seq) + 1``, flagged
  ``late`` in its payload: its cost is counted and nothing is overwritten. If
  that same step re-executes, it finds its own late row (by identity) instead
  of appending twice.
* The closing write itself says so (``closing=True``: ``agent.run.services.run_close``),
  and so is written at the ``seq`` it chose. An undo is a person's act on a
  finished run, never late.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from django.db import connection, transaction
from django.db.models import Max

from agent.conversation.untrusted import storable
from agent.models import ACTIVE_STATUSES, Run, Step, payloads
from agent.models.payloads import StepKind
from agent.runtime import current_step_id
from agent.steps import Row
from agent.tools.registry import args_hash
from deskhand.infra import events


class StepConflict(Exception):
    """A step tried to write a row that another call already wrote."""


def call_hash(kind: str, tool: str, arguments: Mapping[str, Any]) -> str:
    """What identifies a step's call beyond kind, tool and call id: a hash of its arguments.

    For a tool or approval step it equals the approval's and the ledger's ``args_hash``. A model
    step's arguments say what it was sent; its prompt hash is left out, because a re-execution
    after a deploy may carry a new prompt and is still the same call.
    """
    args = dict(arguments)
    if kind == StepKind.MODEL:
        args.pop("prompt_sha256", None)
    return args_hash(tool, args)


def _describe(kind: str, tool: str, tool_call_id: str) -> str:
    return " ".join(x for x in (kind, tool, f"call {tool_call_id}" if tool_call_id else "") if x)


def _same_call(step: Step, kind: str, tool: str, tool_call_id: str, digest: str) -> bool:
    if (step.kind, step.tool, step.tool_call_id) != (kind, tool, tool_call_id):
        return False
    return not step.args_hash or step.args_hash == digest


def log_step(
    *,
    run_id: str,
    seq: int,
    kind: str,
    tool: str = "",
    tool_call_id: str = "",
    risk: str = "",
    arguments: dict[str, Any] | None = None,
    result: Row | None = None,
    ok: bool = True,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cache_read_tokens: int = 0,
    cache_write_tokens: int = 0,
    cost_micros: int = 0,
    latency_ms: int = 0,
    replayed: bool = False,
    inverse: dict[str, Any] | None = None,
    closing: bool = False,
    prompt_version: str = "",
    locked_status: str | None = None,
) -> Step:
    """Record one step and fold its accounting into the run's totals, atomically.

    ``result`` is the step's payload (``agent.steps``: the kind's ``Row`` type).
    ``closing``: this row is the one that closes the run. Raises ``StepConflict`` when another
    call already holds ``seq``. ``prompt_version``: a model step's prompt version, recorded
    on the run in this same transaction. ``locked_status``: the caller already holds the run's
    row lock in the enclosing transaction and read this status under it (not read again).
    """
    arguments = storable(arguments or {})
    payload = payloads.of_kind(kind, result)
    digest = call_hash(kind, tool, arguments)
    values: dict[str, Any] = {
        "run_id": run_id,
        "function_id": current_step_id.get(),
        "kind": kind,
        "tool": tool,
        "tool_call_id": tool_call_id,
        "risk": risk,
        "arguments": arguments,
        "args_hash": digest,
        "ok": ok,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_tokens": cache_read_tokens,
        "cache_write_tokens": cache_write_tokens,
        "cost_micros": cost_micros,
        "latency_ms": latency_ms,
        "replayed": replayed,
        "inverse": inverse,
    }
    # Nearly every step finds no row at its seq: one statement writes it (below). Inside the
    # caller's transaction that needs no savepoint of its own (two round trips a step): it
    # raises nothing a caller could go on from. Anything else at that seq takes the path
    # below, under a savepoint as always, so a StepConflict leaves the caller's transaction
    # usable.
    if connection.in_atomic_block:
        step, status = _fresh(values, seq, payload, closing, prompt_version, locked_status)
        if step is not None:
            return step
        with transaction.atomic():
            return _log_again(values, seq, payload, closing, prompt_version, status)
    with transaction.atomic():
        step, status = _fresh(values, seq, payload, closing, prompt_version, locked_status)
        return step or _log_again(values, seq, payload, closing, prompt_version, status)


def _late(status: str, kind: str, closing: bool) -> bool:
    return (
        not closing
        and kind != StepKind.UNDO
        # A run being cancelled counts as closed: its workflow may still act, its work is over.
        and status not in ACTIVE_STATUSES
    )


def _fresh(
    values: dict[str, Any],
    seq: int,
    payload: Row,
    closing: bool,
    prompt_version: str,
    locked_status: str | None,
) -> tuple[Step | None, str]:
    """Under the run's lock: the new row at ``seq``, the run's totals and the NOTIFY in one
    statement, or ``None`` (nothing written) when the run is closed or a row holds ``seq``.
    Also the run's status as read under the lock."""
    status = locked_status if locked_status is not None else _lock_run(values["run_id"])
    if _late(status, values["kind"], closing):
        return None, status
    step = _insert_fresh(
        seq=seq,
        result=storable(payload.to_json()),
        prompt_version=prompt_version,
        **values,
    )
    if step is not None:
        _emit(step, payload.late, values)
    return step, status


def _log_again(
    values: dict[str, Any],
    seq: int,
    payload: Row,
    closing: bool,
    prompt_version: str,
    status: str,
) -> Step:
    """A row already holds ``seq`` (the same call re-executed, or another: ``StepConflict``),
    or the run is closed (a late row). The run's lock is held."""
    run_id, kind, tool = values["run_id"], values["kind"], values["tool"]
    tool_call_id, digest = values["tool_call_id"], values["args_hash"]
    late = _late(status, kind, closing)
    step = _step_at(run_id, seq)
    if step is not None and not _same_call(step, kind, tool, tool_call_id, digest):
        if not late:
            raise StepConflict(
                f"run {run_id} step {seq} is already {_describe(step.kind, step.tool, step.tool_call_id)}; "
                f"refusing to overwrite it with {_describe(kind, tool, tool_call_id)}"
                + (" (other arguments)" if step.kind == kind and step.tool == tool else "")
            )
        step = None  # the closing row took this seq: this step's own row is a late one
    if step is None and late:
        step = (
            Step.objects.select_for_update()
            .filter(payloads.late_rows(), run_id=run_id, kind=kind, tool=tool)
            .filter(tool_call_id=tool_call_id, args_hash=digest)
            .order_by("seq")
            .first()
        )
        if step is None:
            last = Step.objects.filter(run_id=run_id).aggregate(m=Max("seq"))["m"] or 0
            seq = last + 1
        else:
            seq = step.seq
        payload = dataclasses.replace(payload, late=True)
    stored = storable(payload.to_json())
    created = step is None
    if step is None:
        step = _insert(seq=seq, result=stored, **values)
    else:
        # The same call again: add what it cost; keep what it finally returned.
        v = values
        step.function_id = v["function_id"]
        step.risk, step.arguments, step.args_hash = v["risk"], v["arguments"], digest
        step.result, step.ok = stored, v["ok"]
        step.input_tokens += v["input_tokens"]
        step.output_tokens += v["output_tokens"]
        step.cache_read_tokens += v["cache_read_tokens"]
        step.cache_write_tokens += v["cache_write_tokens"]
        step.cost_micros += v["cost_micros"]
        step.latency_ms = v["latency_ms"]
        step.replayed = step.replayed or v["replayed"]
        step.inverse = v["inverse"]
        step.attempts += 1
        step.save()
    # The run's totals and the live pages' NOTIFY (delivered on commit) in one round trip.
    with connection.cursor() as cur:
        cur.execute(
            _TOTALS_AND_NOTIFY,
            [*_totals(values, created, prompt_version), f"{run_id}:{step.seq}"],
        )
    _emit(step, payload.late, values)
    return step


def _emit(step: Step, late: bool, values: Mapping[str, Any]) -> None:
    events.emit(
        "run.step",
        run_id=values["run_id"],
        seq=step.seq,
        kind=values["kind"],
        tool=values["tool"] or None,
        ok=values["ok"],
        attempt=step.attempts,
        late=late,
        replayed=values["replayed"],
        latency_ms=values["latency_ms"],
        input_tokens=values["input_tokens"],
        output_tokens=values["output_tokens"],
        cost_micros=values["cost_micros"],
    )


# The run's totals after a step row: its parameters are ``_totals(...)``. Shared by the
# re-executed step's statement below and the fresh row's (``_FRESH``).
_RUN_TOTALS = """UPDATE agent_run SET steps = steps + %s, input_tokens = input_tokens + %s,
  output_tokens = output_tokens + %s, cache_read_tokens = cache_read_tokens + %s,
  cache_write_tokens = cache_write_tokens + %s, cost_micros = cost_micros + %s,
  prompt_version_id = COALESCE(%s, prompt_version_id)
WHERE id = %s"""

_TOTALS_AND_NOTIFY = f"{_RUN_TOTALS};\nSELECT pg_notify('deskhand_steps', %s)"


def _totals(values: Mapping[str, Any], new_row: bool, prompt_version: str) -> list[Any]:
    return [
        1 if new_row else 0,
        values["input_tokens"],
        values["output_tokens"],
        values["cache_read_tokens"],
        values["cache_write_tokens"],
        values["cost_micros"],
        prompt_version or None,
        values["run_id"],
    ]


def _step_at(run_id: str, seq: int) -> Step | None:
    """The row at ``seq``, locked; None when there is none (every straight-through step)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT id FROM agent_step WHERE run_id = %s AND seq = %s FOR UPDATE", [run_id, seq]
        )
        row = cur.fetchone()
    return None if row is None else Step.objects.get(pk=row[0])


_INSERT: tuple[str, str, list[Any]] | None = None


def _statements() -> tuple[str, str, list[Any]]:
    """The step row's INSERT, alone and as the fresh-row statement, built once."""
    global _INSERT
    if _INSERT is None:
        fields = [f for f in Step._meta.concrete_fields if not f.primary_key]
        columns = ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)
        marks = ", ".join(["%s"] * len(fields))
        insert = f"INSERT INTO {Step._meta.db_table} ({columns}) VALUES ({marks})"
        fresh = _FRESH.format(insert=insert, totals=_RUN_TOTALS)
        _INSERT = (f"{insert} RETURNING id", fresh, fields)
    return _INSERT


# The row at a seq nobody holds, the run's totals and the NOTIFY, in one statement. A row
# already at that seq makes the INSERT do nothing, and then nothing else happens either.
_FRESH = """
WITH ins AS ({insert} ON CONFLICT (run_id, seq) DO NOTHING RETURNING id),
totals AS ({totals} AND EXISTS (SELECT 1 FROM ins))
SELECT id, pg_notify('deskhand_steps', %s) FROM ins
"""


def _row_params(step: Step, fields: list[Any]) -> list[Any]:
    # Every field's own conversion (JSON, defaults, ``auto_now_add``), no query compiler.
    return [f.get_db_prep_save(f.pre_save(step, True), connection) for f in fields]


def _saved(step: Step, pk: int) -> Step:
    step.pk = pk
    step._state.adding, step._state.db = False, connection.alias
    return step


def _insert(**values: Any) -> Step:
    """``Step.objects.create``, with the statement built once."""
    sql, _, fields = _statements()
    step = Step(**values)
    with connection.cursor() as cur:
        cur.execute(sql, _row_params(step, fields))
        row = cur.fetchone()
    assert row is not None
    return _saved(step, row[0])


def _insert_fresh(*, prompt_version: str, **values: Any) -> Step | None:
    """The new row at ``seq`` with the run's totals and the live pages' NOTIFY (delivered on
    commit), in one round trip; ``None`` (and nothing written) when a row holds ``seq``."""
    _, sql, fields = _statements()
    step = Step(**values)
    with connection.cursor() as cur:
        cur.execute(
            sql,
            [
                *_row_params(step, fields),
                *_totals(values, True, prompt_version),
                f"{values['run_id']}:{values['seq']}",
            ],
        )
        row = cur.fetchone()
    return None if row is None else _saved(step, row[0])


def _lock_run(run_id: str) -> str:
    """Take the run's row lock, as a cancel takes it; its status."""
    with connection.cursor() as cur:
        cur.execute("SELECT status FROM agent_run WHERE id = %s FOR UPDATE", [run_id])
        row = cur.fetchone()
    if row is None:
        raise Run.DoesNotExist(f"no run {run_id}")
    return str(row[0])
