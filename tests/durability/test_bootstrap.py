"""The bootstrap never lets DBOS keep its state anywhere but the Django database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from urllib.parse import urlencode

import pytest
import sqlalchemy as sa
from django.db import connection

from deskhand.engine.bootstrap import config
from deskhand.infra.dbos.client import DBOSSetupError, check_system_database, database_url
from tests.fixtures.dbos import ROOT, test_database_url


def test_dbos_system_database_is_the_django_database(db):
    cfg = config("any-executor")
    assert cfg["system_database_url"] == database_url()
    assert cfg["application_version"]  # pinned, so a restarted worker recovers its runs
    assert cfg["serializer"].name() == "portable_json"
    check_system_database(database_url())  # the real configuration passes the real check


@pytest.mark.parametrize(
    "url",
    ["sqlite:///deskhand.sqlite", "postgresql+psycopg://postgres@127.0.0.1:1/some_other_db"],
)
def test_a_system_database_other_than_djangos_is_refused(db, url):
    with pytest.raises(DBOSSetupError):
        check_system_database(url)


@pytest.fixture
def other_database(db):
    """Another database on the server Django uses (created outside the test transaction)."""
    name = f"deskhand_other_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(database_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(database_url()).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


def test_another_database_on_the_same_server_is_refused(other_database):
    with pytest.raises(DBOSSetupError, match="is not the database Django uses") as refused:
        check_system_database(other_database)
    assert sa.make_url(other_database).database in str(refused.value)
    assert connection.settings_dict["NAME"] in str(refused.value)


OPTIONS = {
    "application_name": "deskhand-x",
    "connect_timeout": "7",
    "sslmode": "disable",
    "options": "-c statement_timeout=4321",
    "target_session_attrs": "any",
}

PROBE = """
import json, django
django.setup()
import sqlalchemy as sa
from django.db import connection
from deskhand.infra.dbos.client import check_system_database, client, close_clients, database_url

ME = "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"
url = database_url()
check_system_database(url)
with connection.cursor() as cur:
    cur.execute(ME)
    django_name = cur.fetchone()[0]
    cur.execute("SHOW statement_timeout")
    django_timeout = cur.fetchone()[0]
engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
with engine.connect() as conn:
    dbos_name = conn.execute(sa.text(ME)).scalar()
    dbos_timeout = conn.execute(sa.text("SHOW statement_timeout")).scalar()
# DBOS's own pool (the client's): DBOS names it, every other option applies.
with client()._sys_db.engine.connect() as conn:
    pool_name = conn.execute(sa.text(ME)).scalar()
    pool_timeout = conn.execute(sa.text("SHOW statement_timeout")).scalar()
close_clients()
print(json.dumps({
    "pool_name": pool_name, "pool_timeout": pool_timeout,
    "django_options": {k: str(v) for k, v in connection.settings_dict["OPTIONS"].items()},
    "dbos_query": dict(sa.make_url(url).query),
    "django_name": django_name, "dbos_name": dbos_name,
    "django_timeout": django_timeout, "dbos_timeout": dbos_timeout,
}))
"""


def test_database_url_query_options_reach_django_and_dbos(db):
    env = {**os.environ, "DATABASE_URL": f"{test_database_url()}?{urlencode(OPTIONS)}"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    for key, value in OPTIONS.items():
        assert seen["django_options"][key] == value, key
        assert seen["dbos_query"][key] == value, key
    # Both connections really carry them: the server reports the name and the timeout.
    assert seen["django_name"] == seen["dbos_name"] == "deskhand-x"
    assert seen["django_timeout"] == seen["dbos_timeout"] == seen["pool_timeout"] == "4321ms"
    # DBOS labels its pools itself, over the URL's application_name.
    assert seen["pool_name"] == "dbos_transact_client"


@pytest.mark.parametrize(
    "argv",
    [
        ["worker", "--executor-id", "unmigrated-probe"],
        ["cancel", str(uuid.UUID(int=0)), "--as", "owner@northwind.test"],
    ],
    ids=["worker", "cancel"],
)
def test_a_command_on_a_database_nobody_migrated_says_run_migrate_in_one_sentence(
    other_database, argv
):
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["DATABASE_URL"] = other_database.replace("postgresql+psycopg://", "postgresql://", 1)
    done = subprocess.run(
        [sys.executable, "manage.py", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "run `python manage.py migrate` first" in done.stderr, done.stderr[-2000:]
