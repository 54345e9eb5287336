"""The NW-1 shaped workload: six model turns, six tool calls, one approval.

Four reads (the ticket, the order, two searches), then a refund (one approval) beside a tag, then the closing words — NW-1's
shape on load tickets (``tests.devtools.load.world``), so every run starts clean and
refunds 1.00 of the large ``LOAD-ORDER``. Deterministic like every scripted model: turn
N answers a history holding N assistant messages.

``memory_runs`` drives it on ``MemoryRuntime`` (no durability) with the approval decided
the moment the gate waits; ``breakdown`` counts each step's CPU, statements and
transactions (docs/benchmarks.md, `--loop`).
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from agent.providers.base import ModelReply
from agent.providers.scripted import ScriptedProvider, call, say
from tests.devtools.load.world import ORDER, REFUND_CENTS

PREFIX = "NWONE-"  # the load tickets this workload runs on
MODEL_TURNS, TOOL_CALLS = 6, 6
STEPS = MODEL_TURNS + TOOL_CALLS  # the denominator of every per-step figure


def script(reference: str) -> list[Any]:
    return [
        [call("get_ticket", reference=reference)],
        [call("get_order", reference=ORDER)],
        [call("search_kb", query="refund policy damaged goods")],
        [call("search_kb", query="how long does a refund take")],
        [
            call(
                "issue_refund",
                order_reference=ORDER,
                amount_cents=REFUND_CENTS,
                reason="bench: the NW-1 shaped refund",
            ),
            call("tag_ticket", reference=reference, tags=["refund"]),
        ],
        [say("Refunded 1.00 and tagged the ticket.")],
    ]


class NW1Provider:
    """One provider for every NW-1 shaped run: the script is keyed by the ticket's reference."""

    name = "scripted"
    model = "scripted-nw1"

    def __init__(self) -> None:
        self._scripts: dict[str, ScriptedProvider] = {}

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        opening = messages[0].get("content") if messages else ""
        text = opening if isinstance(opening, str) else str(opening)
        found = re.search(r"Ticket reference:\s*([A-Z]+-\d+)", text)
        ref = found.group(1) if found else "?"
        if ref not in self._scripts:
            self._scripts[ref] = ScriptedProvider(script(ref), model=self.model)
        return self._scripts[ref].complete(system=system, messages=messages, tools=tools)


def tickets(n: int, start: int) -> list[Any]:
    from tests.devtools.load.world import load_world

    return load_world(n, start=start, prefix=PREFIX)


def _approve_pending(run_id: str) -> None:
    """What a person's approval leaves in the approval row, written directly (no DBOS here)."""
    from django.db.models import F
    from django.utils import timezone

    from approvals.models import Approval

    Approval.objects.filter(run_id=run_id, status="pending").update(
        status="approved",
        decided_at=timezone.now(),
        approved_arguments=F("arguments"),
        approved_hash=F("args_hash"),
    )


def memory_runs(n: int, start: int) -> dict[str, Any]:
    """``n`` NW-1 shaped runs on ``MemoryRuntime``, one after another: process CPU and wall
    per step (the approval's own write is left out of neither: it is one UPDATE)."""
    from django.db import close_old_connections

    from agent import providers
    from agent.loop import run_agent
    from agent.run.services import run_create
    from agent.runtime import MemoryRuntime
    from tests.devtools.load.world import owners

    class Approving(MemoryRuntime):
        async def wait(self, topic: str, until: Any) -> Any | None:
            await asyncio.to_thread(_approve_pending, self.run_id)
            return await super().wait(topic, until)

    who = owners()
    runs = [run_create(ticket=t, user=who[t.merchant_id]) for t in tickets(n, start)]
    before = dict(providers._overrides)
    providers.install_override("*", NW1Provider())
    cpu: list[float] = []
    wall: list[float] = []
    statuses: list[str] = []

    async def all_runs() -> None:
        # One event loop, so its step threads (and their persistent connections) carry
        # over from run to run as a worker's do.
        for run in runs:
            rt = Approving(str(run.pk), after_step=close_old_connections)
            c0, w0 = time.process_time(), time.perf_counter()
            out = await run_agent(rt)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
            statuses.append(out.status)

    try:
        asyncio.run(all_runs())
    finally:  # whatever was installed before (the bench's own) stays
        providers.clear_overrides()
        for key, provider in before.items():
            providers.install_override(key, provider)
    return {"cpu_s": cpu, "wall_s": wall, "statuses": statuses}


class _Tally:
    """What each step of the NW-1 shaped runs cost on the client's side, by step name:
    CPU of the step's thread, SQL statements, server transactions (a statement outside
    any ``atomic`` block is one; an ``atomic`` block that commits is one) and the rows
    each table was written (INSERT / UPDATE / DELETE statements, by table)."""

    WRITE = re.compile(r'^\s*(INSERT INTO|UPDATE|DELETE FROM)\s+"?([a-z_0-9]+)"?', re.I)

    def __init__(self) -> None:
        import collections
        import threading

        self.local = threading.local()
        self.cpu: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)
        self.statements: dict[str, int] = collections.defaultdict(int)
        self.transactions: dict[str, int] = collections.defaultdict(int)
        self.writing: dict[str, int] = collections.defaultdict(int)  # took a transaction id
        self.writes: dict[str, int] = collections.defaultdict(int)

    def name(self) -> str:
        return getattr(self.local, "name", "outside steps")

    def install(self) -> Any:
        """Patch the runtime and Django's cursor and commit; returns the undo."""
        from django.db.backends import utils
        from django.db.backends.base.base import BaseDatabaseWrapper

        from agent.runtime import MemoryRuntime

        tally = self
        execute, commit, step = (
            utils.CursorWrapper._execute,
            BaseDatabaseWrapper.commit,
            MemoryRuntime.step,
        )

        def counted_execute(cursor: Any, sql: str, params: Any, *rest: Any) -> Any:
            kind = tally.name()
            if not sql.lstrip().upper().startswith(("SAVEPOINT", "RELEASE")):
                tally.statements[kind] += 1
                if not cursor.db.in_atomic_block:
                    tally.transactions[kind] += 1
                    if tally.WRITE.match(sql) or "FOR UPDATE" in sql.upper():
                        tally.writing[kind] += 1
            m = tally.WRITE.match(sql)
            if m:
                tally.writes[f"{m.group(1).split()[0].lower()} {m.group(2)}"] += 1
            return execute(cursor, sql, params, *rest)

        def counted_commit(conn: Any) -> Any:
            tally.transactions[tally.name()] += 1
            with conn.connection.cursor() as cur:
                cur.execute("SELECT pg_current_xact_id_if_assigned() IS NOT NULL")
                row = cur.fetchone()
            tally.writing[tally.name()] += 1 if row and row[0] else 0
            return commit(conn)

        async def timed_step(rt: Any, name: str, fn: Any, *args: Any) -> Any:
            kind = "tool.*" if str(name).startswith("tool.") else str(name)

            def body(*a: Any) -> Any:
                tally.local.name = kind
                c0 = time.thread_time()
                try:
                    return fn(*a)
                finally:
                    tally.cpu[kind] += time.thread_time() - c0
                    tally.calls[kind] += 1
                    tally.local.name = "outside steps"

            return await step(rt, name, body, *args)

        utils.CursorWrapper._execute = counted_execute  # type: ignore[method-assign]
        BaseDatabaseWrapper.commit = counted_commit  # type: ignore[method-assign]
        MemoryRuntime.step = timed_step  # type: ignore[method-assign]

        def undo() -> None:
            utils.CursorWrapper._execute = execute  # type: ignore[method-assign]
            BaseDatabaseWrapper.commit = commit  # type: ignore[method-assign]
            MemoryRuntime.step = step  # type: ignore[method-assign]

        return undo


def breakdown(n: int, start: int) -> dict[str, Any]:
    """Per step name, over ``n`` NW-1 shaped runs on ``MemoryRuntime``, per run: calls, CPU ms
    of the step's own thread, SQL statements, server transactions and those of them that
    wrote (took a transaction id); and rows written per
    run by table. The approval's direct UPDATE (the bench standing in for a person) is
    counted under ``outside steps``, as is creating the runs."""
    tally = _Tally()
    undo = tally.install()
    try:
        memory_runs(n, start)
    finally:
        undo()
    kinds = sorted(set(tally.calls) | set(tally.statements), key=lambda k: -tally.cpu.get(k, 0))
    return {
        "steps": {
            k: {
                "calls": round(tally.calls.get(k, 0) / n, 1),
                "cpu_ms": round(tally.cpu.get(k, 0.0) * 1000 / n, 2),
                "statements": round(tally.statements.get(k, 0) / n, 1),
                "transactions": round(tally.transactions.get(k, 0) / n, 1),
                "writing": round(tally.writing.get(k, 0) / n, 1),
            }
            for k in kinds
        },
        "writes": {k: round(v / n, 1) for k, v in sorted(tally.writes.items())},
    }


def loop_figures(runs: int, profile: str | None = None) -> dict[str, Any]:
    """``bench --loop``: Deskhand's own work per step, alone — ``runs`` NW-1 shaped runs on
    ``MemoryRuntime`` after one warm-up run, no executor in the process (so no background
    polls in the figure), medians per step; then the per-step breakdown over two more runs.
    ``profile``: cProfile the measured runs (every thread) into that pstats file."""
    import os

    from tests.devtools.bench.probes import median

    memory_runs(1, start=800_000)  # imports, prepared statements, the prompt version row
    profiler = None
    if profile:
        import cProfile

        # The process's CPU clock, not the wall's: time waiting on Postgres is not ours.
        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
    try:
        got = memory_runs(runs, start=800_001)
    finally:
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)
    if set(got["statuses"]) != {"succeeded"}:
        raise RuntimeError(f"an NW-1 shaped run did not complete: {got['statuses']}")
    return {
        "agent_cpu_per_step_ms": round(median(got["cpu_s"]) * 1000 / STEPS, 3),
        "wall_per_step_ms": round(median(got["wall_s"]) * 1000 / STEPS, 3),
        "runs": runs,
        "profiled": bool(profile),
        "load": round(os.getloadavg()[0], 1),
        "steps": breakdown(2, start=800_001 + runs)["steps"],
    }
