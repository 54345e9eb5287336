"""Looking for a person in every column that could hold their words."""

from __future__ import annotations

from django.db import connection

# Every column type a word can sit in: text, varchar, json, jsonb, arrays of them, and bytes
# (a raw inbound message, an attachment).
TEXT_TYPES = ("text", "character varying", "character", "json", "jsonb", "ARRAY", "bytea")


def text_columns(schemas: tuple[str, ...]) -> list[tuple[str, str, str]]:
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT c.table_schema, c.table_name, c.column_name
            FROM information_schema.columns c
            JOIN information_schema.tables t
              ON t.table_schema = c.table_schema AND t.table_name = c.table_name
            WHERE c.table_schema = ANY(%s) AND t.table_type = 'BASE TABLE'
              AND c.data_type = ANY(%s)
            ORDER BY 1, 2, 3
            """,
            [list(schemas), list(TEXT_TYPES)],
        )
        return list(cur.fetchall())


def _bytea_columns(schemas: tuple[str, ...]) -> set[tuple[str, str, str]]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT table_schema, table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = ANY(%s) AND data_type = 'bytea'",
            [list(schemas)],
        )
        return set(cur.fetchall())


def where_found(needles: list[str], schemas: tuple[str, ...] = ("public", "dbos")) -> list[str]:
    """``schema.table.column: needle`` for every column holding any needle (case-insensitive)."""
    hits = []
    columns = text_columns(schemas)
    binary = _bytea_columns(schemas)
    assert len(columns) > 40, "the search must cover the project's tables and DBOS's"
    with connection.cursor() as cur:
        for schema, table, column in columns:
            for needle in needles:
                # Bytes are read as text where they are text (mail is mostly ASCII).
                value = (
                    f"""encode("{column}", 'escape')"""
                    if (schema, table, column) in binary
                    else f'"{column}"::text'
                )
                cur.execute(
                    f'SELECT count(*) FROM "{schema}"."{table}" WHERE {value} ILIKE %s',
                    [f"%{needle}%"],
                )
                if cur.fetchone()[0]:
                    hits.append(f"{schema}.{table}.{column}: {needle}")
    return hits
