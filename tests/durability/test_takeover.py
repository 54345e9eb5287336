"""Dead-worker takeover with real worker subprocesses, SIGKILLed or cut off from Postgres.

The fleet runs with a short grace (3 s) and fast heartbeats here so each test takes
seconds; the defaults are in settings (DESKHAND_TAKEOVER_GRACE_SEC and friends).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

import psycopg
import pytest
from django.db import connection

from agent.models import Run
from agent.models.ledger import LedgerEntry
from agent.run.services import run_start
from approvals.models import Approval
from approvals.services import approval_decide
from deskhand.domain.desk.models import Refund
from deskhand.infra.fleet.models import Worker
from tests.devtools.load.world import load_world, owners
from tests.durability.helpers import assert_every_effect_was_approved
from tests.fixtures.dbos import ROOT, test_database_url, wait_parked, wait_terminal
from tests.support.waiting import until

pytestmark = [pytest.mark.crash, pytest.mark.django_db(transaction=True)]

GRACE = 3.0
FLEET = {
    "DESKHAND_TAKEOVER_GRACE_SEC": str(GRACE),
    "DESKHAND_HEARTBEAT_SEC": "0.5",
    "DESKHAND_TAKEOVER_SCAN_SEC": "0.5",
}


def wait_until(predicate: Callable[[], bool], what: str) -> float:
    """Seconds until ``predicate`` holds; a test that bounds the time asserts on the answer."""
    start = time.monotonic()
    until(what, predicate, every=0.1)
    return time.monotonic() - start


def executors_of(runs: list[Run]) -> dict[str, tuple[str, str]]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT workflow_uuid, executor_id, status FROM dbos.workflow_status"
            " WHERE workflow_uuid = ANY(%s)",
            [[str(r.pk) for r in runs]],
        )
        return {wf: (ex, st) for wf, ex, st in cur.fetchall()}


def all_parked_under(runs: list[Run], executor_id: str) -> Callable[[], bool]:
    def check() -> bool:
        now = executors_of(runs)
        return len(now) == len(runs) and all(v == (executor_id, "PENDING") for v in now.values())

    return check


def park(n: int) -> list[Run]:
    who = owners()
    runs = [run_start(ticket=t, user=who[t.merchant_id]) for t in load_world(n)]
    for run in runs:
        wait_parked(str(run.pk))
    return runs


def approve_all(runs: list[Run]) -> None:
    who = owners()
    for run in runs:
        approval = Approval.objects.get(run=run, status="pending")
        approval_decide(approval=approval, user=who[run.merchant_id], approve=True, channel="cli")
    for run in runs:
        assert wait_terminal(str(run.pk)).status == "succeeded"
    assert Refund.objects.count() == len(runs)
    assert LedgerEntry.objects.count() == len(runs)
    assert_every_effect_was_approved()


def cut_lease_session(executor_id: str) -> None:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND application_name = %s",
            [f"deskhand-lease:{executor_id}"],
        )


def test_a_dead_workers_parked_runs_are_resumed_by_a_live_worker(worker_process):
    dying = worker_process("fleet-a", env=FLEET, provider="park").start()
    runs = park(3)
    assert all_parked_under(runs, "fleet-a")()
    worker_process("fleet-b", env=FLEET, provider="park").start()

    # Never two live executors on one id: a second fleet-a refuses to start (the deploy
    # overlap of dbos-transact-py #804 cannot happen), and the first is untouched.
    env = {**os.environ, **FLEET, "DATABASE_URL": test_database_url()}
    second = subprocess.run(
        [sys.executable, "manage.py", "worker", "--executor-id", "fleet-a", "--id-wait", "0.5"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert second.returncode == 1, second.stdout + second.stderr
    assert "Traceback" not in second.stderr
    assert (
        f"CommandError: executor id fleet-a is held by a live worker (pid {dying.proc.pid}"
        in second.stderr
    )
    assert "this worker did not start" in second.stderr
    assert dying.proc.poll() is None

    dying.kill()
    took = wait_until(all_parked_under(runs, "fleet-b"), "fleet-b re-parks fleet-a's runs")
    assert took < 30

    gone = Worker.objects.get(executor_id="fleet-a")
    assert gone.incarnation is None  # no incarnation of fleet-a may ever execute again
    assert gone.taken_over_by == "fleet-b"
    assert gone.runs_taken_over == 3
    approve_all(runs)


@pytest.mark.slow
def test_a_worker_cut_off_past_the_grace_is_taken_over_and_stops_when_it_reconnects(
    worker_process, tmp_path
):
    partition = tmp_path / "partitioned"
    cut = worker_process("fleet-cut", faults=f"cutoff:{partition}", env=FLEET, provider="park")
    cut.start()
    runs = park(1)
    worker_process("fleet-keep", env=FLEET, provider="park").start()

    # A dropped session alone (a blip, not a partition): the worker re-takes its own lock
    # and keeps its run; nobody takes it over, even after the grace has passed.
    cut_lease_session("fleet-cut")
    wait_until(lambda: '"worker.lease_retaken"' in cut._new_log(), "fleet-cut re-takes its lock")
    time.sleep(GRACE + 1.5)
    assert all_parked_under(runs, "fleet-cut")()
    assert Worker.objects.get(executor_id="fleet-cut").taken_over_at is None

    # A partition longer than the grace: its runs are taken over; when it can reach the
    # database again it finds its incarnation cleared and stops at once.
    partition.touch()
    cut_lease_session("fleet-cut")
    wait_until(all_parked_under(runs, "fleet-keep"), "fleet-keep takes the run over")
    assert cut.proc.poll() is None  # still cut off, still alive: it executes nothing
    partition.unlink()
    assert cut.wait_exit(30) == 3
    assert "worker fleet-cut stops: a takeover cleared this worker's incarnation" in cut._new_log()
    approve_all(runs)


@pytest.mark.slow
def test_a_takeover_cut_short_by_a_database_restart_still_resumes_every_run(worker_process):
    dying = worker_process("fleet-dying", env=FLEET, provider="park").start()
    runs = park(4)
    # On the second workflow it re-enqueues, every DBOS and lease session in the database is
    # cut (a Postgres restart as clients see it) and that re-enqueue fails; DBOS logs and
    # swallows it (dbos-transact-py #716), leaving the workflow PENDING under the dead id.
    taker = worker_process(
        "fleet-taker", faults="cut_all_at_reenqueue:2", env=FLEET, provider="park"
    ).start()
    dying.kill()
    wait_until(all_parked_under(runs, "fleet-taker"), "every run resumed by fleet-taker")
    assert "Exception encountered when recovering workflow" in taker._new_log()  # swallowed
    wait_until(lambda: '"worker.lease_retaken"' in taker._new_log(), "the taker re-takes its lease")
    assert taker.proc.poll() is None
    approve_all(runs)


def test_an_executor_without_its_lease_is_refused_before_dbos_starts():
    # Unleased, an executor looks dead to every takeover scan, which would re-run its runs
    # while it still executes them.
    from dbos import _dbos

    from deskhand.engine.bootstrap import launch_executor
    from deskhand.infra.dbos.client import DBOSSetupError
    from deskhand.infra.fleet import lease

    assert lease.current() is None
    before = _dbos._dbos_global_instance
    with pytest.raises(DBOSSetupError, match="executor fleet-unleased has no lease"):
        launch_executor("fleet-unleased")
    assert _dbos._dbos_global_instance is before  # nothing was constructed


def test_the_lease_lock_is_a_session_lock_a_dead_process_cannot_hold(transactional_db):
    from deskhand.infra.fleet.lease import lock_key

    key = lock_key("fleet-probe")
    url = test_database_url()
    holder = psycopg.connect(url, autocommit=True)
    assert holder.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()[0]
    with psycopg.connect(url, autocommit=True) as other:
        assert not other.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()[0]
        holder.close()  # the process is gone: Postgres drops its session and the lock with it
        wait_until(
            lambda: other.execute("SELECT pg_try_advisory_lock(%s)", [key]).fetchone()[0],
            "the lock frees itself",
        )
        other.execute("SELECT pg_advisory_unlock(%s)", [key])


@pytest.mark.slow
def test_after_a_deploy_a_run_parked_under_the_old_version_finishes_on_a_draining_old_worker(
    worker_process,
):
    from django.conf import settings

    from agent.ops.health import health_report

    old = settings.DESKHAND_APP_VERSION
    slot = worker_process("fleet-slot", env=FLEET, provider="park").start()
    runs = park(1)
    slot.stop()  # the deploy: the slot restarts on the next release, same executor id
    worker_process(
        "fleet-slot", env={**FLEET, "DESKHAND_APP_VERSION": "deskhand-next"}, provider="park"
    ).start()
    assert health_report().unserved_versions == {old: 1}  # nobody will finish it ...
    time.sleep(GRACE + 1)
    assert all_parked_under(runs, "fleet-slot")()  # ... and the new code never touches it

    worker_process("fleet-drain", env=FLEET, provider="park").start()  # an old worker, draining
    wait_until(all_parked_under(runs, "fleet-drain"), "the draining worker adopts the run")
    assert health_report().unserved_versions == {}
    approve_all(runs)


def test_a_restarted_worker_resumes_the_run_decided_while_it_was_down_before_the_rest(
    worker_process,
):
    env = {**FLEET, "DESKHAND_RECOVERY_BATCH": "2", "DESKHAND_RECOVERY_MAX_REPLAYING": "2"}
    worker = worker_process("fleet-restart", env=env, provider="park").start()
    runs = park(8)
    worker.kill()
    decided = runs[-1]  # the newest: DBOS's own recovery order would reach it last
    who = owners()
    approval_decide(
        approval=Approval.objects.get(run=decided, status="pending"),
        user=who[decided.merchant_id],
        approve=True,
        channel="cli",
    )
    worker.start()
    assert wait_terminal(str(decided.pk)).status == "succeeded"
    wait_until(all_parked_under(runs[:-1], "fleet-restart"), "the others re-park")
    with connection.cursor() as cur:  # handed back first: dequeued before any other
        cur.execute(
            "SELECT workflow_uuid FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s)"
            " ORDER BY started_at_epoch_ms NULLS LAST, workflow_uuid",
            [[str(r.pk) for r in runs]],
        )
        order = [r[0] for r in cur.fetchall()]
    assert order.index(str(decided.pk)) <= 1, order  # in the first batch of two
    assert '"worker.recovered"' in worker._new_log()
