"""Retention: past its merchant's period a finished run loses its words and its DBOS history.

The clock is the scheduled workflow's own input (the time the firing was scheduled
for), so the test starts that workflow in the in-process executor 91 days on.
Northwind keeps runs' words 90 days, Lumen 365: one tenant's sweep is the other's no-op.
"""

from __future__ import annotations

import datetime as dt
import html
from collections.abc import Iterator

import pytest
from django.db import connection
from django.utils import timezone

from agent.models import Run, Step
from agent.models.ledger import LedgerEntry
from agent.models.privacy import Redaction
from agent.privacy.retention import retention_sweep
from agent.replay.fork import fork_run
from agent.run.services import RunRefused
from approvals.models import Approval
from deskhand.domain.desk.models import Merchant, Refund
from deskhand.infra.dbos import client as dbos_client
from deskhand.infra.dbos.names import SCHEDULED_WORKFLOWS
from tests.console.conftest import client_for
from tests.durability.helpers import decide, start, user
from tests.edge.test_cli_conventions import cli
from tests.fixtures.dbos import wait_terminal, workflow_settled
from tests.privacy.helpers import where_found
from tests.support.fake_anthropic import policy_double, settle
from tests.support.messages_api import MessagesApi

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "owner@northwind.test"


@pytest.fixture
def api(settings) -> Iterator[MessagesApi]:
    with policy_double(settings, "claude-sonnet-4-6") as double:
        yield double


def finished(ticket: str, owner: str) -> Run:
    """Work ``ticket`` to its end, approving what it asks."""
    run = settle(start(ticket, owner))
    while run.status == "awaiting_approval":
        decide(run, owner)
        run = settle(run)
    workflow_settled(str(run.id))
    return run


def ledger() -> list[tuple[object, ...]]:
    return sorted(
        (e.key, e.args_hash, e.identity, e.arguments, e.ok, e.result, e.created_at)
        for e in LedgerEntry.objects.all()
    )


def test_past_its_retention_a_run_is_redacted_its_dbos_history_deleted_and_its_ledger_kept(
    dbos_executor, api
):
    from dbos import DBOS

    from deskhand.engine.schedules import retention_workflow
    from deskhand.infra.dbos.names import RETENTION_SCHEDULE

    Merchant.objects.filter(slug="northwind").update(retention_days=90)
    Merchant.objects.filter(slug="lumen").update(retention_days=365)
    nw1 = finished("NW-1", OWNER)
    lu2 = finished("LU-2", "owner@lumen.test")
    assert Refund.objects.count() == 2
    before = ledger()
    lumen_steps = list(Step.objects.filter(run=lu2).values_list("seq", "result"))

    # The schedule the worker registered is this workflow's, and the sweeps it trims are ours.
    with connection.cursor() as cur:
        cur.execute("SELECT schedule_name, workflow_name FROM dbos.workflow_schedules")
        schedules = dict(cur.fetchall())
    assert schedules[RETENTION_SCHEDULE] == "privacy.retention_sweep"
    assert set(SCHEDULED_WORKFLOWS) == set(schedules.values())

    # A firing 89 days on finds nothing old enough; 91 days on, Northwind's run.
    early = timezone.now() + dt.timedelta(days=89)
    assert (
        DBOS.start_workflow(retention_workflow, early.isoformat(), None).get_result()[
            "runs_redacted"
        ]
        == 0
    )
    later = timezone.now() + dt.timedelta(days=91)
    report = DBOS.start_workflow(retention_workflow, later.isoformat(), None).get_result()
    assert (report["runs_redacted"], report["dbos_deleted"]) == (1, 1)

    [redaction] = Redaction.objects.all()
    assert (redaction.run_id, redaction.reason) == (nw1.id, "retention")
    assert redaction.what["steps"] == nw1.steps and redaction.what["dbos_history"] == "deleted"
    # The payloads and transcript are gone (the customer's words and name with them) …
    model = Step.objects.filter(run=nw1, kind="model").first()
    assert model is not None and {
        b.get("text") for b in model.result["content"] if b["type"] == "text"
    } <= {"[redacted]"}
    assert all(s.payload.text == "[redacted]" for s in Step.objects.filter(run=nw1, kind="tool"))  # type: ignore[union-attr]
    assert "Whitfield" not in str(
        list(Step.objects.filter(run=nw1).values_list("result", "arguments"))
    )
    # … DBOS's history of it is deleted, Lumen's is whole, and every ledger entry is kept.
    assert dbos_client.workflow_states([str(nw1.id), str(lu2.id)]).keys() == {str(lu2.id)}
    assert where_found(["Whitfield"], schemas=("dbos",)) == []
    assert ledger() == before
    assert sorted(Refund.objects.values_list("amount_cents", flat=True)) == [3800, 17900]
    assert Approval.objects.get(run=nw1, tool="issue_refund").arguments["amount_cents"] == 3800
    assert list(Step.objects.filter(run=lu2).values_list("seq", "result")) == lumen_steps

    # Replay and fork refuse in one sentence; the run page says what was redacted and when.
    for argv in (["replay", str(nw1.id)], ["replay", str(nw1.id), "--at", "2"]):
        code, out, err = cli(*argv)
        assert code == 1 and out == "" and err.count("\n") == 1, (argv, err)
        assert "redacted by the merchant's retention period" in err
    with pytest.raises(RunRefused, match="cannot be replayed or forked"):
        fork_run(run=nw1, seq=1, user=user(OWNER))
    page = html.unescape(client_for(OWNER).get(f"/runs/{nw1.id}/").content.decode())
    assert f"Redacted on {later:%Y-%m-%d}" in page and "keeps runs' words for 90 days" in page
    assert "DBOS history (deleted)" in page and "What the model was sent" not in page
    sent = client_for(OWNER).get(f"/runs/{nw1.id}/steps/1/sent")
    assert sent.status_code == 410

    # A second sweep finds nothing left to do.
    assert retention_sweep(now=later)["runs_redacted"] == 0


def test_a_run_still_in_flight_is_left_alone_however_old(dbos_executor, api):
    Merchant.objects.filter(slug="northwind").update(retention_days=1)
    run = settle(start("NW-1", OWNER))
    assert run.status == "awaiting_approval"
    report = retention_sweep(now=timezone.now() + dt.timedelta(days=30))
    assert report["runs_redacted"] == 0 and not Redaction.objects.exists()
    assert dbos_client.workflow_states([str(run.id)])[str(run.id)].active
    decide(run, OWNER)
    assert wait_terminal(str(run.id)).status == "succeeded"
