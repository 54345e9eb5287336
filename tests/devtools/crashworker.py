"""The one crash worker: a real ``manage.py worker`` that SIGKILLs itself at a named point.

Usage: ``python -m tests.devtools.crashworker EXECUTOR_ID [SPEC [PROVIDER]]``

Used by the crash sweep (``tests/devtools/crash.py``) and by the ``worker_process``
test fixture. Development code: it lives under ``tests/`` and is not in the wheel.

``SPEC`` is a comma-separated list of ``point:target[:nth]`` (see ``agent.record.faults``):
``before_step:model:3``, ``after_step:tool.issue_refund``, ``after_effect:issue_refund``…
``PROVIDER``, when given, names a script in ``tests.devtools.evals.scripts`` (``policy``,
``nw3-asks``…) installed for every run; the crash sweep needs NW-3's denial path, which the
policy reader never asks for. Without it each run uses the provider it recorded.

Nothing in the product reads a flag, a setting or an environment variable for
this: only this launcher, run by the crash sweep, installs crash points and the
model override, in its own process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

from django.db import connections

from tests.devtools import forkserver

ROOT = Path(__file__).resolve().parents[2]
LOG_DIR = ROOT / ".deskhand" / "crash-sweep"


def install(spec: str) -> None:
    from agent.record import faults

    for item in filter(None, spec.split(",")):
        point, target, *rest = item.split(":")
        if point == "cutoff":
            cut_off_while(Path(target))
        elif point == "cut_all_at_reenqueue":
            cut_every_session_at_reenqueue(int(target))
        else:
            faults.kill_at(point, target, int(rest[0]) if rest else 1)


def cut_off_while(marker: Path) -> None:
    """``cutoff:PATH``: the lease cannot reach Postgres while PATH exists (a network partition
    between this worker and the database, as far as its liveness is concerned)."""
    import psycopg

    from deskhand.infra.fleet.lease import Lease

    connect = Lease._default_connect

    def partitioned(self: Lease) -> psycopg.Connection:
        if marker.exists():
            raise psycopg.OperationalError("cut off from the database (test partition)")
        return connect(self)

    Lease._default_connect = partitioned  # type: ignore[method-assign]


def cut_every_session_at_reenqueue(nth: int) -> None:
    """``cut_all_at_reenqueue:N``: on the N-th workflow a takeover re-enqueues, every session of
    DBOS and of every lease in the database is cut at once — a Postgres restart as its clients
    see it — and that re-enqueue fails as it would (DBOS logs and swallows it, #716)."""
    import psycopg
    from dbos._sys_db import SystemDatabase

    reenqueue = SystemDatabase.reenqueue_for_recovery
    calls = {"n": 0}

    def failing(self, workflow_id, executor_ids, recovery_queue_name):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == nth:
            with psycopg.connect(database_url(), autocommit=True) as conn:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                    " AND (application_name LIKE 'dbos%' OR application_name LIKE 'deskhand-lease%')"
                )
            raise psycopg.OperationalError("terminating connection due to administrator command")
        return reenqueue(self, workflow_id, executor_ids, recovery_queue_name)

    SystemDatabase.reenqueue_for_recovery = failing  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "deskhand.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from agent.providers import install_override
    from tests.devtools.evals import scripts

    executor_id, spec = argv[1], argv[2] if len(argv) > 2 else ""
    install(spec)
    if len(argv) > 3 and argv[3]:
        install_override("*", scripts.provider(argv[3]))
    call_command("worker", executor_id=executor_id, reconcile_every=1.0)


def database_url() -> str:
    sd = connections["default"].settings_dict
    host = sd.get("HOST") or "127.0.0.1"
    auth = quote(sd.get("USER") or "postgres", safe="")
    if sd.get("PASSWORD"):
        auth += ":" + quote(sd["PASSWORD"], safe="")
    port = f":{sd['PORT']}" if sd.get("PORT") else ""
    return f"postgresql://{auth}@{quote(host, safe='')}{port}/{sd['NAME']}"


class CrashProcess:
    """A product process started through the forkserver with crash points from a spec, which a
    schedule may SIGKILL and start again: the worker, the SMTP receiver, the web process."""

    module = ""  # the launcher: ``python -m <module> <args…> <spec>``

    def __init__(self, log_name: str) -> None:
        self.proc: forkserver.Process | None = None
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        # One log per pytest process too (xdist workers may reuse a name).
        session = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.log_path = LOG_DIR / f"{session}-{log_name}.log"

    def _launch(self, args: list[str], spec: str, env: dict[str, str], ready: str) -> None:
        """Start it, and wait until its log since this start says ``ready``."""
        with self.log_path.open("a") as log:
            log.write(f"--- start spec={spec!r}\n")
        self.proc = forkserver.start(self.module, args, env, self.log_path)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if ready in self.log_path.read_text().rsplit("--- start", 1)[-1]:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(
            f"{self.module} did not start ({ready!r} not seen):\n"
            f"{self.log_path.read_text()[-3000:]}"
        )

    @property
    def killed(self) -> bool:
        return self.proc is not None and self.proc.poll() == -9

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait(10)

    def stop(self) -> None:
        if self.alive:
            assert self.proc is not None
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()


class Worker(CrashProcess):
    """``python -m tests.devtools.crashworker``: a real ``manage.py worker`` that may be told to die."""

    module = "tests.devtools.crashworker"

    def __init__(self, executor_id: str, provider: str) -> None:
        super().__init__(executor_id)
        self.executor_id = executor_id
        self.provider = provider

    def start(self, spec: str = "") -> Worker:
        env = dict(os.environ, DATABASE_URL=database_url(), PYTHONUNBUFFERED="1")
        self._launch(
            [self.executor_id, spec, self.provider], spec, env, f"worker {self.executor_id} ready"
        )
        return self


if __name__ == "__main__":
    main(sys.argv)
