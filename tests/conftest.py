"""Shared fixtures: real Postgres (embedded or DATABASE_URL), two seeded tenants.

Tests that need workflows to run use the ``dbos_executor`` fixture (in-process
DBOS pointed at the test database) or the ``worker_process`` fixture (a real
``manage.py worker`` subprocess that a test may SIGKILL).
"""

from __future__ import annotations

import pytest
from django.core.management import call_command

pytest_plugins = ["tests.fixtures.dbos"]


@pytest.fixture
def seeded(db):
    """The demo world: Northwind and Lumen, their people, orders, tickets and KB."""
    call_command("seed", "--reset", verbosity=0)


@pytest.fixture
def tseeded(transactional_db):
    """The demo world in a test whose data other threads and processes must see."""
    call_command("seed", "--reset", verbosity=0)
