"""Moving parked runs to a new application version in place (``manage.py move_runs``).

**Changes** what DBOS 3.4 has no API for: a workflow's application version. One raw UPDATE
of ``dbos.workflow_status`` does what DBOS's recovery does (back to ``ENQUEUED``, no owner)
with the new version written in.

**Buys** the behaviour itself (docs/deploys.md): without it, runs parked on an old version
need a worker of that version until they drain.

**Retired by** a public "set application version" in DBOS.
"""

from __future__ import annotations

from typing import Any

from django.db import connection

from deskhand.engine.workarounds.executor_recovery import kick_every_worker
from deskhand.infra.dbos.names import RUN_WORKFLOW

# Back on its queue (its partition kept) with no owner, as DBOS's own recovery does.
_REQUEUED = (
    "UPDATE dbos.workflow_status SET application_version = %s, status = 'ENQUEUED',"
    " owner_xid = NULL, started_at_epoch_ms = NULL,"
    " updated_at = (extract(epoch from now()) * 1000)::bigint,"
    " queue_name = coalesce(queue_name, '_dbos_internal_queue')"
    " WHERE application_version = %s AND status IN ('PENDING', 'ENQUEUED')"
)


def move_workflows_to_version(
    from_version: str, to_version: str, run_ids: list[str] | None = None
) -> list[str]:
    """Re-enqueue the open run workflows of ``from_version`` at ``to_version``; their ids.

    A worker of ``to_version`` dequeues each and replays its history on the new code —
    safe only because every step-sequence change is behind ``DBOS.patch``
    (docs/deploys.md). The caller checks that no live worker still serves ``from_version``.
    """
    sql = _REQUEUED + " AND name = %s"
    args: list[Any] = [to_version, from_version, RUN_WORKFLOW]
    if run_ids is not None:
        sql += " AND workflow_uuid = ANY(%s)"
        args.append(run_ids)
    with connection.cursor() as cur:
        cur.execute(sql + " RETURNING workflow_uuid", args)
        moved = [r[0] for r in cur.fetchall()]
        # Their open children too (a model call on its rate-limited queue): left on the old
        # version, no new worker would run one, and its run would wait on.
        cur.execute(
            _REQUEUED + " AND parent_workflow_id = ANY(%s)", [to_version, from_version, moved]
        )
    kick_every_worker()
    return moved
