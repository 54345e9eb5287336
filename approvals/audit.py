"""The one door to the audit trail: every ``AuditEvent`` is written by ``audit_record``.

Why one door. The trail is append-only (``AuditEvent.save`` refuses an update and a
trigger refuses a rewrite), so a wrong row is there for good: the place that decides what
a row holds should be one function, not a pattern copied into every service. Here:

* **who** — ``actor`` is the person, or ``None`` for the system's own acts (an expiry, an
  escalation, a policy's decision, an operator's CLI act on an account). Saving the event
  snapshots their id and name beside the link (``actor_ref``, ``actor_name``), so the row
  still names them after their account is deactivated or deleted;
* **where** — ``merchant_id`` always (the trail is per merchant), ``run_id`` when the act
  is about a run;
* **through what** — ``channel`` (web, CLI, API, policy, system);
* **what** — ``action`` (``run.start``, ``approval.deny``, …: at most 40 characters) and
  ``detail``, facts as JSON.

A run's words (previews, note bodies, undo texts) go in ``detail`` only on an event that
names its run: redaction and erasure (``agent.privacy.redaction``) find the words to remove
by the run. An event with no run names a customer by id and counts rows, never their data.

Writes run in the caller's transaction: the event commits, or rolls back, with the act it
records.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from approvals.models import AuditEvent


def audit_record(
    *,
    merchant_id: int,
    action: str,
    channel: str,
    actor: Any | None = None,
    run_id: uuid.UUID | str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> AuditEvent:
    """Append one event to the merchant's audit trail (see the module for what goes where)."""
    return AuditEvent.objects.create(
        merchant_id=merchant_id,
        actor=actor,
        action=action,
        run_id=run_id,
        channel=channel,
        detail=dict(detail or {}),
    )
