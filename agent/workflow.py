"""The DBOS workflow: the only module that says which calls are durable.

``deskhand.run`` is an async workflow whose id is the run id. It reads the id
from ``DBOS.workflow_id`` — never from its arguments — so a fork writes into
its own run. Steps:

1. ``run.begin``      — mark running; the prompt and fence token
2. ``bounds.check``   — before every model call
3. ``model``          — one provider call, recorded with its cost
4. ``tool.<name>``    — one tool call (reads and reversible tools)
5. ``ledger.lookup`` / ``gate.request`` / ``gate.read`` / ``gate.resume`` — the
   approval gate, with ``DBOS.recv`` waits in between (async: no thread held)
6. ``tool.<irreversible>`` — the approved effect, through the ledger; never retried
7. ``notes.record``   — staff guidance taken from ``DBOS.recv`` on "steer"
8. ``run.finish`` / ``run.fail`` — the truthful terminal state

Django code in steps runs in a worker thread (``asyncio.to_thread``), never on
the event loop that thousands of parked runs share.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any, TypeVar

from dbos import DBOS, StepOptions
from django.db import close_old_connections

from agent import faults
from agent.loop import run_agent
from agent.runs import WORKFLOW_NAME, run_fail
from agent.runtime import current_step_id

T = TypeVar("T")

# Steps that only read, or whose writes are idempotent upserts, may retry on a
# transient error; an irreversible tool step never is (the ledger would catch
# a repeat, but a person approved one attempt, not three).
_RETRYABLE_PREFIXES = ("run.begin", "bounds.check", "model", "gate.read", "ledger.lookup")


def _in_thread[R](name: str, fn: Callable[..., R], *args: Any) -> R:
    close_old_connections()
    current_step_id.set(DBOS.step_id)
    try:
        faults.at("before_step", name)
        result = fn(*args)
        # Between the step's own commit and DBOS's checkpoint of its output.
        faults.at("after_step", name)
        return result
    finally:
        close_old_connections()


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


class DBOSRuntime:
    """The runtime protocol, answered by DBOS."""

    def __init__(self, run_id: str) -> None:
        self._run_id = run_id

    @property
    def run_id(self) -> str:
        return self._run_id

    def step_id(self) -> int | None:
        return DBOS.step_id

    async def step(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        async def body() -> T:
            return await asyncio.to_thread(_in_thread, name, fn, *args)

        retry = name.startswith(_RETRYABLE_PREFIXES)
        options: StepOptions = {
            "name": name,
            "retries_allowed": retry,
            "max_attempts": 3,
            "interval_seconds": 1.0,
        }
        return await DBOS.run_step_async(options, body)

    async def wait(self, topic: str, timeout_seconds: float) -> Any | None:
        return await DBOS.recv_async(topic, timeout_seconds=max(0.0, timeout_seconds))

    async def drain(self, topic: str) -> list[Any]:
        out = []
        while (msg := await DBOS.recv_async(topic, timeout_seconds=0)) is not None:
            out.append(msg)
        return out

    async def now(self) -> dt.datetime:
        iso = await DBOS.run_step_async({"name": "clock"}, _now)
        return dt.datetime.fromisoformat(iso)


@DBOS.workflow(name=WORKFLOW_NAME, max_recovery_attempts=10_000)
async def run_workflow() -> dict[str, Any]:
    """Work one ticket. Bounds are Deskhand's own; no DBOS workflow timeout is used,
    because it would count time spent waiting for a person and cancel without a summary.
    A run parked through many restarts is not dead-lettered (max_recovery_attempts)."""
    run_id = DBOS.workflow_id
    assert run_id is not None
    rt = DBOSRuntime(run_id)
    try:
        return await run_agent(rt)
    except Exception as exc:
        if type(exc).__name__ in (
            "DBOSWorkflowCancelledError",
            "DBOSAwaitedWorkflowCancelledError",
        ):
            raise
        # Record the failure durably, then re-raise so DBOS's own status agrees.
        await rt.step("run.fail", run_fail, run_id, f"{type(exc).__name__}: {exc}"[:2000])
        raise
