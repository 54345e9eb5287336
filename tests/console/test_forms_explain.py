"""Forms that explain (issue 29): money typed in the order's currency, an empty bulk decision,
an over-long note, a card already decided — each answered on the page, in words."""

from __future__ import annotations

import pytest

from agent.tools import args_hash
from approvals.models import Approval, StaffNote
from deskhand.domain.desk.money import AmountRefused, parse_amount, typed_units
from deskhand.web.console import words
from tests.console.conftest import NW_OWNER, client_for, make_approval, make_run


@pytest.mark.parametrize(
    ("typed", "cents"),
    [
        ("150", 15000),
        ("150.00", 15000),
        ("1.5", 150),
        ("1.50", 150),
        ("$1,250.00", 125000),
        (" 0.05 ", 5),
        ("12 USD", 1200),
        (".5", 50),
    ],
)
def test_money_is_read_as_people_type_it(typed, cents):
    assert parse_amount(typed, "USD") == cents


@pytest.mark.parametrize(
    ("typed", "why"),
    [
        ("", "Type an amount"),
        ("1.505", "more than two decimals"),
        ("-3", "negative"),
        ("abc", "is not an amount"),
        ("1.2.3", "is not an amount"),
        ("1e3", "is not an amount"),
    ],
)
def test_money_that_is_not_an_amount_is_refused_with_a_sentence(typed, why):
    with pytest.raises(AmountRefused, match=why):
        parse_amount(typed, "USD")


@pytest.mark.parametrize(
    ("typed", "currency", "minor"),
    [("4000", "JPY", 4000), ("¥4,000", "JPY", 4000), ("3.8", "KWD", 3800), ("1.250", "KWD", 1250)],
)
def test_money_is_read_in_its_own_currencys_digits(typed, currency, minor):
    assert parse_amount(typed, currency) == minor
    assert parse_amount(typed_units(minor, currency), currency) == minor


@pytest.mark.parametrize(
    ("typed", "currency", "why"),
    [("40.00", "JPY", "more decimals than JPY has \\(0\\): type it like 12"),
     ("1.2505", "KWD", "more decimals than KWD has \\(3\\): type it like 12.500")],
)  # fmt: skip
def test_more_decimals_than_the_currency_has_are_refused(typed, currency, why):
    with pytest.raises(AmountRefused, match=why):
        parse_amount(typed, currency)


def test_codes_read_as_words():
    assert words.stop_reason("end_turn") == "finished its work"
    assert words.argument("amount_cents") == "Amount"
    assert words.tool("issue_refund") == "Refund"
    assert words.duration(86400) == "1 day"
    assert words.duration(5400) == "1 hour 30 minutes"


@pytest.fixture
def gate(seeded) -> Approval:
    run = make_run("NW-1", status="awaiting_approval")
    args = {"order_reference": "NW-1042", "amount_cents": 4800, "reason": "stale beans"}
    return make_approval(run, amount_cents=4800, args_hash=args_hash("issue_refund", args))


def _decide(gate: Approval, **data: str):
    return client_for(NW_OWNER).post(
        f"/approvals/{gate.pk}/decide", {"decision": "approve", "tool": "issue_refund", **data}
    )


@pytest.mark.parametrize(("typed", "cents"), [("20", 2000), ("20.00", 2000), ("1.50", 150)])
def test_an_amount_typed_in_dollars_is_approved_in_cents(gate, fake_dbos, typed, cents):
    assert _decide(gate, **{"amount-amount_cents": typed}).status_code == 302
    gate.refresh_from_db()
    assert gate.status == "approved" and gate.approved_arguments["amount_cents"] == cents


@pytest.mark.parametrize(
    ("typed", "sentence"),
    [
        ("60", "$60.00 is more than the $48.00 proposed: a person may only approve less"),
        ("150.000", "more than two decimals"),
        ("0", "The amount must be more than 0."),
    ],
)
def test_a_wrong_amount_is_answered_beside_the_field(gate, fake_dbos, typed, sentence):
    response = _decide(gate, **{"amount-amount_cents": typed, "next": "/approvals/"})
    body = response.content.decode()
    assert response.status_code == 400 and sentence in body
    assert f'id="change-error-{gate.pk}"' in body and '<details class="changes" open>' in body
    gate.refresh_from_db()
    assert gate.status == "pending" and fake_dbos.calls == []


def test_the_decided_card_leads_with_what_was_approved(gate, fake_dbos):
    _decide(gate, **{"amount-amount_cents": "20"})
    body = client_for(NW_OWNER).get(f"/runs/{gate.run_id}/").content.decode()
    approved = body.index('class="approved-call">Refund $20.00 on order NW-1042<')
    proposed = body.index('class="proposed-call">Refund $48.00 on order NW-1042<')
    assert approved < proposed


def test_an_empty_bulk_decision_is_answered_on_the_inbox(gate):
    response = client_for(NW_OWNER).post("/approvals/bulk", {"decision": "approve"})
    body = response.content.decode()
    assert response.status_code == 400
    assert 'id="bulk-reason-error"' in body and "tick at least one card" in body
    assert f'id="approval-{gate.pk}"' in body  # the inbox, not a bare error page


def test_an_overlong_note_is_refused_with_its_limit_and_kept(seeded, fake_dbos):
    run = make_run("NW-1", status="running")
    body = "x" * 110_000
    response = client_for(NW_OWNER).post(f"/runs/{run.pk}/steer", {"body": body})
    page = response.content.decode()
    assert response.status_code == 400
    assert "the note is 110,000 characters and a note may be at most 4,000" in page
    assert body in page  # kept in the box, never cut
    assert 'data-limit="4000"' in page and 'maxlength="4000"' not in page
    assert not StaffNote.objects.exists()
