"""DBOS bootstrap: one place that knows how Deskhand talks to DBOS.

Process model: only ``manage.py worker`` launches DBOS (it executes
workflows, with a stable executor id). The web process and CLI commands
enqueue, send and cancel through a ``DBOSClient`` and never launch a second
executor. DBOS's system tables live in the ``dbos`` schema of the *Django*
database — checked at start-up, so a misconfiguration can never fall back to
DBOS's default SQLite file.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import yaml
from dbos import DBOS, DBOSClient, DBOSConfig, DBOSPortableJSONSerializer
from django.conf import settings
from django.db import connections

CONFIG_FILE = Path(settings.BASE_DIR) / "dbos-config.yaml"


class DBOSSetupError(RuntimeError):
    pass


def app_name() -> str:
    data = yaml.safe_load(CONFIG_FILE.read_text())
    return str(data["name"])


def database_url(alias: str = "default") -> str:
    """A SQLAlchemy URL for the Django database (read at call time: tests switch to test_*)."""
    sd = connections[alias].settings_dict
    host = sd.get("HOST") or ""
    query: dict[str, str] = {}
    url_host: str | None = host or None
    if host.startswith("/"):
        query["host"] = host
        url_host = None
    url = sa.URL.create(
        "postgresql+psycopg",
        username=sd.get("USER") or None,
        password=sd.get("PASSWORD") or None,
        host=url_host,
        port=int(sd["PORT"]) if sd.get("PORT") else None,
        database=sd["NAME"],
        query=query,
    )
    return url.render_as_string(hide_password=False)


def check_system_database(url: str, alias: str = "default") -> None:
    """Refuse to run unless DBOS's system database is the Django database."""
    if not url.startswith("postgresql"):
        raise DBOSSetupError(
            f"DBOS system database must be the Django Postgres database, not {url!r}"
        )
    name = connections[alias].settings_dict["NAME"]
    if sa.make_url(url).database != name:
        raise DBOSSetupError("DBOS system database differs from the Django database")


def config(executor_id: str, **overrides: Any) -> DBOSConfig:
    url = database_url()
    check_system_database(url)
    cfg: DBOSConfig = {
        "name": app_name(),
        "system_database_url": url,
        "application_version": settings.DESKHAND_APP_VERSION,
        "executor_id": executor_id,
        "serializer": DBOSPortableJSONSerializer(),
        "run_migrations": True,
        "notification_listener_polling_interval_sec": 0.1,
        # Parked runs hold no thread (async recv); the cap keeps the pool bounded.
        "max_executor_threads": int(os.environ.get("DESKHAND_MAX_EXECUTOR_THREADS", "32")),
        "sys_db_pool_size": int(os.environ.get("DESKHAND_SYS_DB_POOL", "10")),
        "enable_otlp": False,
    }
    cfg.update(overrides)  # type: ignore[typeddict-item]
    return cfg


def register_queues(poll_sec: float | None = None) -> None:
    # Partitioned by merchant; the cap is generous because a run parked at the
    # gate still counts as in flight, and thousands may be parked at once.
    DBOS.register_queue(
        settings.DESKHAND_QUEUE,
        partition_concurrency=int(os.environ.get("DESKHAND_MERCHANT_CONCURRENCY", "10000")),
        polling_interval_sec=poll_sec if poll_sec is not None else settings.DESKHAND_QUEUE_POLL_SEC,
        on_conflict="always_update",
    )


def launch_executor(executor_id: str, **overrides: Any) -> None:
    """Launch DBOS in this process as the executor ``executor_id`` (worker and tests only)."""
    import agent.workflow  # noqa: F401  (registers the workflow before launch)
    from approvals.sweep import register_schedule  # registers the escalation sweep before launch

    DBOS(config=config(executor_id, **overrides))
    DBOS.launch()
    register_queues()
    register_schedule()


def migrate_system_schema(alias: str = "default") -> None:
    """Create or upgrade DBOS's schema in the Django database (from a Django migration)."""
    url = database_url(alias)
    check_system_database(url, alias)
    DBOS.migrate(url)


_client_lock = threading.Lock()
_clients: dict[str, DBOSClient] = {}


def client() -> DBOSClient:
    """The DBOS client for web and CLI processes: enqueue, send, cancel; never execute."""
    url = database_url()
    check_system_database(url)
    with _client_lock:
        if url not in _clients:
            _clients[url] = DBOSClient(
                system_database_url=url,
                serializer=DBOSPortableJSONSerializer(),
                application_name=app_name(),
                system_database_pool_size=4,
            )
        return _clients[url]


def close_clients() -> None:
    """Release client connections (tests must, or the test database cannot be dropped)."""
    with _client_lock:
        for c in _clients.values():
            c.destroy()
        _clients.clear()
