"""Running scenarios: a fresh world each, an in-process DBOS executor, the world's invariants after.

Used by ``tests/evals`` (pytest supplies the database and the executor),
``python manage.py evals`` and ``scripts/mutants.py`` (both bring their own
scratch database: ``scratch_database`` creates one on the same server,
migrates it and drops it at the end, so the live database is never touched).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import secrets
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
from django.conf import settings
from django.core.management import call_command
from django.db import close_old_connections, connections
from django.db.models import Sum

from agent.models import OPEN_STATUSES, TERMINAL_STATUSES, Run, Step
from agent.models.ledger import LedgerEntry
from agent.models.payloads import StepKind
from agent.providers import clear_overrides
from agent.record import faults
from deskhand.domain.desk.models import Order, OutboundEmail, Refund
from tests.devtools.evals.harness import EvalFailure, Harness
from tests.devtools.evals.scenarios import Scenario
from tests.devtools.evals.trajectory import consent_problem


@dataclasses.dataclass(frozen=True)
class Result:
    scenario: Scenario
    ok: bool
    message: str
    seconds: float


class InProcessExecutor:
    """DBOS executing workflows in this process, under a fixed executor id (so a restart recovers)."""

    def __init__(self, executor_id: str, log_level: str = "WARNING") -> None:
        self.executor_id = executor_id
        self.log_level = log_level
        self.running = False

    def start(self) -> None:
        from deskhand.engine.bootstrap import launch_executor
        from deskhand.engine.queues import register_queues

        launch_executor(  # the evals' own executor: no worker runs beside it
            self.executor_id,
            unleased=True,
            notification_listener_polling_interval_sec=0.05,
            log_level=self.log_level,
        )
        register_queues()
        self.running = True

    def stop(self) -> None:
        from dbos import DBOS

        if self.running:
            DBOS.destroy(workflow_completion_timeout_sec=0)
            self.running = False

    def restart(self) -> None:
        self.stop()
        self.start()


# --- the world's invariants, checked after every scenario ------------------------------


def world_violations() -> list[str]:
    """What must hold after any scenario, whatever it did: consent, exactly-once, ceilings, truth."""
    out: list[str] = []
    for entry in LedgerEntry.objects.select_related("approval__policy", "run").filter(ok=True):
        a = entry.approval
        if a is None:
            out.append(f"ledger {entry.key}: executed without a recorded approval")
        elif why := consent_problem(a, entry):
            out.append(f"ledger {entry.key}: {why}")
    for refund in Refund.objects.filter(run__isnull=False).select_related("ledger_entry"):
        if refund.ledger_entry is None or not refund.ledger_entry.ok:
            out.append(f"refund {refund.pk} by a run has no successful ledger entry")
    for email in OutboundEmail.objects.filter(run_id__isnull=False).select_related("ledger_entry"):
        if email.ledger_entry is None or not email.ledger_entry.ok:
            out.append(f"email {email.pk} by a run has no successful ledger entry")
    for order in Order.objects.all():
        refunded = int(order.refunds.aggregate(t=Sum("amount_cents"))["t"] or 0)
        if refunded > order.total_cents:
            out.append(f"order {order.reference}: refunded {refunded} of {order.total_cents}")
    for run in Run.objects.all():
        by_run = int(Refund.objects.filter(run=run).aggregate(t=Sum("amount_cents"))["t"] or 0)
        if by_run > run.max_refund_cents:
            out.append(f"run {run.pk}: refunded {by_run}, ceiling {run.max_refund_cents}")
        steps = Step.objects.filter(run=run)
        sums = steps.aggregate(i=Sum("input_tokens"), o=Sum("output_tokens"), c=Sum("cost_micros"))
        if (run.steps, run.input_tokens, run.output_tokens, run.cost_micros) != (
            steps.count(),
            sums["i"] or 0,
            sums["o"] or 0,
            sums["c"] or 0,
        ):
            out.append(f"run {run.pk}: totals differ from its step log")
        if run.status in TERMINAL_STATUSES and steps.exists():
            ends = steps.filter(kind__in=(StepKind.FINAL, StepKind.BOUND, StepKind.ERROR)).count()
            if ends != 1:
                out.append(f"run {run.pk} is {run.status} with {ends} terminal steps")
    return out


# --- one scenario --------------------------------------------------------------------


def _settle_open_runs() -> None:
    """Cancel what a scenario left running, so it cannot act during the next one."""
    from dbos import DBOS

    for run_id in Run.objects.filter(status__in=OPEN_STATUSES).values_list("pk", flat=True):
        with contextlib.suppress(Exception):
            DBOS.cancel_workflow(str(run_id))


def reset_world() -> None:
    call_command("seed", "--reset", verbosity=0)


def run_scenario(scenario: Scenario, executor: Any, *, reset: bool = True) -> Result:
    started = time.monotonic()
    clear_overrides()
    faults.clear()
    if reset:
        reset_world()
    ok, message = True, ""
    try:
        scenario.fn(Harness(executor))
        violations = world_violations()
        if violations:
            ok, message = False, "world invariant broken: " + "; ".join(violations[:5])
    except EvalFailure as exc:
        ok, message = False, str(exc)
    except Exception as exc:  # a crash in a scenario is a failed scenario, with its reason
        ok, message = False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=6)}"
    finally:
        faults.clear()
        clear_overrides()
        with contextlib.suppress(Exception):
            _settle_open_runs()
        close_old_connections()
    return Result(scenario, ok, message, time.monotonic() - started)


def run_all(
    scenarios: list[Scenario], executor: Any, on_result: Callable[[int, Result], None] | None = None
) -> list[Result]:
    results = []
    for i, s in enumerate(scenarios, 1):
        result = run_scenario(s, executor)
        results.append(result)
        if on_result is not None:
            on_result(i, result)
    return results


# --- a scratch database ---------------------------------------------------------------


def _admin(sql: str, dbname: str) -> None:
    """Run ``sql`` outside a transaction on the server, connected to ``dbname`` or a
    database every server has (the configured one need not exist yet)."""
    sd = connections["default"].settings_dict
    last: Exception | None = None
    for name in dict.fromkeys((dbname, "postgres", "template1")):
        try:
            with psycopg.connect(
                host=sd.get("HOST") or None,
                port=sd.get("PORT") or None,
                user=sd.get("USER") or None,
                password=sd.get("PASSWORD") or None,
                dbname=name,
                autocommit=True,
            ) as conn:
                conn.execute(sql.encode())
                return
        except psycopg.OperationalError as exc:
            last = exc
    assert last is not None
    raise last


def _point_at(name: str) -> None:
    connections.close_all()
    settings.DATABASES["default"]["NAME"] = name
    connections.settings["default"]["NAME"] = name
    connections["default"].settings_dict["NAME"] = name


@contextlib.contextmanager
def scratch_database(prefix: str = "deskhand_evals") -> Iterator[str]:
    """A new database on the same server, migrated; dropped on the way out, whatever happened."""
    original = connections["default"].settings_dict["NAME"]
    name = f"{prefix}_{secrets.token_hex(4)}"
    _admin(f'CREATE DATABASE "{name}"', original)
    try:
        _point_at(name)
        call_command("migrate", verbosity=0, interactive=False)
        yield name
    finally:
        from deskhand.infra.dbos.client import close_clients

        with contextlib.suppress(Exception):
            close_clients()
        _point_at(original)
        _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', original)


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """DBOS logs every failed workflow at ERROR; scenarios fail workflows on purpose."""
    names = ("dbos", "agent", "approvals", "deskhand", "django")
    saved = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for n, level in saved.items():
            logging.getLogger(n).setLevel(level)
