"""The DBOS internals ``deskhand/engine/workarounds/`` relies on are the ones we read.

An upgrade of ``dbos`` that changes any of them fails here, by name and with the module that
relies on it: re-read that module and the function in the new release, fix what changed,
then update the pin below. Behaviour tests follow, so a pin that still matches also still
works.
"""

from __future__ import annotations

import hashlib
import inspect
import time
from importlib.metadata import version

import pytest
from django.db import connection

from agent.models import Run
from deskhand.engine.workarounds import (
    executor_recovery,
    internal_queue_poll,
    queue_kick,
    recv_recheck,
)
from tests.durability.helpers import decide, start
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.support.waiting import until

DBOS_VERSION = "3.4.0"

# sha256 (first 16 hex digits) of each internal's source in dbos 3.4.0, and the modules of
# deskhand/engine/workarounds/ that rely on it.
PINNED = {
    "DBOS._recover_pending_workflows": ("0c94d17fa1bcb61d", "executor_recovery"),
    "dbos._recovery.recover_pending_workflows": ("9f2a97ad0756a741", "executor_recovery"),
    "dbos._recovery._recover_workflow": ("ebfc6ed4df454172", "executor_recovery"),
    "SystemDatabase.reenqueue_for_recovery": (
        "ac0bc1c45d8c36e4",
        "executor_recovery staged_recovery",
    ),
    "SystemDatabase.get_pending_workflows": (
        "1bcd687dd6ff4ea7",
        "executor_recovery staged_recovery",
    ),
    "SystemDatabase.recv_async": ("4ad0d63930ac08d9", "recv_recheck"),
    "SystemDatabase._event_recheck_interval": ("453a577302003a1b", "recv_recheck"),
    "ThreadSafeEventDict.snapshot": ("d003cf6ea6d8d33e", "recv_recheck"),
    "KeySignal.set": ("ae0ab7dc083a747f", "recv_recheck"),
    "dbos._queue.queue_thread": ("e54ec9c69e992899", "queue_kick"),
    "dbos._queue.queue_worker_thread": ("c0b22c3a946ff0c7", "queue_kick"),
    "ActiveWorkflowById.activeList": ("7c8e2a3f763bffad", "executor_recovery staged_recovery"),
    "DBOSRegistry.get_internal_queue": ("fc3960e3640ae895", "internal_queue_poll"),
    "DBOS._launch": ("581c866e5a6f1846", "queue_kick"),
}


def _internals() -> dict[str, object]:
    from dbos import _queue, _recovery
    from dbos._core import ActiveWorkflowById
    from dbos._dbos import DBOS, DBOSRegistry
    from dbos._sys_db import KeySignal, SystemDatabase, ThreadSafeEventDict

    return {
        "DBOS._recover_pending_workflows": DBOS._recover_pending_workflows,
        "dbos._recovery.recover_pending_workflows": _recovery.recover_pending_workflows,
        "dbos._recovery._recover_workflow": _recovery._recover_workflow,
        "SystemDatabase.reenqueue_for_recovery": SystemDatabase.reenqueue_for_recovery,
        "SystemDatabase.get_pending_workflows": SystemDatabase.get_pending_workflows,
        "SystemDatabase.recv_async": SystemDatabase.recv_async,
        "SystemDatabase._event_recheck_interval": SystemDatabase._event_recheck_interval,
        "ThreadSafeEventDict.snapshot": ThreadSafeEventDict.snapshot,
        "KeySignal.set": KeySignal.set,
        "dbos._queue.queue_thread": _queue.queue_thread,
        "dbos._queue.queue_worker_thread": _queue.queue_worker_thread,
        "ActiveWorkflowById.activeList": ActiveWorkflowById.activeList,
        "DBOSRegistry.get_internal_queue": DBOSRegistry.get_internal_queue,
        "DBOS._launch": DBOS._launch,
    }


def test_dbos_is_the_pinned_version():
    assert version("dbos") == DBOS_VERSION, (
        f"dbos {version('dbos')} is installed, but deskhand/engine/workarounds/ was written"
        f" against {DBOS_VERSION}: re-read it against the new release and update the pins here."
    )


@pytest.mark.parametrize("name", sorted(PINNED))
def test_a_dbos_internal_we_rely_on_is_unchanged(name):
    source = inspect.getsource(_internals()[name])  # type: ignore[arg-type]
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    pinned, homes = PINNED[name]
    assert digest == pinned, (
        f"DBOS's private {name} changed in this dbos release. In deskhand/engine/workarounds/,"
        f" {', '.join(h + '.py' for h in homes.split())} relies on it: re-read them against"
        f" the new release, fix what no longer holds, then pin {digest}."
    )


def test_every_pin_names_a_workaround_that_exists():
    from importlib import import_module

    for home in {home for _, homes in PINNED.values() for home in homes.split()}:
        import_module(f"deskhand.engine.workarounds.{home}")


def test_the_recovery_entry_point_takes_executor_ids_and_the_recheck_is_a_minute():
    from dbos._dbos import DBOS
    from dbos._sys_db import SystemDatabase

    params = inspect.signature(DBOS._recover_pending_workflows).parameters
    assert list(params) == ["executor_ids"], list(params)
    assert SystemDatabase._notification_fallback_polling_interval == 60.0


def test_the_workflow_columns_moved_by_hand_exist(transactional_db):
    with connection.cursor() as cur:
        cur.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'dbos' AND table_name = 'workflow_status'"
        )
        columns = {r[0] for r in cur.fetchall()}
    wanted = {
        "workflow_uuid",
        "name",
        "status",
        "executor_id",
        "application_version",
        "owner_xid",
        "started_at_epoch_ms",
        "updated_at",
        "queue_name",
    }
    assert wanted <= columns, f"dbos.workflow_status lost {sorted(wanted - columns)}"


def test_a_decision_whose_notify_was_lost_is_delivered_by_the_worker_sweep(dbos_executor):
    from dbos._dbos import _get_dbos_instance

    sysdb = _get_dbos_instance()._sys_db
    assert sysdb._event_recheck_interval() >= 3600  # the per-run timer is stretched
    run = start("NW-1", "owner@northwind.test")
    wait_parked(str(run.pk))
    # Parked: the gate's row is written just before the recv starts.
    until("the run's recv to wait", lambda: recv_recheck.waiting_recvs() >= 1)
    assert recv_recheck.waiting_recvs() == 1
    with connection.cursor() as cur:  # the NOTIFY is lost, as when the listener reconnects
        cur.execute("ALTER TABLE dbos.notifications DISABLE TRIGGER dbos_notifications_trigger")
    try:
        decide(run, "owner@northwind.test")
    finally:
        with connection.cursor() as cur:
            cur.execute("ALTER TABLE dbos.notifications ENABLE TRIGGER dbos_notifications_trigger")
    time.sleep(1.5)
    assert Run.objects.get(pk=run.pk).status == "awaiting_approval"  # nobody woke it
    assert recv_recheck.sweep_waiting_recvs() == 1
    assert wait_terminal(str(run.pk)).status == "succeeded"


def test_the_queue_manager_starts_on_a_kickable_event_so_no_first_wait_is_deaf(dbos_executor):
    """Launch starts DBOS's queue manager through ours, which makes its stop event kickable
    before any queue thread waits on it; a queue started at launch used to sleep its first
    interval deaf to kicks (5 s for the runs queue), and a restarted worker's decided run
    waited that long."""
    import dbos._dbos as dbos_module
    from dbos._dbos import _get_dbos_instance

    assert dbos_module.queue_thread is queue_kick._kickable_queue_thread
    managers = [
        t
        for t in _get_dbos_instance()._background_threads
        if getattr(t, "_target", None) is queue_kick._kickable_queue_thread
    ]
    assert len(managers) == 1 and managers[0].is_alive()
    event = managers[0]._args[0]  # type: ignore[attr-defined]
    assert isinstance(event, queue_kick.KickableEvent)


def test_a_kick_wakes_the_queue_threads_without_stopping_them(dbos_executor):
    event = queue_kick.install_queue_kick()
    assert isinstance(event, queue_kick.KickableEvent)  # found and made kickable
    for _ in range(5):
        event.kick()
    time.sleep(0.3)
    assert not event.is_set()
    run = start("NW-2", "owner@northwind.test")  # the queue threads are still there
    assert wait_terminal(str(run.pk)).status == "succeeded"


def test_a_kick_that_comes_while_a_queue_worker_is_polling_makes_its_next_wait_return_at_once():
    """A queue worker is asleep in ``wait`` only between polls: a kick that lands while it
    polls (the enqueue committed just after its SELECT) must not be lost, or the kicked
    work waits a whole polling interval (1 s for the model queues)."""
    import threading

    kickable = queue_kick.make_kickable(threading.Event())
    t0 = time.monotonic()
    assert kickable.wait(0.2) is False  # nothing pending: a full interval's sleep
    assert time.monotonic() - t0 >= 0.19
    kickable.kick()  # while this thread "polls"
    t0 = time.monotonic()
    assert kickable.wait(30) is False  # the latched kick: poll again now, not stopped
    assert time.monotonic() - t0 < 1.0
    t0 = time.monotonic()
    assert kickable.wait(0.2) is False  # taken once, not forever
    assert time.monotonic() - t0 >= 0.19


def test_stopping_reaches_a_thread_that_went_to_sleep_before_the_event_was_made_kickable():
    """DBOS's queue manager sleeps a second at a time and was asleep in the plain ``wait()``
    when the event became kickable: a kick must not stop it, a real ``set()`` must, at once
    (it used to finish its second, and every executor stop soon after a launch waited)."""
    import threading

    event = threading.Event()
    woke: list[bool] = []
    sleeper = threading.Thread(target=lambda: woke.append(event.wait(30)), daemon=True)
    sleeper.start()
    time.sleep(0.2)  # asleep in threading.Event.wait
    kickable = queue_kick.make_kickable(event)
    kickable.kick()
    time.sleep(0.2)
    assert sleeper.is_alive() and woke == []  # a kick is not a stop
    kickable.set()
    sleeper.join(5)
    assert not sleeper.is_alive() and woke == [True]


def test_a_workflow_stranded_pending_under_its_own_live_executor_is_re_enqueued(dbos_executor):
    """What chaos found: a run whose coroutine died while Postgres restarted stays PENDING
    under a worker that is alive and well, and nothing else would ever resume it."""
    from django.conf import settings

    from tests.support import parked_fixture

    run_id = parked_fixture.load(parked_fixture.read(), executor_id="pytest-inprocess")
    with connection.cursor() as cur:  # on this version, under this live executor, not running
        cur.execute(
            "UPDATE dbos.workflow_status SET application_version = %s WHERE workflow_uuid = %s",
            [settings.DESKHAND_APP_VERSION, run_id],
        )
    Run.objects.filter(pk=run_id).update(application_version=settings.DESKHAND_APP_VERSION)
    version = settings.DESKHAND_APP_VERSION
    assert executor_recovery.recover_own_stranded("pytest-inprocess", version, 0) == [run_id]
    wait_parked(run_id)
    until("the recovered run's recv to wait", lambda: recv_recheck.waiting_recvs() >= 1)
    # Running again in this process: not stranded, so a second pass leaves it alone.
    assert executor_recovery.recover_own_stranded("pytest-inprocess", version, 0) == []
    decide(Run.objects.get(pk=run_id), "owner@northwind.test")
    assert wait_terminal(run_id).status == "succeeded"


def test_the_notifier_idles_at_half_a_second_and_a_decision_still_wakes_its_run(dbos_executor):
    """DBOS's notifier flushes only events and streams (Deskhand uses neither): stretched to
    0.5 s it stops waking 100 times a second, and a recv still wakes on the table's trigger
    (the bench's approval_wake_p95_ms measures how soon)."""
    from dbos._dbos import _get_dbos_instance

    assert _get_dbos_instance()._sys_db._notification_coalesce_sec == 0.5
    run = wait_parked(str(start("NW-1", "owner@northwind.test").id))
    decide(run, "owner@northwind.test")
    assert wait_terminal(str(run.pk)).status == "succeeded"


def test_the_internal_queue_polls_at_the_fallback_interval_and_a_kick_starts_its_work(
    dbos_executor,
):
    """DBOS's own queue (schedules, recovery) polls every ``DESKHAND_QUEUE_POLL_SEC``, not
    every second: each poll walks every active workflow, parked runs included. Work put
    on it with a kick starts at once all the same."""
    from dbos import DBOS
    from dbos._dbos import _get_dbos_instance
    from django.conf import settings

    from deskhand.engine.queues import kick_queues
    from deskhand.infra.dbos.names import ESCALATION_SCHEDULE

    internal = _get_dbos_instance()._registry.get_internal_queue()
    assert internal._polling_interval_sec == settings.DESKHAND_QUEUE_POLL_SEC
    assert settings.DESKHAND_QUEUE_POLL_SEC >= 5.0
    internal_queue_poll.set_internal_queue_poll(60.0)
    try:
        kick_queues()  # the thread takes the new interval on its next wait
        time.sleep(0.5)
        t0 = time.monotonic()
        handle = DBOS.trigger_schedule(ESCALATION_SCHEDULE)
        kick_queues()
        assert handle.get_result() == []
        assert time.monotonic() - t0 < 10.0  # a 60-s poll would not have started it yet
    finally:
        internal_queue_poll.set_internal_queue_poll(settings.DESKHAND_QUEUE_POLL_SEC)
        kick_queues()
