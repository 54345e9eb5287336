"""Fixtures for the consent tests: scripted providers that remember what they were shown,
runs opened at the gate without a workflow, and waiting helpers."""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator
from typing import Any

import pytest

from agent.models import Run
from agent.providers import clear_overrides, install_override
from agent.providers.base import ModelReply
from agent.providers.scripted import ScriptedProvider, call
from agent.run.services import run_create
from tests.durability.helpers import user
from tests.fixtures.dbos import wait_for_run
from tests.support.waiting import PATIENCE_S


class RecordingProvider(ScriptedProvider):
    """A scripted provider that keeps a copy of every conversation it was asked to continue."""

    def __init__(self, turns: list[Any]) -> None:
        super().__init__(turns)
        self.seen: list[list[dict[str, Any]]] = []

    def complete(
        self, *, system: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]
    ) -> ModelReply:
        self.seen.append(copy.deepcopy(messages))
        return super().complete(system=system, messages=messages, tools=tools)


@pytest.fixture
def scripted() -> Iterator[Any]:
    """Install a recording script for every run in this process (in-process executor only)."""

    def install(turns: list[Any], run_id: str = "*") -> RecordingProvider:
        provider = RecordingProvider(turns)
        install_override(run_id, provider)
        return provider

    yield install
    clear_overrides()


def refund(amount_cents: int = 3800, order: str = "NW-1042") -> dict[str, Any]:
    return call(
        "issue_refund", order_reference=order, amount_cents=amount_cents, reason="stale beans"
    )


def settle(run: Run, timeout: float = 60.0) -> Run:
    """Until the run is terminal or parked on a pending approval."""
    return wait_for_run(
        str(run.id),
        lambda r: (
            r.status in ("succeeded", "failed", "exhausted", "cancelled")
            or (r.status == "awaiting_approval" and r.approvals.filter(status="pending").exists())
        ),
        timeout,
    )


def bare_run(ticket_ref: str = "NW-1", email: str = "owner@northwind.test") -> Run:
    """A Run row with no workflow behind it: for driving the gate's steps directly."""
    from deskhand.domain.desk.models import Ticket

    return run_create(
        ticket=Ticket.objects.get(reference=ticket_ref), user=user(email), channel="cli"
    )


def gate_call(
    amount_cents: int = 3800, call_id: str = "toolu_gate_1", order: str = "NW-1042"
) -> dict[str, Any]:
    """A refund tool call as the loop hands it to the gate (with its stable id)."""
    block = refund(amount_cents, order)
    return {**block, "id": call_id}


def restart(worker: Any, faults: str | None = None, timeout: float = PATIENCE_S) -> None:
    """Start ``worker`` again and wait until *this* incarnation is ready.

    (``WorkerProcess.start`` looks for the "ready" line in a log it appends to, so after a
    kill it would see the previous incarnation's line and return at once.)
    """
    marker = f"worker {worker.executor_id} ready"
    seen = worker.log_path.read_text().count(marker) if worker.log_path.exists() else 0
    worker.start(faults=faults)
    end = time.monotonic() + timeout
    while worker.log_path.read_text().count(marker) <= seen:
        if time.monotonic() > end:
            raise AssertionError(
                f"worker {worker.executor_id} did not restart:\n{worker.log_path.read_text()[-3000:]}"
            )
        time.sleep(0.05)
