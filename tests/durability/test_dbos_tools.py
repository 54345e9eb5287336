"""DBOS's own tools in an operator's hands: ``dbos workflow cancel / resume / fork``.

An operator who knows DBOS reaches for its CLI, not ours. Each test here drives the real
``dbos`` command (a subprocess, on the test database, as an operator would run it) against
runs worked by real DBOS, and checks that Deskhand ends in a state that tells the truth —
at once where a person is told something (a decision), within one reconciler pass
otherwise — and says what happened where people look: the console, ``health --json``, the
attention queue.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

from agent.models import Run
from agent.run.reconciler import reconcile
from approvals.models import Approval, AuditEvent
from deskhand.dbos import client as dbos_client
from deskhand.desk.models import Refund
from tests.durability.helpers import pending_approval, start, user
from tests.fixtures.dbos import ROOT, test_database_url, wait_parked

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "owner@northwind.test"
DBOS_CLI = Path(sys.executable).parent / "dbos"


def dbos(*args: str) -> subprocess.CompletedProcess[str]:
    """``dbos workflow <args>`` against the test database, as an operator types it."""
    assert DBOS_CLI.exists(), f"the dbos CLI is missing at {DBOS_CLI}: run make venv"
    done = subprocess.run(
        [str(DBOS_CLI), "workflow", *args, "--sys-db-url", dbos_client.database_url()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"dbos workflow {' '.join(args)} failed:\n{done.stderr[-3000:]}"
    return done


def manage(*args: str) -> subprocess.CompletedProcess[str]:
    """``manage.py <args>`` in its own process, on the test database."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={"DATABASE_URL": test_database_url(), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_decision_on_a_run_whose_workflow_dbos_cancelled_is_refused_at_once(dbos_executor):
    run = wait_parked(str(start("NW-1", OWNER).id))
    approval = pending_approval(run)
    dbos("cancel", str(run.pk))
    # Our row does not know yet (the reconciler has not passed): DBOS is what is asked.
    assert Run.objects.get(pk=run.pk).status == "awaiting_approval"

    cli = manage("decide", str(approval.pk), "approve", "--as", OWNER)
    assert cli.returncode != 0
    assert "workflow was cancelled in DBOS, outside Deskhand" in cli.stderr
    assert "nothing was recorded" in cli.stderr and "Traceback" not in cli.stderr
    as_json = manage("decide", str(approval.pk), "approve", "--as", OWNER, "--json")
    assert as_json.returncode != 0
    assert json.loads(as_json.stdout)["code"] == "refused"

    web = Client()
    web.force_login(user(OWNER))
    page = web.post(f"/approvals/{approval.pk}/decide", {"decision": "approve"})
    assert page.status_code == 409
    assert "workflow was cancelled in DBOS, outside Deskhand" in page.content.decode()

    approval.refresh_from_db()
    assert approval.status == "pending" and approval.decided_at is None
    assert not AuditEvent.objects.filter(action__startswith="approval.approve").exists()
    assert not Refund.objects.filter(run=run).exists()

    # One reconciler pass and the run says what happened; the approval was withdrawn.
    reconcile()
    run.refresh_from_db()
    assert run.status == "cancelled" and "outside Deskhand" in run.stop_detail
    assert Approval.objects.get(pk=approval.pk).status == "withdrawn"
