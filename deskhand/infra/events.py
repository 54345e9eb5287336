"""One structured JSON log line per run event: ids and numbers, never customer content.

``emit("run.step", run_id=..., seq=3, kind="tool", tool="lookup_order", latency_ms=12)``
writes one JSON object to the ``deskhand.infra.events`` logger (structlog renders it; the
standard library's handlers ship it). Three promises, each pinned by
``tests/durability/test_events.py``:

* **It never raises into a run.** Every failure — a value that will not render, a
  handler that throws, a full disk — is swallowed here; a log line is never worth a
  step. Inside a transaction the line waits for the commit (``on_commit``), so a rolled
  back step never logs what did not happen.
* **It never carries customer content.** A field's value must be a number, a boolean,
  ``None``, a UUID or a date. Text passes only in the fields that name codes
  (``TEXT_FIELDS``: event, status, reason, kind, tool, decision…, and ``*_id`` fields)
  and only as a short token (letters, digits, ``._:-``, at most 80 characters): a
  status, a tool name, a reason code, an executor id. Anything else — a sentence, an
  email address, a model's reply, text in any other field — is replaced by
  ``"<dropped>"`` before rendering, whoever passed it.
* **Events are named** ``run.started``, ``run.step``, ``approval.requested``,
  ``approval.decided``, ``run.effect``, ``run.facts_changed``, ``run.finished``, and ``worker.*`` /
  ``takeover.*`` for the fleet.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import uuid
from typing import Any

import structlog

LOGGER_NAME = "deskhand.events"
DROPPED = "<dropped>"
_TOKEN = re.compile(r"[A-Za-z0-9._:-]{0,80}")
_KEY = re.compile(r"[a-z][a-z0-9_]{0,40}")
TEXT_FIELDS = frozenset(
    {
        "event",
        "status",
        "reason",
        "kind",
        "tool",
        "adapter",
        "decision",
        "why",
        "by",
        "error",
        "app_version",
        "from_version",
        "to_version",
    }
)

_log = logging.getLogger(LOGGER_NAME)
_renderer = structlog.processors.JSONRenderer(sort_keys=False)


def _safe(value: Any, text: bool = True) -> Any:
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else None
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if text and isinstance(value, str) and _TOKEN.fullmatch(value):
        return value
    return DROPPED


def render(event: str, fields: dict[str, Any]) -> str:
    """The JSON line for ``event`` (fields sanitised); public so tests pin the format."""
    record: dict[str, Any] = {
        "event": _safe(event),
        "at": dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
    }
    for key, value in fields.items():
        if isinstance(key, str) and _KEY.fullmatch(key):
            record[key] = _safe(value, text=key in TEXT_FIELDS or key.endswith("_id"))
    return str(_renderer(None, "info", record))


def _write(event: str, fields: dict[str, Any]) -> None:
    try:
        if _log.isEnabledFor(logging.INFO):
            _log.info(render(event, fields))
    except Exception:  # a log line is never worth a step
        pass


def emit(event: str, **fields: Any) -> None:
    """Log ``event`` once the surrounding transaction (if any) commits; never raises."""
    try:
        from django.db import connection, transaction

        if connection.in_atomic_block:
            transaction.on_commit(lambda: _write(event, fields))
            return
    except Exception:
        pass
    _write(event, fields)
