"""The runtime protocol the agent loop runs on, the names its steps are recorded under, and an
in-memory double for tests.

The loop never imports DBOS. It asks this protocol for a few things — run a durable step
(or a rate-limited one), sleep, wait for a message, take a patch — and ``deskhand/engine/workflow.py`` answers them with DBOS in
production. In a unit test, ``MemoryRuntime`` answers them with a few lines of plain Python.
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import datetime as dt
import enum
import functools
import typing
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class StepName(enum.StrEnum):
    """The names a run's steps are recorded under: compatibility data.

    DBOS checks each recorded step's name when a run replays, so a worker on the next
    release finds a parked run's history by these; renaming one strands every run parked
    past it (``tests/integrity/test_persisted_names.py`` pins the set; docs/deploys.md).
    A tool call's step is ``tool.<tool name>`` (``tool_step``).
    """

    BEGIN = "run.begin"
    MODEL = "model"
    GATE_REQUEST = "gate.request"
    GATE_RESUME = "gate.resume"
    # Waiting for the customer's answer to ask_customer (agent.customer.wait).
    CUSTOMER_PARK = "customer.park"
    CUSTOMER_READ = "customer.read"
    CUSTOMER_RESUME = "customer.resume"
    # After the reminder went out: the run waits for the customer again.
    CUSTOMER_REPARK = "customer.repark"
    FINISH = "run.finish"
    FAIL = "run.fail"


TOOL_STEP_PREFIX = "tool."


def tool_step(tool: str) -> str:
    """The step name of a call to ``tool`` (``tool.issue_refund``)."""
    return f"{TOOL_STEP_PREFIX}{tool}"


RETRYABLE_STEPS = frozenset(
    {
        StepName.BEGIN,
        StepName.MODEL,
        StepName.CUSTOMER_READ,
    }
)
"""Steps that only read, or whose writes are idempotent upserts: a runtime may retry them on
a transient error. An irreversible tool step never is (the ledger would catch a repeat,
but a person approved one attempt, not three). The model step never raises an API error:
the provider is its one retry layer, and what it gives up on is the step's *output*
(``{"provider_error": ...}``, agent.run.turns), which is not retried; a retry is only of a
failure around the call — writing its step row, say — and re-sends a call that was paid,
which the step row then counts (attempts 2, both costs)."""


class Patch(enum.StrEnum):
    """Where a run's step sequence changed, for runs already past that point (``Runtime.patch``).

    Compatibility data like ``StepName``. None since the 0.2.0 baseline, which retired every
    older path: runs started before it finish on a worker of their own version
    (docs/deploys.md, "A new baseline"). The next change to the step sequence adds its name here.
    """


def recorded[R](fn: Callable[..., R]) -> tuple[Callable[..., Any], Callable[[Any], R]]:
    """``fn`` as a runtime records it, and how its recorded output is read back.

    A step declared to return a type with ``to_json``/``from_json`` (``agent.steps``) is
    checkpointed as that JSON, and read back as the type, fresh or replayed alike: the one
    place a step's output crosses the checkpoint. Any other step's output is kept as it is.
    """
    kind = _output_type(fn)
    if kind is None:
        return fn, lambda out: out

    def as_json(*args: Any) -> Any:
        return fn(*args).to_json()  # type: ignore[attr-defined]

    return as_json, kind.from_json


@functools.cache
def _output_type(fn: Callable[..., Any]) -> Any:
    kind = typing.get_type_hints(fn).get("return") if hasattr(fn, "__annotations__") else None
    return kind if isinstance(kind, type) and hasattr(kind, "from_json") else None


class Runtime(Protocol):
    async def step(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` once, durably: on replay, return its recorded output.

        ``fn`` is synchronous Django code; the runtime runs it off the event
        loop. Irreversible work inside ``fn`` is never retried by the runtime.
        """
        ...

    async def limited_step(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        """``step``, but rate limited across every worker (the model call, docs/rate-limits.md):
        it may wait its turn first. Its output is ``fn``'s, as ``step`` would return it."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep durably: a restart wakes at the recorded time, and no thread is held."""
        ...

    async def wait(self, topic: str, until: dt.datetime) -> Any | None:
        """Wait for the next message on ``topic`` until ``until``; ``None`` when it passes.

        A deadline, not a duration: a wait first entered after a restart (the worker died
        between the clock read before it and the wait's own checkpoint) must end when the
        deadline says, not a whole recorded duration after the restart. Once the wait is
        checkpointed, its end is the recorded one.
        """
        ...

    async def patch(self, name: str) -> bool:
        """Whether this run takes the code path introduced under ``name`` (docs/deploys.md):
        False for a run whose history already went the older way at this point."""
        ...

    @property
    def run_id(self) -> str:
        """The id of the run this runtime executes (the workflow id)."""
        ...


class MemoryRuntime:
    """A runtime in memory: steps run inline, messages sit in per-topic queues.

    Good enough to unit-test the loop's decisions without Postgres or DBOS.
    """

    def __init__(
        self,
        run_id: str,
        after_step: Callable[[], None] | None = None,
    ) -> None:
        self._run_id = run_id
        # e.g. django.db.close_old_connections: step threads must not leak connections.
        self.after_step = after_step
        self.inbox: dict[str, collections.deque[Any]] = collections.defaultdict(collections.deque)
        self.step_names: list[str] = []
        self.slept: list[float] = []

    @property
    def run_id(self) -> str:
        return self._run_id

    async def step(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        self.step_names.append(name)
        step_id = len(self.step_names)
        as_recorded, read_back = recorded(fn)

        def call() -> Any:
            token = current_step_id.set(step_id)
            try:
                return as_recorded(*args)
            finally:
                current_step_id.reset(token)
                if self.after_step is not None:
                    self.after_step()

        return read_back(await asyncio.to_thread(call))

    async def limited_step(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        return await self.step(name, fn, *args)

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)  # recorded, not slept: the loop's decision is the point

    async def wait(self, topic: str, until: dt.datetime) -> Any | None:
        if self.inbox[topic]:
            return self.inbox[topic].popleft()
        return None

    async def patch(self, name: str) -> bool:
        return True

    def send(self, topic: str, message: Any) -> None:
        self.inbox[topic].append(message)


# The runtime's id for the step executing in this thread, recorded on the
# step log so an auditor can line Step rows up with DBOS checkpoints.
current_step_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "current_step_id", default=None
)
