"""A Northwind person never sees, nor touches, a Lumen thing: it 404s as if it did not exist."""

from __future__ import annotations

import pytest

from agent.models import Run, Step
from approvals.models import Approval, AuditEvent, StaffNote
from deskhand.domain.desk.models import Customer, Ticket
from tests.console.conftest import (
    LU_OWNER,
    NW_OWNER,
    client_for,
    make_approval,
    make_run,
    model_step,
    tool_step,
)


@pytest.fixture
def lumen_run(seeded):
    run = make_run("LU-1", "lumen", status="succeeded")
    model_step(run, 1, text="Lumen only.")
    tool_step(
        run,
        2,
        "set_priority",
        {"priority": "high"},
        "done",
        risk="reversible",
        inverse={"op": "set_priority", "ticket_id": run.ticket_id, "priority": "normal"},
    )
    return run


def test_a_northwind_user_gets_404_for_every_lumen_run_url(lumen_run, fake_dbos):
    c = client_for(NW_OWNER)
    for url in (
        f"/runs/{lumen_run.pk}/",
        f"/runs/{lumen_run.pk}/steps",
        f"/runs/{lumen_run.pk}/steps?after=1",
        f"/runs/{lumen_run.pk}/stream",
    ):
        assert c.get(url).status_code == 404, url
    before = (Step.objects.count(), StaffNote.objects.count(), AuditEvent.objects.count())
    for url, data in (
        (f"/runs/{lumen_run.pk}/cancel", {}),
        (f"/runs/{lumen_run.pk}/steer", {"body": "hi"}),
        (f"/runs/{lumen_run.pk}/steps/2/undo", {}),
    ):
        assert c.post(url, data).status_code == 404, url
    assert (Step.objects.count(), StaffNote.objects.count(), AuditEvent.objects.count()) == before
    assert fake_dbos.calls == []


def test_a_lumen_approval_cannot_be_decided_from_northwind(seeded, fake_dbos):
    approval = make_approval(make_run("LU-2", "lumen", status="awaiting_approval"), order="LU-2310")
    c = client_for(NW_OWNER)
    assert c.post(f"/approvals/{approval.pk}/decide", {"decision": "approve"}).status_code == 404
    approval.refresh_from_db()
    assert approval.status == "pending" and fake_dbos.calls == []
    assert "LU-2310" not in c.get("/approvals/").content.decode()
    assert "LU-2310" in client_for(LU_OWNER).get("/approvals/").content.decode()


def test_lists_and_search_show_only_the_users_merchant(lumen_run):
    nw_run = make_run("NW-2", status="succeeded")
    c = client_for(NW_OWNER)
    body = c.get("/runs/").content.decode()
    assert str(nw_run.pk)[:8] in body and str(lumen_run.pk)[:8] not in body
    link = f'href="/runs/{lumen_run.pk}/"'
    assert link not in c.get("/runs/", {"q": str(lumen_run.pk)}).content.decode()
    assert link not in c.get("/runs/", {"q": "LU-1"}).content.decode()
    assert link in client_for(LU_OWNER).get("/runs/", {"q": str(lumen_run.pk)}).content.decode()
    tickets = c.get("/tickets/").content.decode()
    assert "NW-1" in tickets and "LU-1" not in tickets
    assert c.get("/tickets/LU-1/").status_code == 404


def test_ticket_references_are_per_merchant(seeded):
    # Lumen gets a ticket that happens to share Northwind's reference.
    lumen = Customer.objects.filter(merchant__slug="lumen").first()
    Ticket.objects.create(
        merchant=lumen.merchant, customer=lumen, reference="NW-1", subject="Lumen's own NW-1"
    )
    assert "Lumen&#x27;s own NW-1" in client_for(LU_OWNER).get("/tickets/NW-1/").content.decode()
    northwind = client_for(NW_OWNER).get("/tickets/NW-1/").content.decode()
    assert "Lumen" not in northwind.split("<main")[1]


def test_approval_and_run_counts_are_scoped(lumen_run):
    make_approval(make_run("LU-2", "lumen", status="awaiting_approval"), order="LU-2310")
    body = client_for(NW_OWNER).get("/").content.decode()
    assert "<strong>0</strong> approvals waiting" in body
    assert Approval.objects.count() == 1 and Run.objects.count() == 2
