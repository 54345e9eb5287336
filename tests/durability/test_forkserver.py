"""The test fork server starts workers that behave like cold ``python -m`` processes.

Every crash test depends on this: a forked worker must die of a real SIGKILL, report the
status ``Popen`` would, see the environment it was started with, and open its own
connections (tests/devtools/forkserver.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.devtools import forkserver
from tests.fixtures.dbos import test_database_url
from tests.support.waiting import until

PROBE = "tests.support.forkprobe"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": test_database_url(), **extra}


def _log_after(path: Path, text: str) -> str:
    return until(
        f"{text!r} in {path}",
        lambda: path.exists() and text in (content := path.read_text()) and content,
        every=0.02,
    )


@pytest.fixture
def log(tmp_path: Path) -> Path:
    return tmp_path / "probe.log"


@pytest.mark.django_db
def test_a_forked_process_reports_its_exit_status_as_popen_would(log: Path) -> None:
    assert forkserver.start(PROBE, ["exit", "3"], _env(), log).wait(30) == 3
    failed = forkserver.start(PROBE, ["raise"], _env(), log)
    assert failed.wait(30) == 1
    assert "RuntimeError: the probe raised" in log.read_text()


@pytest.mark.django_db
def test_a_forked_process_dies_of_a_real_sigkill(log: Path) -> None:
    proc = forkserver.start(PROBE, ["sleep"], _env(), log)
    content = _log_after(log, "sleeping pid=")
    assert f"pid={proc.pid}" in content and proc.pid != os.getpid()
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.2)
    proc.kill()
    assert proc.wait(30) == -signal.SIGKILL
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)  # reaped, gone


@pytest.mark.django_db
def test_each_process_sees_the_environment_it_was_started_with(log: Path) -> None:
    first = forkserver.start(PROBE, ["env", "DESKHAND_PROBE"], _env(DESKHAND_PROBE="one"), log)
    assert first.wait(30) == 0
    # PYTEST_CURRENT_TEST changes per test and is not part of a server's identity, but the
    # child still sees the value it was started with.
    second = forkserver.start(
        PROBE, ["env", "PYTEST_CURRENT_TEST"], _env(PYTEST_CURRENT_TEST="probe-value"), log
    )
    assert second.wait(30) == 0
    content = log.read_text()
    assert "DESKHAND_PROBE=one" in content and "PYTEST_CURRENT_TEST=probe-value" in content


@pytest.mark.django_db
def test_a_forked_process_opens_its_own_database_connection(log: Path) -> None:
    proc = forkserver.start(PROBE, ["django"], _env(), log)
    assert proc.wait(60) == 0, log.read_text()
    name = test_database_url().rsplit("/", 1)[1]
    assert f"database={name}" in log.read_text()
