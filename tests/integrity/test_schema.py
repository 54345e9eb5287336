"""The database holds the schema the models declare, and the hot tables carry no spare index.

A migration can say one thing and do another: Django's own ALTER of a foreign key's
``db_index`` drops every index on that column it finds, and once took the partial unique
index ``one_open_run_per_ticket`` with it (LESSONS #52) — the rule that a ticket has one open
run, gone without a failing test. So the declared indexes and constraints are read back
from Postgres. And every index on the tables each step writes is written again per step
(issue 30): one that repeats the leading columns of another only costs WAL.
"""

from __future__ import annotations

import pytest
from django.apps import apps
from django.db import connection

PRODUCT_APPS = ("agent", "approvals", "desk", "mail", "apikeys", "edge", "fleet")
# Written on every step of every run: a step row, its run's totals, DBOS's checkpoint.
HOT_TABLES = ("agent_run", "agent_step")


def _constraints(table: str) -> dict[str, dict]:
    with connection.cursor() as cur:
        return connection.introspection.get_constraints(cur, table)


@pytest.mark.django_db
def test_every_index_and_constraint_a_model_declares_is_in_the_database():
    missing = []
    for label in PRODUCT_APPS:
        for model in apps.get_app_config(label).get_models():
            declared = [i.name for i in model._meta.indexes]
            declared += [c.name for c in model._meta.constraints]
            present = _constraints(model._meta.db_table)
            missing += [f"{model._meta.db_table}.{n}" for n in declared if n not in present]
    assert missing == []


@pytest.mark.django_db
def test_one_open_run_per_ticket_is_a_partial_unique_index():
    found = _constraints("agent_run")["one_open_run_per_ticket"]
    assert found["unique"] and found["columns"] == ["ticket_id"]
    with connection.cursor() as cur:
        cur.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'one_open_run_per_ticket'")
        (definition,) = cur.fetchone()
    assert "WHERE" in definition and "awaiting_customer" in definition


@pytest.mark.django_db
@pytest.mark.parametrize("table", HOT_TABLES)
def test_no_index_on_a_hot_table_repeats_the_leading_columns_of_another(table):
    with connection.cursor() as cur:
        cur.execute(
            "SELECT i.indexrelid::regclass::text, i.indkey::int2[]::int[], i.indpred IS NOT NULL,"
            " i.indisunique FROM pg_index i WHERE i.indrelid = %s::regclass",
            [table],
        )
        rows = cur.fetchall()
    spare = [
        (name, other)
        for name, cols, partial, unique in rows
        if not partial and not unique
        for other, other_cols, other_partial, _ in rows
        if other != name and not other_partial and other_cols[: len(cols)] == cols
    ]
    assert spare == []


@pytest.mark.django_db
def test_a_runs_row_has_room_on_its_page_for_its_next_version():
    with connection.cursor() as cur:
        cur.execute("SELECT reloptions FROM pg_class WHERE relname = 'agent_run'")
        (options,) = cur.fetchone()
    assert "fillfactor=70" in (options or [])
