"""A runtime that runs the whole loop inline, in the test's own transaction, for property tests.

Steps run in the calling thread, so everything a run writes sits in the test's
transaction and rolls back with it: hundreds of random runs cost milliseconds
each. Its coroutines never suspend, so ``drive`` steps the loop's coroutine by
hand without an event loop (and Django's async-safety check has nothing to object to).

A gate's wait is where a person decides: ``decide`` is called with the pending
approval and may approve, deny, tamper, or let the clock run out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from agent.runtime import current_step_id, recorded
from approvals.models import Approval, ApprovalStatus

T = TypeVar("T")


class InlineRuntime:
    def __init__(self, run_id: str, decide: Callable[[Approval, InlineRuntime], None]) -> None:
        self._run_id = run_id
        self.decide = decide
        self.offset = dt.timedelta(0)  # advanced by a decider that lets an approval expire
        self.step_names: list[str] = []

    @property
    def run_id(self) -> str:
        return self._run_id

    async def step(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        self.step_names.append(name)
        token = current_step_id.set(len(self.step_names))
        as_recorded, read_back = recorded(fn)  # through JSON, as a checkpoint is
        try:
            return read_back(as_recorded(*args))
        finally:
            current_step_id.reset(token)

    async def limited_step(self, name: str, fn: Callable[..., T], *args: Any) -> T:
        return await self.step(name, fn, *args)

    async def sleep(self, seconds: float) -> None:
        return None

    async def wait(self, topic: str, timeout_seconds: float) -> Any | None:
        approval_id = topic.split(":", 1)[1]
        approval = Approval.objects.get(pk=approval_id)
        if approval.status == ApprovalStatus.PENDING:
            self.decide(approval, self)
        return None

    async def patch(self, name: str) -> bool:
        return True  # a run started now takes every patched path


def drive[T](coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to completion, without an event loop."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError("the loop suspended on something the inline runtime does not provide")
