"""The customer loop read by a support lead, in real Chromium (issue 40's acceptance).

Omar writes in with no order number; Northwind's automatic run asks him which order, waits
for his answer, then answers him. On the run page, the ticket page and the lists, at each
stage, no internal code shows as visible text where a sentence belongs (the codes stay in
tooltips and closed details for engineers), the wait for the customer is named as such and
its deadline carries a date, and the agent's reason on an approval card never starts with
the keyless provider's internal mark.
"""

from __future__ import annotations

import re

import pytest

from agent.providers.scripted import MARK
from deskhand.domain.desk.models import Merchant, OutboundEmail, Ticket
from tests.console.conftest import NW_OWNER, make_approval, make_run
from tests.console.test_browser import browser, sign_in  # noqa: F401  (the browser fixture)
from tests.customer.test_waiting import asked, omar_writes
from tests.fixtures.dbos import wait_terminal
from tests.mail.conftest import receiver  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

# Codes a support lead must never have to read as text.
CODES = (
    "ask_customer",
    "reply_to_customer",
    "end_turn",
    "awaiting_customer",
    "run.start",
    "approval.approve",
    "via system",
    "Used the tool",
)
# "Thu 10 Dec 2026": a day, a month and a year.
DATED = re.compile(r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) \d{1,2} [A-Z][a-z]{2} \d{4}\b")


def assert_in_words(page, where: str) -> str:
    """The page's rendered text (closed details and tooltips are not) carries no code."""
    text = page.inner_text("body")
    shown = [code for code in CODES if code in text]
    assert shown == [], f"{where} shows {shown}:\n{text}"
    return text


def read_every_page(page, url: str, run_id: str, ticket: str, stage: str) -> None:
    for path in (f"/runs/{run_id}/", f"/tickets/{ticket}/", "/tickets/", "/runs/", "/attention/"):
        response = page.goto(f"{url}{path}")
        assert response is not None and response.status == 200, (path, stage)
        assert_in_words(page, f"{path} {stage}")


def test_the_customer_loop_reads_in_words_on_every_page(
    browser,  # noqa: F811
    web_server,
    worker_process,
    receiver,  # noqa: F811
):
    Merchant.objects.filter(slug="northwind").update(auto_runs="new_tickets")
    worker_process("loop-words").start()
    omar_writes(
        receiver,
        subject="Where is my order?",
        message_id="<omar-1@mail.example.com>",
        body="Hello, my order still has not arrived and no tracking email came. Where is it?",
    )
    ticket = Ticket.objects.get(messages__message_id="<omar-1@mail.example.com>")
    run = asked(ticket)
    context, page = sign_in(browser, web_server, NW_OWNER)

    # Parked on Omar: the wait is his, with a deadline three days out, dated.
    read_every_page(page, web_server.url, str(run.pk), ticket.reference, "while it waits")
    page.goto(f"{web_server.url}/runs/{run.pk}/")
    waiting = page.inner_text("[data-testid=model-wait]")
    assert waiting.startswith("For the customer to answer"), waiting
    assert DATED.search(page.inner_text("[data-testid=wait-deadline]")), waiting
    page.goto(f"{web_server.url}/tickets/")
    assert "run waiting for the customer" in page.inner_text("#ticket-table")

    # Omar answers; the run reads it, answers him on the thread and ends.
    question = OutboundEmail.objects.get(ticket=ticket)
    omar_writes(
        receiver,
        subject=f"Re: {question.subject}",
        message_id="<omar-2@mail.example.com>",
        headers={"In-Reply-To": question.thread_message.message_id},
        body="It is order NW-1077.",
    )
    run = wait_terminal(str(run.pk))
    assert run.status == "succeeded", run.summary
    read_every_page(page, web_server.url, str(run.pk), ticket.reference, "once it ended")
    page.goto(f"{web_server.url}/runs/{run.pk}/")
    stories = page.locator("#timeline .story").all_inner_texts()
    assert any(s.startswith("Asked the customer a question on") for s in stories), stories
    assert any(s.startswith("The customer answered the question on") for s in stories), stories

    # An approval card: the agent's reason reads without the provider's mark in front.
    gate = make_approval(
        make_run("NW-1", status="awaiting_approval"),
        arguments={
            "order_reference": "NW-1042",
            "amount_cents": 1900,
            "reason": f"{MARK} The beans were stale on arrival.",
        },
    )
    page.goto(f"{web_server.url}/approvals/")
    card = page.inner_text(f"#approval-{gate.pk}")
    assert "The beans were stale on arrival." in card
    assert not any(line.strip().startswith(MARK) for line in card.splitlines()), card
    context.close()
