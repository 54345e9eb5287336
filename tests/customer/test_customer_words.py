"""Customer mail in the customer's words (issue 40): money as they read it, ``Re:`` their own
subject once, and no ticket reference they have never seen, whichever merchant writes."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from agent.providers.policy_reading import Policy
from agent.providers.replies import question_body, reply_body
from deskhand.domain.desk.models import OutboundEmail, TicketMessage
from deskhand.domain.desk.money import display_cents
from deskhand.domain.desk.subjects import reply_subject
from tests.tools.helpers import call, start_run


def test_money_reads_with_the_currencys_symbol_and_its_own_minor_unit():
    assert display_cents(3800, "USD") == "$38.00"
    assert display_cents(1250, "EUR") == "€12.50"
    assert display_cents(4000, "JPY") == "¥4,000"  # a yen has no cents: 4000 minor units
    assert display_cents(123_456_789, "USD") == "$1,234,567.89"
    assert display_cents(1234, "BHD") == "1.234 BHD"  # three digits, and no symbol to use
    with pytest.raises(TypeError):
        display_cents(38.0, "USD")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "theirs",
    [
        "Where is my order?",
        "Re: Where is my order?",
        "Re: Re: Where is my order?",
        "RE: re: Where is my order?",
        "AW: Re[2]: Where is my order?",
    ],
)
def test_an_answer_is_re_the_customers_subject_once(theirs):
    assert reply_subject(theirs) == "Re: Where is my order?"


def _case(reference: str, name: str = "Omar Reyes") -> SimpleNamespace:
    return SimpleNamespace(
        reference=reference,
        ticket={"customer": {"name": name}},
        history=SimpleNamespace(calls=[]),
        order_in_play=lambda: None,
        topic="other",
        policy=lambda: Policy([]),
    )


@pytest.mark.parametrize("status", ["escalated", "resolved"])
def test_the_keyless_replies_never_name_the_tickets_reference(status):
    case = _case("NW-5")
    written = [question_body(case), reply_body(case, SimpleNamespace(status=status, why=""))]
    for body in written:
        assert body.startswith("Hello Omar,")
        assert not re.search(r"\bNW-5\b", body), body  # the subject's tag carries it


def test_every_merchants_email_on_a_ticket_is_threaded_under_the_customers_subject(seeded):
    """Lumen's confirmation of a duplicate charge (``send_customer_email``) left under its own
    title, with no ``Re:``, no tag and no ``In-Reply-To``; it is threaded as a reply is."""
    run = start_run("LU-2")
    customer_line = TicketMessage.objects.get(ticket=run.ticket, kind="customer")
    TicketMessage.objects.filter(pk=customer_line.pk).update(subject="Re: Re: Charged twice")
    args = {
        "reference": "LU-2",
        "subject": "Duplicate charge: refund for LU-2311",
        "body": "You were charged twice; we refunded the second charge.",
    }
    call(run, "send_customer_email", args)
    [email] = OutboundEmail.objects.all()
    assert email.subject == "Re: Charged twice [#LU-2]"
    line = email.thread_message
    assert line.in_reply_to == customer_line.message_id
    assert customer_line.message_id in line.references
