"""Operating the fleet: health, /healthz, the run event log, moving runs to a new version."""

from __future__ import annotations

import io
import json
import logging
import time
import uuid
from contextlib import redirect_stdout

import pytest
from django.core.management import call_command
from django.db import transaction
from django.test import override_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.models import Run
from deskhand.domain.desk.models import Ticket
from deskhand.infra import events
from deskhand.infra.fleet.lease import Lease
from deskhand.infra.fleet.models import Worker
from tests.durability.helpers import decide, start
from tests.fixtures.dbos import wait_parked, wait_terminal

OLD = "deskhand-0.0.9"
IN_PROCESS_EXECUTOR = "pytest-inprocess"  # tests/fixtures/dbos.py


def health_json(*extra: str) -> tuple[int, dict]:
    out = io.StringIO()
    code = 0
    with redirect_stdout(out):
        try:
            call_command("health", "--json", *extra, stdout=out)
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, json.loads(out.getvalue().strip().splitlines()[-1])


@pytest.fixture
def registered(dbos_executor):
    """The in-process executor, registered and alive through a real lease."""
    from django.conf import settings as dj

    lease = Lease(IN_PROCESS_EXECUTOR, dj.DESKHAND_APP_VERSION, grace=3, heartbeat=0.5)
    lease.acquire(wait=5)
    lease.start()  # without heartbeats the server cuts the idle session, and the lock goes with it
    yield lease
    lease.release()


@pytest.mark.django_db(transaction=True)
def test_health_shows_workers_queue_oldest_approval_and_runs_on_a_version_nobody_serves(
    registered,
):
    parked = start("NW-1", "owner@northwind.test")
    wait_parked(str(parked.pk))
    Worker.objects.create(executor_id="old-1", app_version=OLD, host="gone|x|y", pid=1)
    with override_settings(DESKHAND_APP_VERSION=OLD):  # started by a worker of the last release
        stranded = start("LU-2", "owner@lumen.test")

    code, report = health_json()
    assert code == 1 and report["ok"] is False and report["database"] is True
    workers = {w["executor_id"]: w for w in report["workers"]}
    assert workers[IN_PROCESS_EXECUTOR]["alive"] is True, report["workers"]
    assert workers[IN_PROCESS_EXECUTOR]["app_version"] == registered.app_version
    assert workers["old-1"]["alive"] is False
    assert report["queue_depth"] == 1 and report["parked"] == 1
    assert report["oldest_waiting_approval"]["run_id"] == str(parked.pk)
    assert report["unserved_versions"] == {OLD: 1}

    text = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("health", stdout=text)
    assert f"manage.py move_runs --from {OLD}" in text.getvalue()

    # The documented move: the run goes on at this version, on the live worker.
    out = io.StringIO()
    call_command("move_runs", "--from", OLD, "--json", stdout=out)
    assert json.loads(out.getvalue())["moved"] == [str(stranded.pk)]
    wait_parked(str(stranded.pk))
    assert Run.objects.get(pk=stranded.pk).application_version == registered.app_version
    decide(Run.objects.get(pk=stranded.pk), "owner@lumen.test")  # the refund
    wait_parked(str(stranded.pk))
    decide(Run.objects.get(pk=stranded.pk), "owner@lumen.test")  # the confirmation email
    assert wait_terminal(str(stranded.pk)).status == "succeeded"
    code, report = health_json()
    assert report["unserved_versions"] == {} and report["queue_depth"] == 0


@pytest.mark.django_db(transaction=True)
def test_moving_runs_is_refused_while_a_live_worker_still_serves_their_version(registered):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match=f"still served by {IN_PROCESS_EXECUTOR}: stop it"):
        call_command("move_runs", "--from", registered.app_version, "--to", "deskhand-9")


def test_healthz_answers_without_sign_in_and_carries_no_ids(client, seeded):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["database"] is True
    assert body["status"] in ("ok", "degraded")
    assert set(body) == {
        "status",
        "database",
        "workers_alive",
        "queue_depth",
        "parked",
        "stuck_runs",
        "runs_on_unserved_versions",
        "effect_findings_open",
        "workflow_findings_open",
    }


def test_healthz_is_503_when_the_database_does_not_answer(client, seeded, monkeypatch):
    from django.db import OperationalError

    import agent.ops.health

    def down():
        raise OperationalError("connection refused")

    monkeypatch.setattr(agent.ops.health, "health_report", down)
    response = client.get("/healthz")
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "database": False,
        "error": "OperationalError",
    }


# --- the run event log -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_run_logs_one_json_line_per_event_with_ids_and_numbers_only(dbos_executor, caplog):
    caplog.set_level(logging.INFO, logger=events.LOGGER_NAME)
    run = start("NW-1", "owner@northwind.test")
    wait_parked(str(run.pk))
    decide(run, "owner@northwind.test")
    assert wait_terminal(str(run.pk)).status == "succeeded"
    time.sleep(0.3)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == events.LOGGER_NAME]
    mine = [ln for ln in lines if ln.get("run_id") == str(run.pk)]
    kinds = [ln["event"] for ln in mine]
    for event in (
        "run.started",
        "run.step",
        "approval.requested",
        "approval.decided",
        "run.effect",
        "run.finished",
    ):
        assert event in kinds, kinds
    assert kinds.index("run.started") < kinds.index("approval.requested")
    assert kinds.index("approval.decided") < kinds.index("run.effect") < kinds.index("run.finished")
    finished = next(ln for ln in mine if ln["event"] == "run.finished")
    assert finished["status"] == "succeeded" and isinstance(finished["cost_micros"], int)
    # Customer content never reaches the log: not the ticket, not the customer, not the preview.
    ticket = Ticket.objects.get(reference="NW-1")
    blob = "\n".join(r.getMessage() for r in caplog.records if r.name == events.LOGGER_NAME)
    for secret in (ticket.subject, ticket.customer.email, ticket.customer.name, "stale"):
        assert secret not in blob


def test_an_event_field_that_is_not_an_id_or_a_number_is_dropped():
    line = json.loads(
        events.render(
            "run.step",
            {
                "run_id": uuid.UUID(int=7),
                "seq": 3,
                "tool": "issue_refund",
                "note": "Dear Dana, your beans were stale",
                "customer_email": "dana.whitfield@example.com",
                "reason": "stale",
                "merchant_id": 4,
                "nested": {"a": 1},
                "bad key!": 1,
            },
        )
    )
    assert line["run_id"] == str(uuid.UUID(int=7)) and line["seq"] == 3
    assert line["tool"] == "issue_refund"
    assert line["note"] == events.DROPPED and line["nested"] == events.DROPPED
    assert line["customer_email"] == events.DROPPED  # not a field that may carry text
    assert line["reason"] == "stale" and line["merchant_id"] == 4  # a code, a number
    assert "bad key!" not in line


@given(st.text(), st.one_of(st.text(), st.integers(), st.floats(), st.binary(), st.none()))
@settings(max_examples=200, deadline=None)
def test_rendering_any_field_never_raises_and_never_echoes_free_text(key, value):
    line = json.loads(events.render("x", {key: value}))
    if isinstance(value, str) and key in line:
        text_field = key in events.TEXT_FIELDS or key.endswith("_id")
        assert line[key] == (
            value if text_field and events._TOKEN.fullmatch(value) else events.DROPPED
        )


@pytest.mark.django_db(transaction=True)
def test_an_event_never_raises_into_the_caller_and_waits_for_the_commit(caplog, monkeypatch):
    caplog.set_level(logging.INFO, logger=events.LOGGER_NAME)

    class Broken(logging.Handler):
        def emit(self, record):
            raise OSError("disk full")

    logging.getLogger(events.LOGGER_NAME).addHandler(broken := Broken())
    try:
        events.emit("run.step", seq=1)  # the handler raises; the caller never sees it
    finally:
        logging.getLogger(events.LOGGER_NAME).removeHandler(broken)

    class Unprintable:
        def __str__(self):
            raise RuntimeError("no")

    events.emit("run.step", weird=Unprintable())
    caplog.clear()
    with pytest.raises(RuntimeError), transaction.atomic():
        events.emit("run.step", seq=99)
        raise RuntimeError("the step rolls back")
    assert not [r for r in caplog.records if r.name == events.LOGGER_NAME]
    with transaction.atomic():
        events.emit("run.step", seq=100)
        assert not [r for r in caplog.records if r.name == events.LOGGER_NAME]
    assert json.loads(caplog.records[-1].getMessage())["seq"] == 100


def test_the_model_call_cap_counts_one_merchants_calls_in_flight_not_another_s(settings):
    import asyncio

    from deskhand.engine import workflow

    settings.DESKHAND_MERCHANT_MODEL_CALLS = 2
    workflow._slots.clear()
    peak: dict[int, int] = {1: 0, 2: 0, 0: 0}
    now: dict[int, int] = {1: 0, 2: 0, 0: 0}

    async def call(merchant: int) -> None:
        async with workflow.model_slot(merchant):
            now[merchant] += 1
            now[0] += 1
            peak[merchant] = max(peak[merchant], now[merchant])
            peak[0] = max(peak[0], now[0])
            await asyncio.sleep(0.05)
            now[merchant] -= 1
            now[0] -= 1

    async def main() -> None:
        await asyncio.gather(*(call(1) for _ in range(8)), *(call(2) for _ in range(3)))

    asyncio.run(main())
    workflow._slots.clear()
    # Two per merchant, and merchant 1's eight calls never took merchant 2's slots.
    assert peak == {1: 2, 2: 2, 0: 4}


def test_dbos_opentelemetry_export_is_switched_by_the_environment(monkeypatch):
    from deskhand.engine.bootstrap import otlp
    from deskhand.infra.dbos.client import DBOSSetupError

    monkeypatch.delenv("DESKHAND_OTLP", raising=False)
    assert otlp() == {"enable_otlp": False}
    monkeypatch.setenv("DESKHAND_OTLP", "1")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    with pytest.raises(DBOSSetupError, match="names no endpoint"):
        otlp()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces")
    cfg = otlp()
    assert cfg["enable_otlp"] is True
    assert cfg["otlp_traces_endpoints"] == ["http://127.0.0.1:4318/v1/traces"]
    assert cfg["otlp_attributes"]["deskhand.app_version"]


def test_the_application_version_comes_from_the_release_not_a_constant(monkeypatch):
    from importlib.metadata import version

    from deskhand.settings import release_version

    monkeypatch.delenv("DESKHAND_APP_VERSION", raising=False)
    monkeypatch.delenv("DESKHAND_RELEASE", raising=False)
    assert release_version() == f"deskhand-{version('deskhand')}"  # pyproject, bumped per release
    monkeypatch.setenv("DESKHAND_RELEASE", "2026.12.1-3f9a2c1")
    assert release_version() == "deskhand-2026.12.1-3f9a2c1"
    monkeypatch.setenv("DESKHAND_APP_VERSION", "deskhand-hotfix-7")
    assert release_version() == "deskhand-hotfix-7"
