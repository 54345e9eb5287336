"""SIGKILL between the other system acting and the ledger recording it: the effect happens once.

Real ``manage.py worker`` subprocesses, killed at ``after_provider`` — the provider (or
mail server) has acted, nothing in this database says so yet — then restarted under the
same executor id, so DBOS recovery re-executes the step, which finds its pending claim.
"""

from __future__ import annotations

import time

import pytest

from agent.models import TERMINAL_STATUSES, Step
from agent.models.ledger import LedgerEntry
from approvals.models import Approval
from deskhand.domain.desk.models import Merchant, OutboundEmail, Refund
from tests.durability.helpers import assert_accounting_matches, decide, start
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.support.waiting import PATIENCE_S

pytestmark = [pytest.mark.crash, pytest.mark.django_db(transaction=True)]

OWNER = "owner@northwind.test"


def test_a_worker_killed_after_the_provider_refunded_and_before_the_record_pays_once(
    worker_process, northwind_pays_at_the_provider
):
    api = northwind_pays_at_the_provider
    worker = worker_process("effects-kill-refund").start(faults="after_provider:issue_refund")
    run = start("NW-1", OWNER)
    wait_parked(str(run.id))
    decide(run, OWNER)
    assert worker.wait_exit(60) == -9
    # The provider made the refund; this database only holds the claim.
    assert len(api.refunds) == 1
    entry = LedgerEntry.objects.get(tool="issue_refund")
    assert entry.state == "pending" and Refund.objects.get().status == "pending"

    worker.start(faults="")
    run = wait_terminal(str(run.id))

    assert run.status == "succeeded", run.summary
    assert len(api.refunds) == 1
    posts = [r for r in api.requests if r.method == "POST"]
    assert len(posts) == 2 and posts[1].replayed
    assert {p.headers["Idempotency-Key"] for p in posts} == {entry.key}
    entry.refresh_from_db()
    assert (entry.state, entry.ok, entry.provider_ref) == ("done", True, api.refunds[0]["id"])
    refund = Refund.objects.get()
    assert (refund.status, refund.provider_refund_id) == ("succeeded", api.refunds[0]["id"])
    step = Step.objects.get(run=run, kind="tool", tool="issue_refund")
    assert step.ok and step.attempts == 1  # the killed attempt wrote no row
    assert_accounting_matches(run)


def test_a_worker_killed_after_the_claim_and_before_the_call_pays_once(
    worker_process, northwind_pays_at_the_provider
):
    api = northwind_pays_at_the_provider
    worker = worker_process("effects-kill-claim").start(faults="after_claim:issue_refund")
    run = start("NW-1", OWNER)
    wait_parked(str(run.id))
    decide(run, OWNER)
    assert worker.wait_exit(60) == -9
    assert api.refunds == [] and LedgerEntry.objects.get(tool="issue_refund").state == "pending"

    worker.start(faults="")
    run = wait_terminal(str(run.id))

    assert run.status == "succeeded", run.summary
    assert len(api.refunds) == 1 and Refund.objects.get().status == "succeeded"
    assert LedgerEntry.objects.get(tool="issue_refund").state == "done"


def drive(worker, run, email: str, timeout: float = PATIENCE_S) -> None:
    """Approve every approval the run asks for; restart the worker whenever it was killed."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        run.refresh_from_db()
        if run.status in TERMINAL_STATUSES:
            return
        if worker.proc is not None and worker.proc.poll() is not None:
            assert worker.proc.returncode == -9, f"worker exited {worker.proc.returncode}"
            worker.start(faults="")
            continue
        if Approval.objects.filter(run=run, status="pending").exists():
            decide(run, email)
        time.sleep(0.05)
    raise AssertionError(f"waited {timeout:.0f} s for run {run.pk} to end; it is {run.status}")


def test_mail_killed_after_the_server_accepted_it_arrives_at_most_twice_with_one_message_id(
    worker_process, smtp_server
):
    Merchant.objects.filter(slug="lumen").update(mail_adapter="smtp")
    worker = worker_process("effects-kill-mail").start(faults="after_provider:send_customer_email")
    run = start("LU-2", "owner@lumen.test")
    drive(worker, run, "owner@lumen.test")
    run.refresh_from_db()

    assert run.status == "succeeded", run.summary
    ids = smtp_server.message_ids()
    assert len(ids) == 2 and len(set(ids)) == 1  # sent again after the kill: the same message
    email = OutboundEmail.objects.get()
    assert email.message_id == ids[0]
    entry = LedgerEntry.objects.get(tool="send_customer_email")
    assert (entry.state, entry.adapter, entry.provider_ref) == ("done", "smtp", ids[0])
    assert smtp_server.logins  # it logged in with the password from the environment


def test_mail_in_a_normal_run_arrives_once(dbos_executor, smtp_server):
    Merchant.objects.filter(slug="lumen").update(mail_adapter="smtp")
    run = start("LU-2", "owner@lumen.test")
    for _ in range(2):
        wait_parked(str(run.id))
        decide(run, "owner@lumen.test")
    run = wait_terminal(str(run.id))

    assert run.status == "succeeded", run.summary
    [message] = smtp_server.messages
    email = OutboundEmail.objects.get()
    assert message["Message-ID"] == email.message_id
    assert message["Subject"] == email.subject
    assert email.customer.email in str(message["To"])
    assert email.customer.email in smtp_server.envelopes[0].rcpt_tos
    assert LedgerEntry.objects.get(tool="send_customer_email").state == "done"
