"""Less to the model: tool results carry customer email addresses and phone numbers masked.

What a tool returns is what the step row keeps and what every later model request of
the run repeats, so masking happens where a handler's result becomes the step's output
(``ToolDef.run``), declared per tool in the registry (``ToolDef.unmasked``).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from django.contrib.auth import get_user_model
from hypothesis import given
from hypothesis import strategies as st

from agent.models import Step
from agent.record.execute import execute_tool
from agent.tools import REGISTRY, ToolError
from agent.tools.masking import EMAIL, mask_email, mask_result, mask_text
from agent.tools.registry import Risk, ToolDef, ToolOutcome
from deskhand.domain.desk.models import Ticket, TicketMessage
from tests.tools.helpers import call, context, result, start_run


def test_an_address_keeps_only_its_first_letters_and_top_level_domain():
    assert mask_email("dana.whitfield@example.com") == "d***@e***.com"
    assert (
        mask_text("write to Omar.Reyes@mail.example.co.uk today") == "write to O***@m***.uk today"
    )


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("call me on 555-010-2288", "call me on ***-***-**88"),
        ("+1 (555) 010 2288, evenings", "+* (***) *** **88, evenings"),
        ("my mobile is 07700900123", "my mobile is *********23"),
        ("+44 20 7946 0958", "+** ** **** **58"),
    ],
)
def test_phone_numbers_are_masked_but_their_last_two_digits(text, masked):
    assert mask_text(text) == masked


@pytest.mark.parametrize(
    "text",
    [
        "order NW-1042 was delivered on 2026-03-10",
        "2026-03-10 14:03",
        "placed 2026-03-10T14:03:00+00:00",
        "placed_at_iso 2026-12-01T01:12:34.123452+00:00",
        "pi is 3.14159265",
        "refund 3800 cents of 4800 (1,299.00 USD)",
        "SKU BEAN-ETH-12, tracking 1Z999AA10123456784",
        "ticket LU-2, orders LU-2310 and LU-2311",
        "12345678",
    ],
)
def test_references_dates_and_amounts_are_not_phone_numbers(text):
    assert mask_text(text) == text


@given(st.text())
def test_masking_is_idempotent_and_leaves_no_address(text):
    once = mask_text(text)
    assert mask_text(once) == once
    assert not EMAIL.search(once)


def test_a_result_stays_one_sorted_json_object_and_declared_fields_stay_whole():
    text = json.dumps(
        {"assignee": "agent@northwind.test", "customer": {"email": "dana@example.com"}},
        sort_keys=True,
    )
    out = mask_result(text, unmasked=("assignee",))
    assert json.loads(out) == {
        "assignee": "agent@northwind.test",
        "customer": {"email": "d***@e***.com"},
    }
    assert out == json.dumps(json.loads(out), sort_keys=True)
    assert mask_result("no such thing as bob@example.com") == "no such thing as b***@e***.com"


@pytest.fixture
def nw1(seeded):
    return start_run("NW-1")


def test_the_ticket_reaches_the_model_with_the_customers_address_and_number_masked(nw1):
    ticket = Ticket.objects.get(reference="NW-1")
    ticket.assignee = get_user_model().objects.get(email="agent@northwind.test")
    ticket.save()
    TicketMessage.objects.create(
        ticket=ticket,
        kind="customer",
        body="Reach me at dana.w@home.example.org or +1 (555) 010-2288.",
    )
    out = result(call(nw1, "get_ticket", {"reference": "NW-1"}))
    assert out["customer"]["email"] == "d***@e***.com"
    assert out["messages"][-1]["body"] == "Reach me at d***@h***.org or +* (***) ***-**88."
    # A staff member's work address is what assign_ticket takes: the registry keeps it whole.
    assert out["assignee"] == "agent@northwind.test"
    assert REGISTRY["get_ticket"].unmasked == ("assignee",)


def test_the_step_row_keeps_the_masked_form_the_model_saw(nw1):
    call_ = {"id": "toolu_1", "name": "get_order", "input": {"reference": "NW-1042"}}
    out = execute_tool(str(nw1.pk), 1, call_)
    assert out.ok and "d***@e***.com" in out.text
    assert "dana.whitfield@example.com" not in out.text
    step = Step.objects.get(run=nw1, seq=1)
    assert step.payload.text == out.text  # type: ignore[union-attr]


def test_get_customer_takes_the_address_as_the_model_saw_it_and_only_for_its_ticket(nw1):
    out = result(call(nw1, "get_customer", {"email": "d***@e***.com"}))
    assert out["name"] == "Dana Whitfield"
    assert [o["reference"] for o in out["orders"]] == ["NW-1042"]
    # Omar Reyes's address masks as o***@e***.com: the ticket is Dana's, so it names no one.
    with pytest.raises(ToolError, match="not the email of the customer on this ticket"):
        call(nw1, "get_customer", {"email": "o***@e***.com"})


def test_a_tool_whose_purpose_needs_an_address_declares_it(nw1):
    def handler(ctx, args):
        return ToolOutcome(text=json.dumps({"to": "dana@example.com", "note": "dana@example.com"}))

    tool = ToolDef(
        name="contact_card",
        description="x",
        risk=Risk.READ,
        input_schema={"type": "object", "additionalProperties": False, "properties": {}},
        handler=handler,
        unmasked=("to",),
    )
    out = json.loads(tool.run(context(nw1), {}).text)
    assert out == {"to": "dana@example.com", "note": "d***@e***.com"}
    assert json.loads(dataclasses.replace(tool, unmasked=()).run(context(nw1), {}).text)["to"] == (
        "d***@e***.com"
    )
