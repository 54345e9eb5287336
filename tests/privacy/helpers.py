"""Looking for a person in every column that could hold their words."""

from __future__ import annotations

from django.db import connection

# Every column type a word can sit in: text, varchar, json, jsonb and arrays of them.
TEXT_TYPES = ("text", "character varying", "character", "json", "jsonb", "ARRAY")


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


def where_found(needles: list[str], schemas: tuple[str, ...] = ("public", "dbos")) -> list[str]:
    """``schema.table.column: needle`` for every column holding any needle (case-insensitive)."""
    hits = []
    columns = text_columns(schemas)
    assert len(columns) > 40, "the search must cover the project's tables and DBOS's"
    with connection.cursor() as cur:
        for schema, table, column in columns:
            for needle in needles:
                cur.execute(
                    f'SELECT count(*) FROM "{schema}"."{table}" WHERE "{column}"::text ILIKE %s',
                    [f"%{needle}%"],
                )
                if cur.fetchone()[0]:
                    hits.append(f"{schema}.{table}.{column}: {needle}")
    return hits
