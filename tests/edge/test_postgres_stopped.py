"""A real Postgres, stopped and started again: the commands give up in one sentence, the web
answers 503, and the worker waits it out — one line per reconnect attempt — then resumes."""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.edge.test_cli_conventions import (
    assert_every_command_says_one_sentence_and_every_page_is_503,
    run_outage_probe,
)
from tests.fixtures.dbos import ROOT
from tests.support.waiting import PATIENCE_S

ATTEMPT = re.compile(r"^database not reachable, reconnect attempt (\d+) failed \((.+)\); next")
BACK = re.compile(
    r"^database reachable again after (\d+) failed attempts? \(\d+ s\); worker resumed$"
)


class ScratchPostgres:
    """The embedded Postgres under a data folder of its own: migrated, seeded, ours to stop."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        pgdata = str(data_dir / "pgdata").replace("/", "%2F")
        self.url = f"postgresql://postgres@{pgdata}/deskhand"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}
        env.update(
            DESKHAND_DATA_DIR=str(self.data_dir),
            DATABASE_URL=self.url,
            DJANGO_SETTINGS_MODULE="deskhand.settings",
            PYTHONUNBUFFERED="1",
            **extra,
        )
        return env

    def python(self, code: str) -> None:
        env = self.env()
        del env["DATABASE_URL"]  # the embedded server's own management
        subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True, timeout=120)

    def start(self) -> None:
        self.python("from deskhand.infra import embedded_pg; embedded_pg.ensure_running()")

    def stop(self) -> None:
        self.python("from deskhand.infra import embedded_pg; embedded_pg.stop()")
        assert not (self.data_dir / "pgdata" / "postmaster.pid").exists()

    def manage(self, *argv: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *argv],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )


@pytest.fixture(scope="module")
def scratch_postgres() -> Iterator[ScratchPostgres]:
    # Short, under /tmp: the server's Unix socket lives inside it (a 107-byte limit).
    pg = ScratchPostgres(Path(tempfile.mkdtemp(prefix="dh-pg-", dir="/tmp")))
    try:
        pg.start()
        for argv in (["migrate", "--noinput", "-v", "0"], ["seed"]):
            done = pg.manage(*argv)
            assert done.returncode == 0, done.stderr[-3000:]
        pg.stop()
        yield pg
    finally:
        if (pg.data_dir / "pgdata" / "postmaster.pid").exists():
            pg.stop()
        shutil.rmtree(pg.data_dir, ignore_errors=True)


@pytest.mark.slow
def test_with_postgres_stopped_every_command_but_the_worker_says_one_sentence(scratch_postgres):
    results = run_outage_probe(scratch_postgres.url, str(scratch_postgres.data_dir))
    # The server's socket is gone with the server: libpq says so.
    assert_every_command_says_one_sentence_and_every_page_is_503(results, "No such file")


class Lines:
    """A process's output, line by line, as it comes."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.seen: list[str] = []
        self._q: queue.Queue[str] = queue.Queue()
        assert proc.stdout is not None
        stream = proc.stdout
        threading.Thread(target=lambda: [self._q.put(line) for line in stream], daemon=True).start()

    def until(self, pattern: str, timeout: float = PATIENCE_S) -> list[str]:
        """The lines up to and including the first that matches ``pattern``."""
        got: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._q.get(timeout=0.2).rstrip("\n")
            except queue.Empty:
                continue
            got.append(line)
            self.seen.append(line)
            if re.search(pattern, line):
                return got
        raise AssertionError(
            f"no line matching {pattern!r}; output so far:\n" + "\n".join(self.seen[-80:])
        )


def outage_lines(seen: list[str]) -> list[str]:
    """From the first attempt line after the last "resumed" (if any) to the last line."""
    start = max((i for i, line in enumerate(seen[:-1]) if BACK.match(line)), default=-1) + 1
    first = next(i for i in range(start, len(seen)) if ATTEMPT.match(seen[i]))
    return seen[first:]


def assert_one_line_per_attempt(lines: list[str]) -> int:
    """Numbered attempt lines (1, 2, 3, …) and then the one that says the worker resumed;
    in between nothing else but the lease's structured events."""
    attempts = []
    for line in lines[:-1]:
        if line.startswith('{"event": "worker.'):
            continue
        m = ATTEMPT.match(line)
        assert m, f"not an attempt line during the outage: {line!r}"
        attempts.append(int(m[1]))
    back = BACK.match(lines[-1])
    assert back, lines[-1]
    assert attempts == list(range(1, len(attempts) + 1)) and int(back[1]) == len(attempts)
    return len(attempts)


@pytest.mark.slow
def test_the_worker_waits_out_postgres_one_line_per_attempt_and_resumes(scratch_postgres):
    pg = scratch_postgres
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "worker", "--executor-id", "outage-worker"],
        cwd=ROOT,
        env=pg.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = Lines(worker)
    try:
        # Started while Postgres is down: it waits, saying so once per attempt.
        out.until(r"reconnect attempt 3 failed")
        pg.start()
        out.until(r"^database reachable again")
        assert assert_one_line_per_attempt(outage_lines(out.seen)) >= 3
        out.until(r"^worker outage-worker ready")

        # Down while it runs: the same, and nothing else (DBOS's threads included).
        pg.stop()
        out.until(r"reconnect attempt 3 failed")
        pg.start()
        out.until(r"^database reachable again")
        assert assert_one_line_per_attempt(outage_lines(out.seen)) >= 3

        # Resumed: a run started now is executed by this worker.
        done = pg.manage("run_ticket", "NW-2", "--wait", "--timeout", "90", timeout=150)
        assert done.returncode == 0, done.stderr[-2000:]
        assert "succeeded" in done.stdout, done.stdout
        out.until(r'"event": "run.finished"')
    finally:
        worker.terminate()
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(10)
    assert worker.returncode == 0, "\n".join(out.seen[-40:])
    assert not [line for line in out.seen if "Traceback" in line], "\n".join(out.seen)


def test_only_a_polling_loops_connection_failure_is_held_back():
    import logging

    from deskhand.infra.edge.outage import ConnectionNoise

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("dbos", logging.WARNING, __file__, 1, msg, None, None)

    noise = ConnectionNoise()
    down = 'connection is bad: connection to server on socket "/tmp/x" failed'
    assert not noise.filter(record(f"Exception listing queues: (psycopg.OperationalError) {down}"))
    assert not noise.filter(record(f"queue kick listener: {down}"))
    # A polling loop's other trouble, and any one-off error, still reach the log.
    assert noise.filter(record("Exception listing queues: KeyError: 'x'"))
    assert noise.filter(record(f"Exception encountered when recovering workflow: {down}"))
