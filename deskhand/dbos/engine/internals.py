"""Every use of DBOS's private internals, in one module, each pinned by a test.

``dbos`` is pinned to one version in pyproject.toml, and
``tests/durability/test_dbos_pins.py`` fails loudly — naming the function — if an
upgrade changes any internal used here (its signature or its source), so an upgrade
re-reads this file before it ships. What we use and why:

* ``DBOS._recover_pending_workflows(executor_ids)`` — the only way, without DBOS
  Conductor, to recover another executor's workflows (the 2.x admin endpoint that
  wrapped it is gone in 3.4). It re-enqueues each ``PENDING`` workflow of those
  executors *at this process's application version* and **logs and swallows** a
  failure per workflow (dbos-transact-py #716), so ``recover_executor`` counts what
  is still pending afterwards and retries; the caller retries again on its next scan.
* ``SystemDatabase._notification_fallback_polling_interval`` and
  ``notifications_map`` — every waiting ``recv`` wakes on its own once a minute to
  re-check the database in case its NOTIFY was lost: one transaction per parked run
  per minute, a quarter of a core at 10,000 parked. ``stretch_recv_recheck`` makes
  that per-run timer rare and ``sweep_waiting_recvs`` replaces it with one query per
  worker for all its waiting runs (docs/scaling.md, "Parked runs").
* Direct SQL on ``dbos.workflow_status`` in ``move_workflows_to_version``: there is
  no API to change a workflow's application version in place.
* ``DBOS._active_workflows_set.activeList()`` and ``reenqueue_for_recovery`` in
  ``recover_own_stranded``: a workflow whose coroutine died while Postgres was away
  (its error could not be recorded either) stays ``PENDING`` under a *live* executor,
  which recovers its own workflows only when it starts. Found by ``manage.py chaos``.
* The queue thread's stop event (``install_queue_kick``): DBOS's queue workers sleep
  ``polling_interval_sec`` on it between polls, and nothing else wakes them. Its class
  is swapped for one whose ``kick()`` ends that sleep early *without* stopping, so one
  LISTEN per worker can start a poll the moment work is enqueued, and the poll itself
  can be slow (cheap when idle). ``kickable_from_launch`` replaces the ``queue_thread``
  that ``DBOS._launch`` starts, so the swap happens before any queue thread first waits.
* The internal queue's ``_polling_interval_sec`` (``set_internal_queue_poll``): DBOS
  fixes it at one second and every poll walks every active workflow, parked ones too.

Over 400 lines on purpose: every private internal in one file, so an upgrade of ``dbos`` re-
reads one file.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from dbos import DBOS
from django.db import connection

log = logging.getLogger(__name__)

RUN_WORKFLOW = "deskhand.run"


def _sys_db() -> Any:
    from dbos._dbos import _get_dbos_instance

    return _get_dbos_instance()._sys_db


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
        with connection.cursor() as cur:
            cur.execute("SELECT pg_notify('deskhand_queue', '')")  # every worker polls now
        if left == 0:
            break
        time.sleep(pause)
    return before - left, left


def recover_own_stranded(executor_id: str, app_version: str, min_age_s: float = 10.0) -> list[str]:
    """Re-enqueue this executor's ``PENDING`` workflows that no longer execute in this process.

    A workflow is stranded when its execution ended here without DBOS recording how (its
    coroutine died on a database error during a Postgres restart, and so did the write of
    its error): DBOS still says ``PENDING`` under this live executor, so no takeover
    touches it and this process's startup recovery is long past. Only rows untouched for
    ``min_age_s`` count, so a workflow just claimed but not yet running is left alone.
    """
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
        with connection.cursor() as cur:
            cur.execute("SELECT pg_notify('deskhand_queue', '')")
    return moved


# --- a restart with thousands parked: recover in stages, decided runs first -------------

STAGED = "#staged"


def staged_id(executor_id: str) -> str:
    """Where a restarting worker parks its own pending workflows until it re-enqueues them."""
    return executor_id + STAGED


def base_executor(executor_id: str) -> str:
    return executor_id.removesuffix(STAGED)


def stage_own_pending(executor_id: str, app_version: str) -> int:
    """Before launch: move this executor's ``PENDING`` workflows to its staging id.

    DBOS's startup recovery would re-enqueue every one of them at once, and thousands of
    parked runs replaying together take a minute or more, a decided run among them. Staged,
    ``StagedRecovery`` hands them back a batch at a time, runs with a message waiting first.
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
        with connection.cursor() as cur:
            cur.execute("SELECT pg_notify('deskhand_queue', '')")
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


# --- parked runs: one sweep per worker instead of one timer per waiting recv ---------------


def stretch_recv_recheck(seconds: float) -> None:
    """Make each waiting ``recv`` re-check the database only every ``seconds`` on its own."""
    _sys_db()._notification_fallback_polling_interval = float(seconds)


def recv_recheck_seconds() -> float:
    return float(_sys_db()._event_recheck_interval())


def waiting_recvs() -> int:
    return len(_sys_db().notifications_map.snapshot())


def sweep_waiting_recvs(batch: int = 5000) -> int:
    """Wake every waiting ``recv`` that has an unconsumed message: one query per batch of waiters.

    The safety net for a lost NOTIFY (a listener reconnecting after a Postgres restart),
    done for all of this worker's parked runs at once. Returns how many it woke.
    """
    try:
        sysdb = _sys_db()
    except Exception:
        return 0  # no executor in this process (any more): nothing waits here
    if sysdb is None:
        return 0
    waiting = sysdb.notifications_map.snapshot()
    if not waiting:
        return 0
    by_key: dict[tuple[str, str], Any] = {}
    for _payload, (dest, topic, _shard), signal in waiting:
        by_key[(dest, topic)] = signal
    keys = list(by_key)
    woke = 0
    with connection.cursor() as cur:
        for i in range(0, len(keys), batch):
            chunk = keys[i : i + batch]
            cur.execute(
                "SELECT DISTINCT n.destination_uuid, n.topic FROM dbos.notifications n"
                " JOIN unnest(%s::text[], %s::text[]) AS w(dest, topic)"
                " ON n.destination_uuid = w.dest AND n.topic = w.topic"
                " WHERE n.consumed = false",
                [[k[0] for k in chunk], [k[1] for k in chunk]],
            )
            for dest, topic in cur.fetchall():
                signal = by_key.get((dest, topic))
                if signal is not None:
                    signal.set()  # each waiter re-reads the table; a spurious wake is harmless
                    woke += 1
    return woke


# --- the queue kick: poll now, not at the next interval --------------------------------


class KickableEvent(threading.Event):
    """A ``threading.Event`` whose sleepers can be woken early without the event being set.

    ``wait`` returns the flag, never whether it was notified: a kick makes DBOS's queue
    worker poll at once, a real ``set()`` still stops it. A kick latches per thread: a
    queue worker that was busy polling when the kick came (so not asleep to hear it) finds
    it on its next ``wait`` and polls again at once, instead of sleeping out a whole
    interval with the kicked work still queued.
    """

    _kicks: int
    _seen: dict[int, int]

    def wait(self, timeout: float | None = None) -> bool:
        me = threading.get_ident()
        with self._cond:  # type: ignore[attr-defined]
            if not self._flag and self._seen.get(me, self._kicks) == self._kicks:  # type: ignore[attr-defined]
                self._cond.wait(timeout)  # type: ignore[attr-defined]
            self._seen[me] = self._kicks
            return bool(self._flag)  # type: ignore[attr-defined]

    def kick(self) -> None:
        with self._cond:  # type: ignore[attr-defined]
            self._kicks += 1
            self._cond.notify_all()  # type: ignore[attr-defined]

    def set(self) -> None:
        """Stop every sleeper, also those still in the old ``wait()`` on the old condition.

        For them a notify means "stopped", which is now the truth; without it, DBOS's
        shutdown waited out the queue manager's one-second interval after every launch.
        """
        super().set()
        for cond in getattr(self, "_retired", ()):
            with cond:
                cond.notify_all()


def _kickable_queue_thread(stop_event: threading.Event, dbos: Any) -> None:
    """DBOS's queue manager, its stop event made kickable before any queue thread waits."""
    from dbos._queue import queue_thread

    if type(stop_event) is threading.Event:
        make_kickable(stop_event)
    queue_thread(stop_event, dbos)


def kickable_from_launch() -> None:
    """Have the next ``DBOS.launch()`` start its queue manager on a kickable stop event.

    Made kickable only after launch, the queue threads started at launch (every queue
    already in ``dbos.queues``) slept their first interval on the old condition, deaf to
    kicks: a worker restarted holding a decided run took up to one whole interval (5 s
    for the runs queue, 10 s for a model queue) before it polled. ``DBOS.launch`` looks
    ``queue_thread`` up in its own module when it starts the thread.
    """
    import dbos._dbos as dbos_module

    dbos_module.queue_thread = _kickable_queue_thread


def install_queue_kick() -> KickableEvent | None:
    """Make this executor's queue threads wakeable; the event to ``kick()`` (None: not found)."""
    from dbos._dbos import _get_dbos_instance
    from dbos._queue import queue_thread

    dbos = _get_dbos_instance()
    for thread in dbos._background_threads:
        if getattr(thread, "_target", None) in (queue_thread, _kickable_queue_thread):
            event = thread._args[0]  # type: ignore[attr-defined]
            if type(event) is threading.Event:
                make_kickable(event)
            return event if isinstance(event, KickableEvent) else None
    return None


def make_kickable(event: threading.Event) -> KickableEvent:
    """Turn a plain ``threading.Event`` that threads may already sleep on into a kickable one.

    A thread already sleeping in the old ``wait()`` must never be kicked: that ``wait()``
    would report "stopped" and its queue thread would exit. So kicks go to a new condition,
    and old sleepers finish their interval on the old one — unless the event is really set,
    which ``KickableEvent.set`` passes on to the retired condition too.
    """
    with event._cond:  # type: ignore[attr-defined]
        event._retired = [event._cond]  # type: ignore[attr-defined]
        event._kicks, event._seen = 0, {}  # type: ignore[attr-defined]
        event._cond = threading.Condition(threading.Lock())  # type: ignore[attr-defined]
        event.__class__ = KickableEvent
    return event  # type: ignore[return-value]


def set_internal_queue_poll(seconds: float) -> None:
    """Poll DBOS's own queue (recovery, schedules) every ``seconds`` instead of every second.

    Every poll of a queue counts this executor's active workflows in a Python loop over all
    of them (``count_for_queue``), parked runs included: at 10,000 parked each queue's poll
    cost a point of a core idle. The internal queue is an in-memory ``Queue`` whose interval
    the queue thread re-reads before each wait, and the LISTEN kick wakes it like the others.
    """
    from dbos._dbos import _get_dbos_instance

    _get_dbos_instance()._registry.get_internal_queue()._polling_interval_sec = float(seconds)


def internal_queue_poll_seconds() -> float:
    from dbos._dbos import _get_dbos_instance

    return float(_get_dbos_instance()._registry.get_internal_queue()._polling_interval_sec)


# --- deploys: move parked runs to a new application version ---------------------------


def move_workflows_to_version(
    from_version: str, to_version: str, run_ids: list[str] | None = None
) -> list[str]:
    """Re-enqueue the open run workflows of ``from_version`` at ``to_version``; their ids.

    Each goes back to ``ENQUEUED`` on its own queue (its partition kept) with no owner,
    as DBOS's own recovery does, so a worker of ``to_version`` dequeues it and replays its
    history on the new code — which is safe only because every step-sequence change is
    behind ``DBOS.patch`` (docs/deploys.md). The caller checks that no live worker still
    serves ``from_version``.
    """
    sql = (
        "UPDATE dbos.workflow_status SET application_version = %s, status = 'ENQUEUED',"
        " owner_xid = NULL, started_at_epoch_ms = NULL,"
        " updated_at = (extract(epoch from now()) * 1000)::bigint,"
        " queue_name = coalesce(queue_name, '_dbos_internal_queue')"
        " WHERE name = %s AND application_version = %s AND status IN ('PENDING', 'ENQUEUED')"
    )
    args: list[Any] = [to_version, RUN_WORKFLOW, from_version]
    if run_ids is not None:
        sql += " AND workflow_uuid = ANY(%s)"
        args.append(run_ids)
    with connection.cursor() as cur:
        cur.execute(sql + " RETURNING workflow_uuid", args)
        moved = [r[0] for r in cur.fetchall()]
        # Their open children too (a model call on its rate-limited queue, deskhand.dbos.engine.workflow):
        # left on the old version, no new worker would run one, and its run would wait on.
        cur.execute(
            "UPDATE dbos.workflow_status SET application_version = %s, status = 'ENQUEUED',"
            " owner_xid = NULL, started_at_epoch_ms = NULL,"
            " updated_at = (extract(epoch from now()) * 1000)::bigint,"
            " queue_name = coalesce(queue_name, '_dbos_internal_queue')"
            " WHERE parent_workflow_id = ANY(%s) AND application_version = %s"
            " AND status IN ('PENDING', 'ENQUEUED')",
            [to_version, moved, from_version],
        )
        cur.execute("SELECT pg_notify('deskhand_queue', '')")  # delivered at commit
        return moved
