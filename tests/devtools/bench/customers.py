"""Runs parked on a customer's answer (``bench --customers``), beside runs parked on approvals.

Each run asks its ticket's customer which order (``ask_customer``, approved by the bench
merchant's rule) and waits in ``DBOS.recv`` on the ticket's topic. The customer series is
measured first, then released (every run still waiting gets its answer and finishes), so
the approval series that follows starts from the same executor holding nothing: the two
idle figures are each one kind of parked run, measured minutes apart in one bench run.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

from tests.devtools.bench.probes import until

STARTS = 200_000  # ``ASK-`` ticket numbers, clear of every other phase's


def parked_count(run_ids: list[Any]) -> int:
    """Runs among ``run_ids`` that have asked and wait for the answer."""
    from agent.models import Run, RunStatus

    return Run.objects.filter(pk__in=run_ids, status=RunStatus.AWAITING_CUSTOMER).count()


def _ended(run_id: Any) -> bool:
    from agent.models import OPEN_STATUSES, Run

    return not Run.objects.filter(pk=run_id, status__in=OPEN_STATUSES).exists()


def statuses(run_ids: list[Any]) -> dict[str, int]:
    """How many of ``run_ids`` are in each status."""
    from django.db.models import Count

    from agent.models import Run

    rows = Run.objects.filter(pk__in=run_ids).values("status").annotate(n=Count("pk"))
    return {r["status"]: r["n"] for r in rows}


def wake(run_ids: list[Any]) -> tuple[list[float], list[float]]:
    """The customer's answer stored → the run's ``recv`` returned, and → its next step
    (``customer.read``, which finds the answer) committed; DBOS's step clock, one run at a time.

    The clock starts before the answer is stored: the figure includes storing it and the
    routing that follows its commit (``agent.customer.route``), as mail and the API pay it.
    """
    from agent.models import Run
    from deskhand.infra.dbos.client import workflow_steps
    from tests.devtools.load.world import customer_answer

    to_recv, to_step = [], []
    for run_id in run_ids:
        ticket = Run.objects.select_related("ticket__customer").get(pk=run_id).ticket
        epoch = time.time()
        customer_answer(ticket)
        if not until(partial(_ended, run_id), 30, every=0.005):
            raise RuntimeError(f"run {run_id} did not finish within 30 s of the answer")
        steps = workflow_steps(str(run_id))
        reads = [s for s in steps if s["function_name"] == "customer.read"]
        if len(reads) < 2:
            continue
        # The read after the wait (the last), and the recv that woke it: the last one before it
        # (DBOS records the recv's own timeout sleep after it).
        read = reads[-1]
        recvs = [
            s
            for s in steps
            if s["function_name"] == "DBOS.recv" and s["function_id"] < read["function_id"]
        ]
        if recvs and recvs[-1]["completed_at_epoch_ms"] and read["completed_at_epoch_ms"]:
            to_recv.append(recvs[-1]["completed_at_epoch_ms"] / 1000 - epoch)
            to_step.append(read["completed_at_epoch_ms"] / 1000 - epoch)
    return to_recv, to_step


def release(run_ids: list[Any], timeout: float) -> float:
    """Answer every run still waiting and wait until all have finished; seconds taken."""
    from agent.models import OPEN_STATUSES, Run, RunStatus
    from tests.devtools.load.world import customer_answer

    t0 = time.perf_counter()
    waiting = list(
        Run.objects.filter(pk__in=run_ids, status=RunStatus.AWAITING_CUSTOMER).select_related(
            "ticket__customer"
        )
    )
    for run in waiting:
        customer_answer(run.ticket)
    ids = [r.pk for r in waiting]

    def finished() -> bool:
        return not Run.objects.filter(pk__in=ids, status__in=OPEN_STATUSES).exists()

    if not until(finished, timeout, every=0.5):
        raise RuntimeError(f"the {len(ids)} answered runs did not all finish in {timeout:.0f} s")
    return time.perf_counter() - t0
