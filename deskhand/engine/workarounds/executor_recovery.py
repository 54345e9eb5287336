"""Recovering an executor's ``PENDING`` workflows on demand: a dead one's, or our own stranded.

**Uses** ``DBOS._recover_pending_workflows(executor_ids)``, the only way without Conductor
to recover another executor's workflows; it **swallows** a failure per workflow
(dbos-transact-py #716), so ``recover_executor`` counts what is left and retries. And
``_active_workflows_set`` + ``reenqueue_for_recovery`` for a workflow whose coroutine died
while Postgres was away (found by ``manage.py chaos``): ``PENDING`` under a live executor.

**Buys** the behaviour itself, not CPU: without it a dead worker's runs wait for its id to
start again (no ``takeover_s``), and a stranded run for its worker's restart.

**Retired by** a public recovery call for an executor id that reports failures.
"""

from __future__ import annotations

import logging
import time

from dbos import DBOS
from django.db import connection

from deskhand.infra.dbos.names import QUEUE_CHANNEL

log = logging.getLogger(__name__)


def kick_every_worker() -> None:
    """Every worker's queue threads poll now (the NOTIFY is delivered at commit)."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_notify(%s, '')", [QUEUE_CHANNEL])


def pending_of(executor_id: str, app_version: str) -> int:
    """``PENDING`` workflows DBOS holds under ``executor_id`` at ``app_version``."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM dbos.workflow_status WHERE status = 'PENDING'"
            " AND executor_id = %s AND application_version = %s",
            [executor_id, app_version],
        )
        return int(cur.fetchone()[0])


def pending_executors(app_version: str, exclude: str) -> dict[str, int]:
    """Executor ids with ``PENDING`` workflows at ``app_version`` (other than ``exclude``)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT executor_id, count(*) FROM dbos.workflow_status WHERE status = 'PENDING'"
            " AND application_version = %s AND executor_id IS NOT NULL AND executor_id <> %s"
            " GROUP BY executor_id",
            [app_version, exclude],
        )
        return {r[0]: int(r[1]) for r in cur.fetchall()}


def recover_executor(
    executor_id: str, app_version: str, *, attempts: int = 5, pause: float = 0.5
) -> tuple[int, int]:
    """Re-enqueue ``executor_id``'s pending workflows here; (re-enqueued, still pending).

    DBOS swallows a failure per workflow, so what is still ``PENDING`` under the id
    after a pass is tried again, up to ``attempts`` passes.
    """
    before = pending_of(executor_id, app_version)
    left = before
    for i in range(attempts):
        try:
            DBOS._recover_pending_workflows([executor_id])
        except Exception:
            log.exception("recovering executor %s failed (pass %s)", executor_id, i + 1)
        left = pending_of(executor_id, app_version)
        kick_every_worker()
        if left == 0:
            break
        time.sleep(pause)
    return before - left, left


def recover_own_stranded(executor_id: str, app_version: str, min_age_s: float = 10.0) -> list[str]:
    """Re-enqueue this executor's ``PENDING`` workflows that no longer execute in this process
    (stranded). Only rows untouched for ``min_age_s`` count: one just claimed is left alone."""
    from dbos._dbos import _get_dbos_instance
    from dbos._utils import INTERNAL_QUEUE_NAME

    dbos = _get_dbos_instance()
    active = set(dbos._active_workflows_set.activeList())
    with connection.cursor() as cur:
        cur.execute(
            "SELECT workflow_uuid FROM dbos.workflow_status WHERE status = 'PENDING'"
            " AND executor_id = %s AND application_version = %s"
            " AND updated_at < (extract(epoch from now()) * 1000)::bigint - %s",
            [executor_id, app_version, int(min_age_s * 1000)],
        )
        candidates = [r[0] for r in cur.fetchall() if r[0] not in active]
    moved = []
    for workflow_id in candidates:
        if workflow_id in set(dbos._active_workflows_set.activeList()):
            continue  # it started meanwhile
        if dbos._sys_db.reenqueue_for_recovery(workflow_id, [executor_id], INTERNAL_QUEUE_NAME):
            moved.append(workflow_id)
    if moved:
        kick_every_worker()
    return moved
