"""``bench --loop --sites``: where an NW-1 run's SQL CPU goes, by the line of ours that asked.

Every statement's client CPU (Django's cursor through psycopg) and every queryset's compile
(``SQLCompiler.as_sql``) is charged to the first two frames of product code on the stack, on
the thread that ran it (``time.thread_time``), over a few runs on ``MemoryRuntime``. It is
how the third pass of issue 30 found its targets (docs/benchmarks.md, `--loop`): a
line with compile CPU builds the same SQL every run; a line with many statements asks
questions another statement could answer. Development only: it patches two Django methods
for the duration and puts them back.
"""

from __future__ import annotations

import collections
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

_ROOT = str(Path(__file__).resolve().parents[3]) + "/"
_OURS = ("agent/", "approvals/", "deskhand/")
_PLUMBING = ("deskhand/domain/desk/rows.py",)  # the statement-built-once reader: charge its caller


def _site() -> str:
    frame: FrameType | None = sys._getframe(2)
    chain: list[str] = []
    while frame is not None and len(chain) < 2:
        name = frame.f_code.co_filename
        if name.startswith(_ROOT):
            rel = name[len(_ROOT) :]
            if rel.startswith(_OURS) and not rel.startswith(_PLUMBING):
                chain.append(f"{rel}:{frame.f_lineno} {frame.f_code.co_name}")
        frame = frame.f_back
    return " < ".join(chain) or "(no product frame)"


def sql_sites(runs: int, start: int, top: int = 15) -> dict[str, Any]:
    """Per NW-1 run: SQL CPU, statements, querysets compiled, and the ``top`` call sites."""
    from django.db.backends import utils
    from django.db.models.sql import compiler

    from tests.devtools.bench.nw1 import memory_runs

    tally: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    compiles = [0]
    wrapper = utils.CursorWrapper
    execute, as_sql = getattr(wrapper, "_execute"), compiler.SQLCompiler.as_sql  # noqa: B009

    def timed_execute(self: Any, sql: Any, params: Any, *rest: Any) -> Any:
        t = time.thread_time()
        try:
            return execute(self, sql, params, *rest)
        finally:
            row = tally[_site()]
            row[0] += 1
            row[2] += time.thread_time() - t

    def timed_as_sql(self: Any, *args: Any, **kwargs: Any) -> Any:
        t = time.thread_time()
        try:
            return as_sql(self, *args, **kwargs)
        finally:
            tally[_site()][1] += time.thread_time() - t
            compiles[0] += 1

    memory_runs(1, start=start)  # warm: imports, statements built once, the prompt version
    setattr(wrapper, "_execute", timed_execute)  # noqa: B010
    compiler.SQLCompiler.as_sql = timed_as_sql  # type: ignore[method-assign]
    try:
        tally.clear()
        compiles[0] = 0
        memory_runs(runs, start=start + 1)
    finally:
        setattr(wrapper, "_execute", execute)  # noqa: B010
        compiler.SQLCompiler.as_sql = as_sql  # type: ignore[method-assign]
    per = 1000.0 / runs
    rows = sorted(tally.items(), key=lambda kv: -(kv[1][1] + kv[1][2]))
    return {
        "runs": runs,
        "sql_cpu_ms_per_run": round(sum(v[1] + v[2] for v in tally.values()) * per, 1),
        "statements_per_run": round(sum(v[0] for v in tally.values()) / runs, 1),
        "compiles_per_run": round(compiles[0] / runs, 1),
        "sites": [
            {
                "site": site,
                "statements": round(n / runs, 1),
                "compile_ms": round(c * per, 2),
                "execute_ms": round(e * per, 2),
            }
            for site, (n, c, e) in rows[:top]
        ],
    }
