"""Shared fixtures: real Postgres (embedded or DATABASE_URL), two seeded tenants.

Tests that need workflows to run use the ``dbos_executor`` fixture (in-process
DBOS pointed at the test database) or the ``worker_process`` fixture (a real
``manage.py worker`` subprocess that a test may SIGKILL).
"""

from __future__ import annotations

import os

import pytest
from django.core.management import call_command

pytest_plugins = ["tests.fixtures.database", "tests.fixtures.dbos"]

# The suite never talks to the real API, whatever the shell exports: worker subprocesses
# inherit this environment, and the settings (already read) are reset per test below.
# A test that wants the Anthropic provider points it at the strict double explicitly.
for _name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
    os.environ.pop(_name, None)


@pytest.fixture(autouse=True)
def no_real_api(settings):
    settings.ANTHROPIC_API_KEY = ""
    settings.ANTHROPIC_BASE_URL = None


@pytest.fixture
def seeded(db):
    """The demo world: Northwind and Lumen, their people, orders, tickets and KB."""
    call_command("seed", "--reset", verbosity=0)


@pytest.fixture
def tseeded(transactional_db):
    """The demo world in a test whose data other threads and processes must see."""
    call_command("seed", "--reset", verbosity=0)


# --- the suite leaves the work tree as it found it -----------------------------------------


def _tree_state() -> dict[str, str] | None:
    """Each changed or untracked (not ignored) path with a hash of its content; None off git."""
    import hashlib
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain=v1", "-z", "--untracked-files=all"],
            cwd=root,
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    state = {}
    for entry in filter(None, done.stdout.decode(errors="replace").split("\0")):
        path = entry[3:]
        try:
            digest = hashlib.sha1((root / path).read_bytes()).hexdigest()
        except OSError:
            digest = "gone"
        state[path] = digest
    return state


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist, the controller starts the embedded Postgres once, before the workers
    (each of which creates its own ``test_*_gwN`` database on it) race to start it."""
    if os.environ.get("DATABASE_URL") or hasattr(config, "workerinput"):
        return
    if getattr(config.option, "numprocesses", None):
        from deskhand.infra import embedded_pg

        embedded_pg.ensure_running()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` first (otherwise in file order): xdist's ``load`` scheduler
    hands out the first items round-robin, so the long ones start at once, side by side,
    instead of one of them starting last and holding the whole run up."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_sessionstart(session: pytest.Session) -> None:
    # Under `make test` only: a developer editing files while running pytest by hand would
    # otherwise see the session fail for their own edits.
    # Only in the controller under xdist: a worker's snapshot would catch another worker's
    # test between writing a scratch file and removing it.
    if os.environ.get("DESKHAND_CHECK_TREE") and not hasattr(session.config, "workerinput"):
        session.config.stash[_TREE] = _tree_state()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """``make test`` must leave ``git status`` as it was: fail the session if a test wrote
    into the tree (screenshots and docs are written only by their own make targets)."""
    before = session.config.stash.get(_TREE, None)
    after = _tree_state()
    if before is None or after is None:
        return
    changed = sorted(p for p in after.keys() | before.keys() if after.get(p) != before.get(p))
    if changed:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                "the tests changed files in the work tree (they must leave git status clean): "
                + ", ".join(changed[:20]),
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_TREE = pytest.StashKey[dict[str, str] | None]()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """The test databases commit without waiting for their WAL to reach the disk.

    Per database (``ALTER DATABASE``), so the demo's database on the same embedded server
    keeps full durability. What the suite proves survives a *process* killed at any point
    — a worker's SIGKILL, a backend terminated — and a committed transaction survives
    that either way; only a crash of Postgres itself or of the machine could lose the last
    commits, and the tests that restart Postgres stop it cleanly, which flushes them.
    Every DBOS step is one or two commits, each of which would otherwise wait for a flush.
    """
    from django.db import connections

    with django_db_blocker.unblock():
        for alias in connections:
            conn = connections[alias]
            with conn.cursor() as cur:
                name = conn.ops.quote_name(conn.settings_dict["NAME"])
                cur.execute(f"ALTER DATABASE {name} SET synchronous_commit = off")
            conn.close()
    yield
