"""What rate-limiting model calls costs: a plain step vs a child workflow on a limited queue.

``manage.py bench --model-calls`` (docs/rate-limits.md). The "model" here is a no-op, so
what is measured is only what DBOS adds around a call: the run's own ``DBOSRuntime.step``
against ``DBOSRuntime.limited_step`` (enqueue the child on ``model-bench``, whose limiter
never binds, kick this worker's queue threads, ``recv`` the child's message), at the shipped polling
interval and at 1 s. It also counts the rows DBOS writes per call.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.db import connection

from tests.devtools.bench.probes import median, pct

_registered: dict[str, Any] = {}


def bench_model(run_id: str) -> dict[str, Any]:
    """A model call that costs nothing: the reply shape the model step returns."""
    return {"content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn"}


def register() -> Any:
    """The bench workflow; registered once, before DBOS launches."""
    if _registered:
        return _registered["calls"]
    from dbos import DBOS

    from deskhand.engine.workflow import LIMITED_STEPS, DBOSRuntime

    LIMITED_STEPS["bench.model"] = bench_model

    @DBOS.workflow(name="deskhand.bench.model_calls")
    async def calls(n: int, limited: bool) -> list[float]:
        wf = DBOS.workflow_id
        assert wf is not None
        rt = DBOSRuntime(wf)
        rt._provider = "bench"
        out = []
        for _ in range(n):
            t = time.perf_counter()
            if limited:
                await rt.limited_step("bench.model", bench_model, wf)
            else:
                await rt.step("bench.model", bench_model, wf)
            out.append(time.perf_counter() - t)
        return out

    _registered["calls"] = calls
    return calls


def _rows(workflow_id: str) -> tuple[int, int, int]:
    """(the run's checkpoints, its children's checkpoints, child workflows) for one workflow."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*), count(DISTINCT child_workflow_id) FROM dbos.operation_outputs"
            " WHERE workflow_uuid = %s",
            [workflow_id],
        )
        own, children = cur.fetchone()
        cur.execute(
            "SELECT count(*) FROM dbos.operation_outputs WHERE workflow_uuid IN (SELECT"
            " child_workflow_id FROM dbos.operation_outputs WHERE workflow_uuid = %s)",
            [workflow_id],
        )
        (inner,) = cur.fetchone()
    return int(own), int(inner), int(children)


def measure(samples: int) -> dict[str, Any]:
    """Per call: median/p95 ms and DBOS rows, plain and limited (at the shipped polling and at 0.1 s)."""
    from dbos import DBOS

    from deskhand.engine.queues import register_model_queues

    calls = register()
    rpm = dict(settings.DESKHAND_MODEL_RPM)
    settings.DESKHAND_MODEL_RPM = {**rpm, "bench": 1_000_000}
    out: dict[str, Any] = {"model_queue_poll_s": settings.DESKHAND_MODEL_QUEUE_POLL_SEC}
    try:
        for label, limited, poll, n in (
            ("plain", False, None, samples),
            ("limited", True, settings.DESKHAND_MODEL_QUEUE_POLL_SEC, samples),
            ("limited_poll_0.1s", True, 0.1, max(10, samples // 5)),
        ):
            if poll is not None:
                register_model_queues(rpm={"bench": 1_000_000}, poll_sec=poll)
                time.sleep(1.5)  # DBOS's queue manager finds a changed queue within a second
            handle = DBOS.start_workflow(calls, n + 3, limited)
            took = handle.get_result()[3:]
            own, inner, children = _rows(handle.get_workflow_id())
            out[label] = {
                "median_ms": round(median(took) * 1000, 1),
                "p95_ms": round(pct(took, 95) * 1000, 1),
                "run_checkpoints_per_call": round(own / (n + 3), 2),
                "child_checkpoints_per_call": round(inner / (n + 3), 2),
                "child_workflows_per_call": round(children / (n + 3), 2),
            }
    finally:
        settings.DESKHAND_MODEL_RPM = rpm
    return out
