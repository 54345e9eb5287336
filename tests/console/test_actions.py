"""Writes from the console: role-gated, POST-only, and a clear 4xx that writes nothing on bad input."""

from __future__ import annotations

import uuid

import pytest

from agent.models import Run, Step
from approvals.models import Approval, AuditEvent, StaffNote
from deskhand.domain.desk.models import Ticket
from tests.console.conftest import (
    NW_OWNER,
    NW_VIEWER,
    client_for,
    make_approval,
    make_run,
    model_step,
    tool_step,
)


def snapshot() -> tuple[int, ...]:
    return (
        Run.objects.count(),
        Step.objects.count(),
        StaffNote.objects.count(),
        AuditEvent.objects.count(),
        Approval.objects.filter(status="pending").count(),
    )


# --- start ----------------------------------------------------------------------------


def test_an_owner_starts_a_run_from_the_ticket_page(seeded, fake_dbos):
    response = client_for(NW_OWNER).post("/tickets/NW-1/run")
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert fake_dbos.calls == [("enqueue", str(run.pk))]
    assert AuditEvent.objects.filter(action="run.start", channel="web", run=run).exists()


def test_a_second_open_run_on_a_ticket_is_refused_with_409(seeded, fake_dbos):
    make_run("NW-1")
    before = snapshot()
    response = client_for(NW_OWNER).post("/tickets/NW-1/run")
    assert response.status_code == 409
    assert "already has an open run" in response.content.decode()
    assert snapshot() == before


def test_a_viewer_cannot_start_a_run(seeded, fake_dbos):
    response = client_for(NW_VIEWER).post("/tickets/NW-1/run")
    assert response.status_code == 403
    assert "viewer" in response.content.decode()
    assert Run.objects.count() == 0 and fake_dbos.calls == []
    assert "Run the agent" not in client_for(NW_VIEWER).get("/tickets/NW-1/").content.decode()


def test_actions_only_allow_post(seeded):
    run = make_run("NW-1")
    approval = make_approval(run)
    c = client_for(NW_OWNER)
    for url in (
        "/tickets/NW-1/run",
        f"/runs/{run.pk}/cancel",
        f"/runs/{run.pk}/steer",
        f"/runs/{run.pk}/steps/1/undo",
        f"/approvals/{approval.pk}/decide",
    ):
        assert c.get(url).status_code == 405, url


# --- decide ---------------------------------------------------------------------------


@pytest.fixture
def gate(seeded):
    return make_approval(make_run("NW-1", status="awaiting_approval"))


def test_an_owner_approves_with_a_reason(gate, fake_dbos):
    response = client_for(NW_OWNER).post(
        f"/approvals/{gate.pk}/decide",
        {"decision": "approve", "reason": "policy allows it", "next": f"/runs/{gate.run_id}/"},
    )
    assert response.status_code == 302 and response["Location"] == f"/runs/{gate.run_id}/"
    gate.refresh_from_db()
    assert gate.status == "approved" and gate.decided_by.email == NW_OWNER and gate.channel == "web"
    assert gate.reason == "policy allows it"
    assert fake_dbos.calls[0][0] == "send"


def test_a_decision_is_made_once(gate, fake_dbos):
    c = client_for(NW_OWNER)
    assert (
        c.post(f"/approvals/{gate.pk}/decide", {"decision": "deny", "reason": "no"}).status_code
        == 302
    )
    second = c.post(f"/approvals/{gate.pk}/decide", {"decision": "approve"})
    assert second.status_code == 409
    assert f"Already denied by {NW_OWNER} at " in second.content.decode()
    gate.refresh_from_db()
    assert gate.status == "denied"


def test_an_offsite_next_is_ignored(gate, fake_dbos):
    response = client_for(NW_OWNER).post(
        f"/approvals/{gate.pk}/decide", {"decision": "approve", "next": "https://evil.example/"}
    )
    assert response["Location"] == "/approvals/"


def test_a_viewer_sees_no_decision_buttons_and_a_direct_post_is_refused(gate, fake_dbos):
    c = client_for(NW_VIEWER)
    for url in ("/approvals/", f"/runs/{gate.run_id}/"):
        body = c.get(url).content.decode()
        # The card, headed with the call in words (the agent's own preview is one click away).
        assert "Refund $19.00 on order NW-1042" in body and 'value="approve"' not in body, url
    response = c.post(f"/approvals/{gate.pk}/decide", {"decision": "approve"})
    assert response.status_code == 403
    assert "viewer" in response.content.decode()
    gate.refresh_from_db()
    assert gate.status == "pending" and fake_dbos.calls == []


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"decision": ""},
        {"decision": "maybe"},
        {"decision": "deny"},  # a denial needs a reason
        {"decision": "deny", "reason": "   "},
        {"decision": "approve", "reason": "x" * 501},
        {"decision": "approve", "reason": "x" * 100_000},
    ],
)
def test_bad_decision_input_is_a_400_and_writes_nothing(gate, fake_dbos, data):
    before = snapshot()
    response = client_for(NW_OWNER).post(f"/approvals/{gate.pk}/decide", data)
    assert response.status_code == 400
    assert snapshot() == before and fake_dbos.calls == []


def test_missing_csrf_is_refused_and_writes_nothing(gate, fake_dbos):
    c = client_for(NW_OWNER, enforce_csrf_checks=True)
    before = snapshot()
    for url, data in (
        (f"/approvals/{gate.pk}/decide", {"decision": "approve"}),
        ("/tickets/NW-2/run", {}),
        (f"/runs/{gate.run_id}/steer", {"body": "hello"}),
        (f"/runs/{gate.run_id}/cancel", {}),
    ):
        assert c.post(url, data).status_code == 403, url
    assert snapshot() == before and fake_dbos.calls == []


# --- malformed and unknown ids ---------------------------------------------------------


def test_malformed_and_unknown_ids_are_404_never_500(gate, fake_dbos):
    c = client_for(NW_OWNER)
    unknown = uuid.uuid4()
    for url in (
        "/runs/not-a-uuid/",
        f"/runs/{unknown}/",
        f"/runs/{unknown}/steps",
        f"/runs/{unknown}/stream",
        "/runs/1234/steps",
        "/tickets/NO-SUCH/",
        "/tickets/" + "x" * 300 + "/",
        "/approvals/nope/decide",
    ):
        assert c.get(url).status_code in (404, 405), url
    before = snapshot()
    for url in (
        f"/approvals/{unknown}/decide",
        f"/runs/{unknown}/cancel",
        f"/runs/{unknown}/steer",
        f"/runs/{gate.run_id}/steps/99999999999999999999/undo",
        "/tickets/NO-SUCH/run",
    ):
        assert c.post(url, {"decision": "approve", "body": "x"}).status_code == 404, url
    assert snapshot() == before


@pytest.mark.parametrize(
    "url",
    [
        "/runs/?cursor=garbage",
        "/runs/?cursor=" + "A" * 500,
        "/runs/?status=bogus",
        "/runs/?stop_reason=nope",
        "/runs/?q=" + "x" * 101,
        "/tickets/?priority=bogus",
        "/tickets/?before=-3",
        "/tickets/?before=abc",
    ],
)
def test_bad_list_parameters_are_a_400(seeded, url):
    assert client_for(NW_OWNER).get(url).status_code == 400


def test_a_bad_step_cursor_is_a_400(gate):
    c = client_for(NW_OWNER)
    assert c.get(f"/runs/{gate.run_id}/steps?after=abc").status_code == 400
    assert c.get(f"/runs/{gate.run_id}/stream", headers={"Last-Event-ID": "-1"}).status_code == 400


# --- steer and cancel -------------------------------------------------------------------


def test_steer_sends_a_note_to_a_live_run(seeded, fake_dbos):
    run = make_run("NW-1")
    response = client_for(NW_OWNER).post(
        f"/runs/{run.pk}/steer", {"body": "Check the delivery date first."}
    )
    assert response.status_code == 302
    assert StaffNote.objects.get(run=run).body == "Check the delivery date first."
    assert fake_dbos.calls[0][0] == "send"


@pytest.mark.parametrize("body", ["", "   ", "x" * 4001])
def test_an_empty_or_oversized_note_is_a_400(seeded, fake_dbos, body):
    run = make_run("NW-1")
    before = snapshot()
    assert client_for(NW_OWNER).post(f"/runs/{run.pk}/steer", {"body": body}).status_code == 400
    assert snapshot() == before and fake_dbos.calls == []


def test_steering_a_finished_run_is_a_409(seeded, fake_dbos):
    run = make_run("NW-1", status="succeeded")
    assert client_for(NW_OWNER).post(f"/runs/{run.pk}/steer", {"body": "hello"}).status_code == 409
    assert not StaffNote.objects.exists()


def test_cancel_ends_the_run_truthfully(seeded, fake_dbos):
    run = make_run("NW-1", status="awaiting_approval")
    approval = make_approval(run)
    response = client_for(NW_OWNER).post(f"/runs/{run.pk}/cancel")
    assert response.status_code == 302
    run.refresh_from_db()
    approval.refresh_from_db()
    assert run.status == "cancelled" and run.stop_reason == "cancelled"
    assert approval.status == "withdrawn" and approval.decided_by.email == NW_OWNER
    assert Step.objects.filter(run=run, kind="bound").exists()
    assert ("cancel", str(run.pk)) in fake_dbos.calls
    assert client_for(NW_OWNER).post(f"/runs/{run.pk}/cancel").status_code == 409


def test_a_viewer_cannot_steer_or_cancel(seeded, fake_dbos):
    run = make_run("NW-1")
    c = client_for(NW_VIEWER)
    before = snapshot()
    assert c.post(f"/runs/{run.pk}/steer", {"body": "hi"}).status_code == 403
    assert c.post(f"/runs/{run.pk}/cancel").status_code == 403
    assert snapshot() == before
    run.refresh_from_db()
    assert run.status == "running"
    body = c.get(f"/runs/{run.pk}/").content.decode()
    assert "Cancel run" not in body and "Send note" not in body


# --- undo -------------------------------------------------------------------------------


@pytest.fixture
def reversible(seeded):
    run = make_run("NW-1", status="succeeded")
    ticket = run.ticket
    model_step(run, 1, tool="set_priority", args={"priority": "urgent"})
    Ticket.objects.filter(pk=ticket.pk).update(priority="urgent")
    tool_step(
        run,
        2,
        "set_priority",
        {"priority": "urgent"},
        "Priority set to urgent.",
        risk="reversible",
        inverse={"op": "set_priority", "ticket_id": ticket.pk, "priority": "normal"},
    )
    return run


def test_undo_applies_the_inverse_and_records_a_new_step(reversible):
    c = client_for(NW_OWNER)
    assert "Undo this" in c.get(f"/runs/{reversible.pk}/").content.decode()
    response = c.post(f"/runs/{reversible.pk}/steps/2/undo")
    assert response.status_code == 302
    assert Ticket.objects.get(pk=reversible.ticket_id).priority == "normal"
    undo = Step.objects.get(run=reversible, seq=3)
    assert undo.kind == "undo" and undo.result["undid_seq"] == 2
    assert Step.objects.get(run=reversible, seq=2).undone_by_id == undo.pk
    assert AuditEvent.objects.filter(action="step.undo", run=reversible).exists()
    reversible.refresh_from_db()
    assert reversible.steps == 3
    # Once is enough.
    again = c.post(f"/runs/{reversible.pk}/steps/2/undo")
    assert again.status_code == 409 and "already undone" in again.content.decode()


def test_undo_is_refused_for_steps_without_an_inverse_and_for_live_runs(reversible):
    c = client_for(NW_OWNER)
    before = snapshot()
    assert c.post(f"/runs/{reversible.pk}/steps/1/undo").status_code == 409
    assert c.post(f"/runs/{reversible.pk}/steps/42/undo").status_code == 409
    Run.objects.filter(pk=reversible.pk).update(status="running")
    assert c.post(f"/runs/{reversible.pk}/steps/2/undo").status_code == 409
    assert snapshot() == before
    assert Ticket.objects.get(pk=reversible.ticket_id).priority == "urgent"


def test_a_viewer_cannot_undo(reversible):
    c = client_for(NW_VIEWER)
    assert "Undo this" not in c.get(f"/runs/{reversible.pk}/").content.decode()
    assert c.post(f"/runs/{reversible.pk}/steps/2/undo").status_code == 403
    assert Ticket.objects.get(pk=reversible.ticket_id).priority == "urgent"
