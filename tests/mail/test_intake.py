"""The durable way in: what a receiver stores is processed by a workflow on a worker, a
customer's line is routed once with its outcome written on it, and the sweep re-drives
whatever a crash left waiting (the crash sweep itself: tests/durability/test_crash_sweep.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import io
import json
import threading

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone

from agent.customer.intake import intake_sweep
from agent.customer.route import customer_line_route, line_run_id
from agent.models import Run
from agent.ops.reconciler import reconcile
from agent.privacy.retention import retention_sweep
from deskhand.domain.desk.models import Merchant, Routing, TicketMessage
from deskhand.domain.mail.intake import inbound_received
from deskhand.domain.mail.models import InboundEmail, InboundStatus
from deskhand.infra.dbos import client as dbos_client
from deskhand.infra.dbos.names import inbound_workflow_id, line_workflow_id
from tests.mail.conftest import intake_idle, intake_now, mail

pytestmark = pytest.mark.django_db(transaction=True)

LATER = dt.timedelta(minutes=1)  # past the sweep's grace period


def _store(message_id: str, **kw) -> InboundEmail:
    return inbound_received(raw=mail(message_id=message_id, **kw), source="smtp")


def _health() -> dict:
    out = io.StringIO()
    # Not healthy (no worker lives here): the report is printed all the same.
    with contextlib.suppress(SystemExit):
        call_command("health", "--json", stdout=out)
    return json.loads(out.getvalue())


def test_the_receiving_process_only_stores_and_enqueues_a_worker_threads_and_opens_the_run(
    tseeded,
):
    row = _store("<stored-only@example.org>")
    # Answered (the row is committed) with nothing processed in this process: no thread,
    # no ticket, no run — but its workflow is on the intake queue, named after the row.
    assert InboundEmail.objects.get(pk=row.pk).status == InboundStatus.RECEIVED
    assert not TicketMessage.objects.filter(message_id="<stored-only@example.org>").exists()
    state = dbos_client.workflow_state(inbound_workflow_id(row.pk))
    assert state is not None and state.status == "ENQUEUED"


def test_a_stored_message_is_threaded_and_its_line_opens_one_run_whose_id_derives_from_it(
    dbos_executor,
):
    row = _store("<first@example.org>", sender="Sam Rivera <sam@example.org>")
    intake_idle()
    row.refresh_from_db()
    line = row.thread_message
    assert row.status == InboundStatus.THREADED and line is not None
    assert (line.routing, line.routed_run_id) == (Routing.OPENED, line_run_id(line.pk))
    assert "opened run" in line.routing_detail and line.routed_at is not None
    assert list(Run.objects.filter(ticket=line.ticket).values_list("pk", flat=True)) == [
        line_run_id(line.pk)
    ]
    # Routed again (a re-driven workflow, a retried step): the recorded outcome, nothing new.
    again = customer_line_route(line.pk)
    assert (again.routing, again.run_id) == (Routing.OPENED, str(line_run_id(line.pk)))
    assert Run.objects.filter(ticket=line.ticket).count() == 1


def test_a_message_whose_enqueue_was_lost_is_re_driven_by_the_sweep_and_counted(
    tseeded, monkeypatch, settings
):
    # The receiving process died between the commit and the enqueue: a row, no workflow.
    monkeypatch.setattr(dbos_client, "enqueue_inbound", lambda *a, **k: None)
    row = _store("<lost-handoff@example.org>")
    monkeypatch.undo()
    assert dbos_client.workflow_state(inbound_workflow_id(row.pk)) is None

    # Within the grace period the sweep leaves it to its own enqueue; past it, re-drives it.
    assert intake_sweep(timezone.now())["inbound_redriven"] == 0
    assert intake_sweep(timezone.now() + LATER) == {
        "inbound_redriven": 1,
        "lines_redriven": 0,
        "intake_stuck": 0,
    }
    state = dbos_client.workflow_state(inbound_workflow_id(row.pk))
    assert state is not None and state.active
    # Enqueued again by the next pass: the same workflow, nothing doubled.
    assert intake_sweep(timezone.now() + LATER)["inbound_redriven"] == 0
    settings.DESKHAND_INTAKE_GRACE_SEC = 0  # health reads the real clock
    health = _health()["intake"]
    assert health["inbound_waiting"] == 1 and health["redriven_24h"] == 1
    assert health["stuck"] == 0


def test_a_message_whose_workflow_ended_without_processing_it_is_re_driven_under_a_new_id(
    tseeded,
):
    row = _store("<ended@example.org>")
    # Its workflow ended without doing its work (cancelled here; in life, steps that failed
    # through every retry while the database was away).
    dbos_client.client().cancel_workflow(inbound_workflow_id(row.pk))
    assert intake_sweep(timezone.now() + LATER)["inbound_redriven"] == 1
    redrive = dbos_client.workflow_state(inbound_workflow_id(row.pk, 1))
    assert redrive is not None and redrive.status == "ENQUEUED"


def test_past_every_re_drive_a_waiting_message_is_stuck_and_health_says_so(tseeded, settings):
    row = _store("<stuck@example.org>")
    for attempt in range(4):  # the workflow and its three re-drives all ended
        wid = inbound_workflow_id(row.pk, attempt)
        if attempt:
            dbos_client.enqueue_inbound(row.pk, attempt)
        dbos_client.client().cancel_workflow(wid)
    assert intake_sweep(timezone.now() + LATER) == {
        "inbound_redriven": 0,
        "lines_redriven": 0,
        "intake_stuck": 1,
    }
    settings.DESKHAND_INTAKE_GRACE_SEC = 0  # health reads the real clock
    report = _health()
    assert report["intake"]["stuck"] == 1 and report["ok"] is False


def test_a_line_from_the_api_is_routed_by_its_own_workflow_and_a_lost_one_re_driven(
    dbos_executor, monkeypatch
):
    from tests.api.conftest import new_key
    from tests.api.test_api import post

    token = new_key(["read", "write"])
    monkeypatch.setattr(dbos_client, "enqueue_line", lambda *a, **k: None)  # lost hand-on
    created = post(
        "/api/v1/tickets",
        token,
        {"customer_email": "kim@example.org", "subject": "Hi", "body": "Where is my order?"},
        HTTP_IDEMPOTENCY_KEY="lost-line-1",
    )
    assert created.status_code == 201, created.content
    monkeypatch.undo()
    line = TicketMessage.objects.get(ticket__customer__email="kim@example.org")
    assert line.routing == Routing.PENDING

    counts = reconcile(timezone.now() + LATER)  # the worker's reconciler runs the sweep
    assert counts["lines_redriven"] == 1
    assert dbos_client.workflow_state(line_workflow_id(line.pk)) is not None
    intake_idle()
    line.refresh_from_db()
    assert line.routing == Routing.OPENED and line.routed_run_id == line_run_id(line.pk)


def test_raw_mail_is_pruned_by_the_workers_scheduled_retention(tseeded, settings):
    settings.DESKHAND_INBOUND_RAW_RETENTION_DAYS = 30
    Merchant.objects.update(auto_runs="off")
    row = intake_now(_store("<old@example.org>"))
    report = retention_sweep(now=timezone.now() + dt.timedelta(days=31))
    assert report["inbound_raw_emptied"] == 1
    assert bytes(InboundEmail.objects.get(pk=row.pk).raw) == b""


def test_a_reply_whose_workflow_runs_first_is_still_threaded_after_the_message_it_answers(
    tseeded,
):
    Merchant.objects.update(auto_runs="off")
    first = _store("<order-1@example.org>", subject="Beans never came")
    reply = _store(
        "<order-2@example.org>",
        subject="Re: Beans never came",
        headers={"In-Reply-To": "<order-1@example.org>"},
    )
    # Workers take several messages at once: the reply's workflow may reach it first.
    reply = intake_now(reply)
    first.refresh_from_db()
    assert first.status == reply.status == InboundStatus.THREADED
    assert first.opened_ticket and not reply.opened_ticket
    assert reply.ticket_id == first.ticket_id
    assert intake_now(first).thread_message_id == first.thread_message_id  # done, once


def test_storing_a_message_never_waits_for_the_merchant_lock_the_worker_threads_under(tseeded):
    """The worker threads a batch under the merchant's lock; the receiver must not queue
    behind it (every insert pointing at the merchant checks its key with FOR KEY SHARE)."""
    northwind = Merchant.objects.get(slug="northwind")
    held, release = threading.Event(), threading.Event()

    def worker_holds_the_lock() -> None:
        try:
            with transaction.atomic():
                Merchant.locked(northwind.pk)
                held.set()
                release.wait(timeout=60)
        finally:
            connection.close()

    holder = threading.Thread(target=worker_holds_the_lock)
    holder.start()
    try:
        assert held.wait(timeout=30)
        with connection.cursor() as cur:
            # The store fails with "canceling statement due to lock timeout" if it waits.
            cur.execute("SET lock_timeout = '2s'")
        try:
            row = _store("<under-the-lock@example.org>")
        finally:
            with connection.cursor() as cur:
                cur.execute("RESET lock_timeout")
        assert InboundEmail.objects.filter(pk=row.pk, merchant=northwind).exists()
    finally:
        release.set()
        holder.join(timeout=30)
