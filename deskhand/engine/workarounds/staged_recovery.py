"""A restart with many parked: the worker's own runs recovered in batches, decided runs first.

**Changes** DBOS 3.4's startup recovery, which re-enqueues every ``PENDING`` workflow of
its executor id at once (a decided run replays somewhere in that crowd): before launch
``stage_own_pending`` moves them to ``<id>#staged`` (a raw UPDATE of ``dbos.workflow_status``),
and ``deskhand.engine.recovery.StagedRecovery`` hands them back with
``reenqueue_for_recovery`` a batch at a time, runs with a message waiting first.

**Buys** (``bench --quick``, 300 parked, with / without): restart → the last of five
decided runs resumed 0.95-1.94 / 6.6 s.

**Retired by** an order (unconsumed messages first) and a batch size for startup recovery.
"""

from __future__ import annotations

from django.db import connection

from deskhand.engine.workarounds.executor_recovery import kick_every_worker, pending_of
from deskhand.engine.workarounds.recv_recheck import waiting_recvs

STAGED = "#staged"


def staged_id(executor_id: str) -> str:
    """Where a restarting worker parks its own pending workflows until it re-enqueues them."""
    return executor_id + STAGED


def base_executor(executor_id: str) -> str:
    return executor_id.removesuffix(STAGED)


def stage_own_pending(executor_id: str, app_version: str) -> int:
    """Before launch: move this executor's ``PENDING`` workflows to its staging id.

    Run only under this id's lease (no other process executes as this id).
    """
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE dbos.workflow_status SET executor_id = %s WHERE status = 'PENDING'"
            " AND executor_id = %s AND application_version = %s",
            [staged_id(executor_id), executor_id, app_version],
        )
        return int(cur.rowcount)


def release_staged(executor_id: str, app_version: str, limit: int) -> tuple[list[str], int]:
    """Re-enqueue up to ``limit`` staged workflows, those with a message waiting first;
    (released ids, still staged)."""
    from dbos._dbos import _get_dbos_instance
    from dbos._utils import INTERNAL_QUEUE_NAME

    holding = staged_id(executor_id)
    with connection.cursor() as cur:
        cur.execute(
            "SELECT ws.workflow_uuid FROM dbos.workflow_status ws WHERE ws.status = 'PENDING'"
            " AND ws.executor_id = %s AND ws.application_version = %s"
            " ORDER BY EXISTS (SELECT 1 FROM dbos.notifications n WHERE"
            " n.destination_uuid = ws.workflow_uuid AND NOT n.consumed) DESC, ws.updated_at"
            " LIMIT %s",
            [holding, app_version, limit],
        )
        ids = [r[0] for r in cur.fetchall()]
    sysdb = _get_dbos_instance()._sys_db
    released = [w for w in ids if sysdb.reenqueue_for_recovery(w, [holding], INTERNAL_QUEUE_NAME)]
    left = pending_of(holding, app_version)
    if released:
        kick_every_worker()
    return released, left


def still_enqueued(workflow_ids: list[str]) -> list[str]:
    """Those of ``workflow_ids`` still waiting on a queue (not yet dequeued by anyone)."""
    if not workflow_ids:
        return []
    with connection.cursor() as cur:
        cur.execute(
            "SELECT workflow_uuid FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s)"
            " AND status = 'ENQUEUED'",
            [workflow_ids],
        )
        return [r[0] for r in cur.fetchall()]


def replaying() -> int:
    """Workflows executing in this process that are not parked in a ``recv``."""
    from dbos._dbos import _get_dbos_instance

    dbos = _get_dbos_instance()
    return max(0, len(dbos._active_workflows_set.activeList()) - waiting_recvs())
