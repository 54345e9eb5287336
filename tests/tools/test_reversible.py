"""Reversible tools: they touch only the run's own ticket and record a working undo."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from agent.tools import ToolError
from deskhand.domain.desk.models import MessageKind, Ticket, TicketMessage
from deskhand.domain.desk.services import DomainError, inverse_apply
from tests.tools.helpers import call, result, start_run


@pytest.fixture
def nw2(seeded):
    """A run on NW-2 (Omar, "Where is my order?")."""
    return start_run("NW-2")


def _ticket(reference: str) -> Ticket:
    return Ticket.objects.get(reference=reference)


def test_tagging_keeps_existing_tags_and_undo_restores_them(nw2):
    Ticket.objects.filter(reference="NW-2").update(tags=["shipping"])
    outcome = call(nw2, "tag_ticket", {"reference": "NW-2", "tags": ["Late", "shipping", "late"]})
    assert result(outcome) == {"reference": "NW-2", "changed": True, "tags": ["shipping", "late"]}
    assert _ticket("NW-2").tags == ["shipping", "late"]
    assert outcome.inverse == {"op": "set_tags", "ticket_id": nw2.ticket_id, "tags": ["shipping"]}

    inverse_apply(merchant_id=nw2.merchant_id, inverse=outcome.inverse)
    assert _ticket("NW-2").tags == ["shipping"]


def test_a_change_that_changes_nothing_records_no_inverse(nw2):
    outcome = call(nw2, "set_priority", {"reference": "NW-2", "priority": "normal"})
    assert result(outcome) == {"reference": "NW-2", "changed": False, "priority": "normal"}
    assert outcome.inverse is None
    again = call(nw2, "tag_ticket", {"reference": "NW-2", "tags": ["x"]})
    repeat = call(nw2, "tag_ticket", {"reference": "NW-2", "tags": ["X "]})
    assert again.inverse is not None and repeat.inverse is None


def test_priority_and_status_changes_can_be_undone(nw2):
    priority = call(nw2, "set_priority", {"reference": "NW-2", "priority": "urgent"})
    status = call(nw2, "set_ticket_status", {"reference": "NW-2", "status": "escalated"})
    assert result(priority) == {"reference": "NW-2", "changed": True, "priority": "urgent"}
    assert result(status) == {"reference": "NW-2", "changed": True, "status": "escalated"}
    assert (_ticket("NW-2").priority, _ticket("NW-2").status) == ("urgent", "escalated")
    assert priority.inverse == {
        "op": "set_priority",
        "ticket_id": nw2.ticket_id,
        "priority": "normal",
    }

    assert "back to open" in inverse_apply(merchant_id=nw2.merchant_id, inverse=status.inverse)
    inverse_apply(merchant_id=nw2.merchant_id, inverse=priority.inverse)
    assert (_ticket("NW-2").priority, _ticket("NW-2").status) == ("normal", "open")


def test_a_ticket_is_assigned_only_to_someone_at_the_same_merchant(nw2):
    with pytest.raises(
        ToolError, match=r"no one at this merchant has the email 'agent@lumen\.test'"
    ):
        call(nw2, "assign_ticket", {"reference": "NW-2", "assignee_email": "agent@lumen.test"})
    assert _ticket("NW-2").assignee is None

    outcome = call(
        nw2, "assign_ticket", {"reference": "NW-2", "assignee_email": "Agent@Northwind.test"}
    )
    assert result(outcome) == {
        "reference": "NW-2",
        "changed": True,
        "assignee": "agent@northwind.test",
    }
    assert _ticket("NW-2").assignee == User.objects.get(username="agent@northwind.test")
    assert outcome.inverse == {
        "op": "set_assignee",
        "ticket_id": nw2.ticket_id,
        "assignee_id": None,
    }

    assert inverse_apply(merchant_id=nw2.merchant_id, inverse=outcome.inverse) == "Unassigned NW-2."
    assert _ticket("NW-2").assignee is None


def test_an_internal_note_is_stamped_with_the_run_and_can_be_removed(nw2):
    outcome = call(
        nw2, "add_internal_note", {"reference": "NW-2", "body": "  Inside the shipping window.  "}
    )
    out = result(outcome)
    note = TicketMessage.objects.get(pk=out["note_id"])
    assert (out["reference"], out["changed"]) == ("NW-2", True)
    assert (note.kind, note.body, note.run_id) == (
        MessageKind.NOTE,
        "Inside the shipping window.",
        nw2.id,
    )
    assert outcome.inverse == {"op": "delete_message", "message_id": note.pk}

    inverse_apply(merchant_id=nw2.merchant_id, inverse=outcome.inverse)
    assert not TicketMessage.objects.filter(pk=note.pk).exists()
    assert _ticket("NW-2").messages.filter(kind=MessageKind.CUSTOMER).count() == 1


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("tag_ticket", {"reference": "NW-1", "tags": ["vip"]}),
        ("set_priority", {"reference": "NW-1", "priority": "low"}),
        ("set_ticket_status", {"reference": "NW-1", "status": "resolved"}),
        ("assign_ticket", {"reference": "NW-1", "assignee_email": "agent@northwind.test"}),
        ("add_internal_note", {"reference": "NW-1", "body": "sneaky"}),
    ],
)
def test_ticket_writes_are_limited_to_the_runs_own_ticket(nw2, tool, args):
    before = Ticket.objects.values().get(reference="NW-1")
    with pytest.raises(ToolError, match="only read or change its own ticket"):
        call(nw2, tool, args)
    assert Ticket.objects.values().get(reference="NW-1") == before
    assert _ticket("NW-1").messages.count() == 1


def test_ticket_writes_cannot_reach_another_merchant(nw2):
    lumen_ticket = Ticket.objects.values().get(reference="LU-1")
    with pytest.raises(ToolError, match="no ticket 'LU-1' for this merchant"):
        call(nw2, "set_ticket_status", {"reference": "LU-1", "status": "resolved"})
    assert Ticket.objects.values().get(reference="LU-1") == lumen_ticket


def test_an_inverse_cannot_cross_merchants(seeded):
    lumen_run = start_run("LU-1")
    outcome = call(lumen_run, "set_ticket_status", {"reference": "LU-1", "status": "pending"})
    northwind_id = _ticket("NW-1").merchant_id
    with pytest.raises(DomainError, match="not a ticket of this merchant"):
        inverse_apply(merchant_id=northwind_id, inverse=outcome.inverse)
    assert _ticket("LU-1").status == "pending"

    note = call(lumen_run, "add_internal_note", {"reference": "LU-1", "body": "Warranty case."})
    with pytest.raises(DomainError, match="not on any ticket of this merchant"):
        inverse_apply(merchant_id=northwind_id, inverse=note.inverse)
    assert TicketMessage.objects.filter(pk=note.inverse["message_id"]).exists()


def test_an_inverse_cannot_delete_the_customers_words(nw2):
    message = _ticket("NW-2").messages.get()
    with pytest.raises(DomainError, match="only an internal note can be removed"):
        inverse_apply(
            merchant_id=nw2.merchant_id, inverse={"op": "delete_message", "message_id": message.pk}
        )
    assert TicketMessage.objects.filter(pk=message.pk).exists()


@pytest.mark.parametrize(
    "inverse",
    [
        {"op": "drop_table", "ticket_id": 1},
        {"op": "set_status", "ticket_id": "1", "status": "open"},
        {"op": "set_priority", "ticket_id": None, "priority": "low"},
        "set_status",
    ],
)
def test_a_malformed_inverse_is_refused(nw2, inverse):
    with pytest.raises(DomainError):
        inverse_apply(merchant_id=nw2.merchant_id, inverse=inverse)


def test_an_inverse_refuses_values_outside_the_domain(nw2):
    bad = {"op": "set_status", "ticket_id": nw2.ticket_id, "status": "deleted"}
    with pytest.raises(DomainError, match="unknown status"):
        inverse_apply(merchant_id=nw2.merchant_id, inverse=bad)
    outsider = User.objects.get(username="agent@lumen.test")
    assign = {"op": "set_assignee", "ticket_id": nw2.ticket_id, "assignee_id": outsider.pk}
    with pytest.raises(DomainError, match="not a member of this merchant"):
        inverse_apply(merchant_id=nw2.merchant_id, inverse=assign)
    assert _ticket("NW-2").assignee is None
