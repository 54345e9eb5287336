"""Fixtures for the replay tests: providers that remember what they were sent, and the CLI."""

from __future__ import annotations

import copy
import io
from collections.abc import Iterator
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from agent.providers import clear_overrides, install_override
from agent.providers.base import ModelReply, Provider
from agent.providers.policy import PolicyProvider
from agent.providers.scripted import ScriptedProvider


class Recording:
    """Wraps a provider and keeps a copy of every conversation (and system prompt) it was sent."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.name, self.model = inner.name, inner.model
        self.seen: list[list[dict[str, Any]]] = []
        self.systems: list[str] = []
        self.tools: list[list[dict[str, Any]]] = []

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        self.seen.append(copy.deepcopy(messages))
        self.systems.append(system)
        self.tools.append(copy.deepcopy(tools))
        return self.inner.complete(system=system, messages=messages, tools=tools)


@pytest.fixture
def provide() -> Iterator[Any]:
    """``provide(turns_or_provider, run_id="*")`` installs a recording provider in this process."""

    def install(what: Any = None, run_id: str = "*") -> Recording:
        inner = (
            what
            if hasattr(what, "complete")
            else (ScriptedProvider(what) if what is not None else PolicyProvider())
        )
        recording = Recording(inner)
        install_override(run_id, recording)
        return recording

    clear_overrides()
    yield install
    clear_overrides()


def replay_cmd(*args: str) -> tuple[int, str]:
    """Run ``manage.py replay`` in-process: (exit code, stdout or the error sentence)."""
    out = io.StringIO()
    try:
        call_command("replay", *args, stdout=out)
    except CommandError as exc:
        return exc.returncode or 1, str(exc)
    except SystemExit as exc:
        return int(exc.code or 0), out.getvalue()
    return 0, out.getvalue()


def every_table() -> dict[str, tuple[int, str]]:
    """Every table of the ``public`` and ``dbos`` schemas: its row count and a checksum of its rows.

    The checksum is the md5 of the rows' md5s in sorted order, so it changes when any row is
    added, removed or changed, and not with the order Postgres happens to return them in.
    """
    found: dict[str, tuple[int, str]] = {}
    with connection.cursor() as cur:
        cur.execute(
            "SELECT schemaname, tablename FROM pg_tables"
            " WHERE schemaname IN ('public', 'dbos') ORDER BY 1, 2"
        )
        for schema, table in cur.fetchall():
            cur.execute(
                "SELECT count(*), coalesce(md5(string_agg(md5(t::text), '' ORDER BY md5(t::text))),"
                f' \'\') FROM "{schema}"."{table}" t'
            )
            count, digest = cur.fetchone()
            found[f"{schema}.{table}"] = (count, digest)
    return found
