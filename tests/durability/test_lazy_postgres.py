"""Settings start nothing; the embedded Postgres starts on a process's first connection."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.dbos import ROOT


def postgres_processes(data_dir: Path) -> list[str]:
    """Command lines of live processes that run on ``data_dir`` (the postmaster names it)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(data_dir) in cmdline and "postgres" in cmdline:
            found.append(cmdline)
    return found


@pytest.fixture
def fresh_data_dir() -> Iterator[Path]:
    # Short, under /tmp: the server's Unix socket lives inside it (a 107-byte limit).
    path = Path(tempfile.mkdtemp(prefix="dh-", dir="/tmp"))
    try:
        yield path
    finally:
        if (path / "pgdata" / "postmaster.pid").exists():
            python(path, "from deskhand.infra import embedded_pg; embedded_pg.stop()")
        shutil.rmtree(path, ignore_errors=True)


def python(data_dir: Path, code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(DESKHAND_DATA_DIR=str(data_dir), DJANGO_SETTINGS_MODULE="deskhand.settings")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_importing_settings_and_setting_up_django_starts_no_postgres(fresh_data_dir):
    out = python(
        fresh_data_dir,
        "import deskhand.settings as s; import django; django.setup(); "
        "print(s.DATABASES['default']['ENGINE'], s.DATABASES['default']['HOST'])",
    )

    assert out == f"deskhand.infra.embedded_db {fresh_data_dir / 'pgdata'}"
    assert not (fresh_data_dir / "pgdata" / "postmaster.pid").exists()
    assert not (fresh_data_dir / "pgdata").exists()  # not even initialised
    assert postgres_processes(fresh_data_dir) == []
    assert (fresh_data_dir / "secret_key").exists()  # secrets may be made; servers may not


def test_the_first_connection_starts_it_whether_django_or_dbos_asks_first(fresh_data_dir):
    pid_file = fresh_data_dir / "pgdata" / "postmaster.pid"

    out = python(
        fresh_data_dir,
        "import django; django.setup(); from django.db import connection; "
        "cur = connection.cursor(); cur.execute('SELECT current_database()'); "
        "print(cur.fetchone()[0])",
    )
    assert out == "deskhand"
    assert pid_file.exists() and postgres_processes(fresh_data_dir)

    python(fresh_data_dir, "from deskhand.infra import embedded_pg; embedded_pg.stop()")
    assert not pid_file.exists() and postgres_processes(fresh_data_dir) == []

    # The worker's path: DBOS's configuration is built before anything used Django.
    out = python(
        fresh_data_dir,
        "import django; django.setup(); from deskhand.engine.bootstrap import config; "
        "import sqlalchemy as sa; url = config('lazy-probe')['system_database_url']; "
        "e = sa.create_engine(url); print(e.connect().execute(sa.text('SELECT 1')).scalar())",
    )
    assert out == "1"
    assert pid_file.exists() and postgres_processes(fresh_data_dir)


def test_the_demos_data_lives_in_the_checkouts_own_dot_deskhand_folder(monkeypatch):
    """README: the embedded Postgres and the local secrets live under ``.deskhand/`` at the
    checkout's root, wherever the module that knows it sits in the package tree."""
    from deskhand.infra import embedded_pg

    monkeypatch.delenv("DESKHAND_DATA_DIR", raising=False)
    assert embedded_pg.data_dir() == ROOT / ".deskhand"
