"""The DBOS workflows of a run: the only module that says which calls are durable.

``deskhand.run`` is an async workflow whose id is the run id. It reads the id from
``DBOS.workflow_id`` — never from its arguments — so a fork writes into its own run. It
runs the engine-free loop (``agent.loop``) on ``DBOSRuntime``, which answers the runtime
protocol with DBOS. The steps, by their recorded names (``agent.runtime.StepName``):

1. ``run.begin``      — mark running; the prompt and fence token
2. ``model``          — one turn: staff notes taken from their table, the bounds check and
   one provider call, recorded with its cost (``agent.run.turns.turn``). A child workflow
   ``deskhand.limited_call`` on the provider's rate-limited queue runs it
   (``limited_step``), and a wait the API names is slept with ``DBOS.sleep_async`` before
   the turn is asked again.
3. ``tool.<name>``    — one tool call (reads and reversible tools)
4. ``gate.request`` / ``gate.resume`` — the approval gate (the ledger's answer, the
   request, then the decision read and settled), with ``DBOS.recv`` waits in between (async:
   no thread held).
5. ``tool.<irreversible>`` — the approved effect, through the ledger; never retried
6. ``run.finish`` / ``run.fail`` — the truthful terminal state

Django code in steps runs in a worker thread (``asyncio.to_thread``), never on the event
loop that thousands of parked runs share. Each step's output is checkpointed as its type's
JSON form and read back as the type (``agent.runtime.recorded``, ``agent.steps``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any, TypeVar

from dbos import DBOS, StepOptions
from django.conf import settings
from django.db import close_old_connections

from agent.loop import run_agent
from agent.models import Run
from agent.record import faults
from agent.replay.fork import limited_call_refuse, workflow_adopt
from agent.run.lifecycle import run_fail
from agent.run.turns import turn
from agent.runtime import RETRYABLE_STEPS, StepName, current_step_id, recorded
from deskhand.engine.queues import kick_queues, model_queue, queues_kicked_while_waiting
from deskhand.infra.crashpoints import Point
from deskhand.infra.dbos.names import LIMITED_CALL_WORKFLOW, RUN_WORKFLOW, limited_reply_topic
from deskhand.infra.fleet.lease import guard
from deskhand.infra.retry import STEP, dbos_step

T = TypeVar("T")

_CANCELLED = ("DBOSWorkflowCancelledError", "DBOSAwaitedWorkflowCancelledError")


class LimitedCallFailed(Exception):
    """The child workflow running a limited step raised; its error, as it said it."""


def _in_thread[R](name: str, fn: Callable[..., R], *args: Any, function_id: int | None = None) -> R:
    # No step body runs while this worker cannot prove it still owns its executor id
    # (deskhand.infra.fleet.lease): one that lost its lock waits here, or is stopped.
    guard()
    close_old_connections()
    # A limited call's step row names the run's checkpoint of the call, not the child's own.
    # Reset afterwards: a step body may run on a thread that later writes rows outside any
    # step (a test's main thread), which must not inherit this step's id.
    token = current_step_id.set(function_id if function_id is not None else DBOS.step_id)
    try:
        faults.at(Point.BEFORE_STEP, name)
        result = fn(*args)
        # Between the step's own commit and DBOS's checkpoint of its output.
        faults.at(Point.AFTER_STEP, name)
        return result
    finally:
        current_step_id.reset(token)
        close_old_connections()


_slots: dict[int, asyncio.Semaphore] = {}


def model_slot(merchant_id: int) -> asyncio.Semaphore:
    """The per-merchant cap on model calls in flight in this worker (docs/fleet.md, "Caps").

    Fairness belongs where the work is: DBOS counts a run parked at the gate as running,
    so a cap on runs would let a merchant with many pending approvals block itself. This
    caps the expensive working step instead; a parked run holds no slot. Semaphores live
    on DBOS's one event loop, where every workflow of this process runs.
    """
    sem = _slots.get(merchant_id)
    if sem is None:
        sem = _slots[merchant_id] = asyncio.Semaphore(settings.DESKHAND_MERCHANT_MODEL_CALLS)
    return sem


def _outside(fn: Callable[..., str], *args: Any) -> str:
    """Django code a workflow runs before (or instead of) its first step, off the event loop."""
    guard()
    close_old_connections()
    try:
        return fn(*args)
    finally:
        close_old_connections()


def _refusal(workflow_id: str) -> str:
    """Why this run workflow may not run ("" when it is a run's, or a fork just adopted as one)."""
    return workflow_adopt(workflow_id).refusal


def _merchant_of(run_id: str) -> int:
    try:
        return int(Run.objects.values_list("merchant_id", flat=True).get(pk=run_id))
    finally:
        close_old_connections()


def _provider_of(run_id: str) -> str:
    try:
        return str(Run.objects.values_list("provider", flat=True).get(pk=run_id))
    finally:
        close_old_connections()


# The steps ``limited_step`` may run as a child workflow, by key: a queued workflow gets
# its arguments from the database, so it is handed a key, never a function (the keys are
# persisted in each child's input: compatibility data). The key is not the checkpoint's
# name: the whole turn is recorded as "model".
LIMITED_STEPS: dict[str, Callable[..., Any]] = {"turn": turn}
_STEP_NAME = {"turn": StepName.MODEL.value}


class DBOSRuntime:
    """The runtime protocol, answered by DBOS."""

    def __init__(self, run_id: str, function_id: int | None = None) -> None:
        self._run_id = run_id
        self._function_id = function_id  # the run's, when this runs a limited call's child
        self._merchant: int | None = None
        self._provider: str | None = None

    @property
    def run_id(self) -> str:
        return self._run_id

    async def step(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        as_recorded, read_back = recorded(fn)
        return read_back(await self._record(name, as_recorded, *args))

    async def _record(self, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn`` as a DBOS step; its output (JSON) as checkpointed, fresh or replayed."""
        name = str(name)  # a StepName is recorded as its plain value
        fid = self._function_id

        async def body() -> Any:
            if name != StepName.MODEL:
                return await asyncio.to_thread(_in_thread, name, fn, *args, function_id=fid)
            if self._merchant is None:
                self._merchant = await asyncio.to_thread(_merchant_of, self._run_id)
            async with model_slot(self._merchant):  # only while the call is really made
                return await asyncio.to_thread(_in_thread, name, fn, *args, function_id=fid)

        options: StepOptions = (
            {"name": name, **dbos_step(STEP)}
            if name in RETRYABLE_STEPS
            else {"name": name, "retries_allowed": False}
        )
        return await DBOS.run_step_async(options, body)

    async def limited_step(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        """The step as a child workflow on its provider's rate-limited queue, awaited.

        The parent records three operations (the child's start, then ``DBOS.recv`` and its
        ``DBOS.sleep`` for the child's message) and holds no thread while the child waits
        for the limiter; the child records the step itself, under the same name, and
        ``DBOS.send``, so the output is exactly the plain step's. A provider
        with no limit (the scripted policy) runs the plain step.
        """
        key = next((k for k, f in LIMITED_STEPS.items() if f is fn), None)
        assert key is not None and _STEP_NAME.get(key, key) == name, f"{name} is not a limited step"
        if self._provider is None:
            self._provider = await asyncio.to_thread(_provider_of, self._run_id)
        queue = model_queue(self._provider)
        if queue is None:
            return await self.step(name, fn, *args)
        handle = await DBOS.enqueue_workflow_async(queue, limited_call, key, *args)
        # The child sends its output (LISTEN/NOTIFY wakes this recv, no thread held): DBOS's
        # own getResult polls once a second, which would add ~1 s to every call
        # (docs/rate-limits.md). A message that never comes falls back to getResult.
        topic = limited_reply_topic(handle.get_workflow_id())
        # This worker polls at once rather than at its next tick, and then once a second
        # while the call waits (the limiter may hold it); idle, the queue polls rarely.
        with queues_kicked_while_waiting():
            kick_queues()
            msg = await DBOS.recv_async(topic, timeout_seconds=settings.DESKHAND_LIMITED_WAIT_SEC)
            if msg is None:
                msg = {"output": await handle.get_result()}
        if "error" in msg:
            raise LimitedCallFailed(msg["error"])
        return recorded(fn)[1](msg["output"])

    async def sleep(self, seconds: float) -> None:
        await DBOS.sleep_async(max(0.0, seconds))

    async def wait(self, topic: str, until: dt.datetime) -> Any | None:
        # Read off the wall clock here, outside any step: DBOS checkpoints the wait's end on
        # its first execution and replays that, so this reading only ever sets a new wait.
        timeout = (until - dt.datetime.now(dt.UTC)).total_seconds()
        # A crash here falls between the clock read the wait was derived from and the wait's
        # own checkpoint (tests/consent/test_expiry.py).
        faults.at(Point.BEFORE_WAIT, topic.split(":", 1)[0])
        return await DBOS.recv_async(topic, timeout_seconds=max(0.0, timeout))

    async def patch(self, name: str) -> bool:
        # DBOS.patch (sync) refuses to run inside this async workflow.
        return bool(await DBOS.patch_async(name))


@DBOS.workflow(name=LIMITED_CALL_WORKFLOW, max_recovery_attempts=10_000)
async def limited_call(key: str, run_id: str, *args: Any) -> Any:
    """One rate-limited step of run ``run_id``, started by the queue's limiter (docs/rate-limits.md).

    Its own workflow (id ``<run id>-<n>``, DBOS's child id): a worker that dies while it
    waits or runs recovers it like any workflow, and the run's ``recv`` waits on for the
    message this sends when the step is done (or failed).
    """
    child = DBOS.workflow_id
    assert child is not None
    topic = limited_reply_topic(child)
    # DBOS names a child ``<parent id>-<the parent's function id>``: the run's checkpoint of
    # this call, which the step row records so a fork can start there (agent.replay.fork).
    tail = child.removeprefix(f"{run_id}-")
    at = int(tail) if tail != child and tail.isdigit() else None
    if at is None:
        # Not a call the run made (DBOS names those <run id>-<n>): a fork of one, made with
        # DBOS's own tools. Refused and cancelled; it calls nothing (agent.replay.fork).
        return {"refused": await asyncio.to_thread(_outside, limited_call_refuse, child, run_id)}
    try:
        name = _STEP_NAME.get(key, key)
        as_recorded = recorded(LIMITED_STEPS[key])[0]  # the child sends the JSON it recorded
        out = await DBOSRuntime(run_id, at)._record(name, as_recorded, run_id, *args)
    except Exception as exc:
        if type(exc).__name__ not in _CANCELLED:
            await DBOS.send_async(run_id, {"error": f"{type(exc).__name__}: {exc}"[:2000]}, topic)
        raise
    await DBOS.send_async(run_id, {"output": out}, topic)
    return out


@DBOS.workflow(name=RUN_WORKFLOW, max_recovery_attempts=10_000)
async def run_workflow() -> dict[str, Any]:
    """Work one ticket. Bounds are Deskhand's own; no DBOS workflow timeout is used,
    because it would count time spent waiting for a person and cancel without a summary.
    A run parked through many restarts is not dead-lettered (max_recovery_attempts)."""
    run_id = DBOS.workflow_id
    assert run_id is not None
    # A workflow that is no run's — a fork made with DBOS's own tools — becomes a run as
    # `replay --fork-from` would make it, or is refused and cancelled (agent.replay.fork).
    # Outside any step: one read for every run, and the step sequence is unchanged.
    refusal = await asyncio.to_thread(_outside, _refusal, run_id)
    if refusal:
        return {"status": "refused", "detail": refusal}
    rt = DBOSRuntime(run_id)
    try:
        return (await run_agent(rt)).to_json()
    except Exception as exc:
        if type(exc).__name__ in _CANCELLED:
            raise
        # Record the failure durably, then re-raise so DBOS's own status agrees.
        await rt.step(StepName.FAIL, run_fail, run_id, f"{type(exc).__name__}: {exc}"[:2000])
        raise
