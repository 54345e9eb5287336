"""The agent answers the customer: one reply, threaded, from the merchant, claimed once.

Mail goes in over real SMTP (the receiver ``make demo`` runs) and comes out over real SMTP
(a loopback server that wants a login): NW-1's customer writes, a person approves the
refund, and Dana gets exactly one reply on her thread, signed by Northwind Coffee.
"""

from __future__ import annotations

import email.policy
import email.utils

import pytest

from agent.models import Run
from agent.models.ledger import LedgerEntry
from approvals.models import Approval
from deskhand.domain.desk.models import (
    Merchant,
    MessageDirection,
    OutboundEmail,
    Ticket,
    TicketMessage,
)
from deskhand.domain.desk.thread import reply_token
from tests.durability.helpers import assert_every_effect_was_approved, decide, start
from tests.fixtures.dbos import wait_for_run, wait_terminal
from tests.mail.conftest import DANA, NORTHWIND, mail
from tests.mail.test_smtp import send

pytestmark = pytest.mark.django_db(transaction=True)

MARKERS = ("[scripted provider]", "scripted", "Deskhand support", "toolu_", "fence")


def parked_or_done(run: Run) -> Run:
    return wait_for_run(
        str(run.id),
        lambda r: (
            r.status in ("succeeded", "failed", "exhausted", "cancelled")
            or (r.status == "awaiting_approval" and r.approvals.filter(status="pending").exists())
        ),
    )


def test_nw1_ends_with_one_threaded_reply_to_dana_signed_by_northwind(
    dbos_executor, receiver, smtp_server
):
    Merchant.objects.filter(slug="northwind").update(mail_adapter="smtp", auto_runs="off")
    # Dana writes again on NW-1 (the subject names it), over real SMTP to the receiver.
    send(
        receiver,
        mail(
            sender=f"Dana Whitfield <{DANA}>",
            subject="Re: Beans arrived stale [#NW-1]",
            message_id="<dana-2@mail.example.com>",
            headers={"References": "<dana-1@mail.example.com>"},
            body="Any news on the refund for NW-1042? The beans really are stale.",
        ),
        sender=DANA,
    )
    ticket = Ticket.objects.get(reference="NW-1")
    assert ticket.messages.filter(message_id="<dana-2@mail.example.com>").exists()

    run = parked_or_done(start("NW-1", "owner@northwind.test"))
    assert Approval.objects.get(run=run, status="pending").tool == "issue_refund"
    decide(run, "agent@northwind.test")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary

    # Exactly one message left, to Dana, over SMTP.
    assert len(smtp_server.messages) == 1
    sent = smtp_server.messages[0]
    assert email.utils.parseaddr(sent["To"])[1] == DANA
    assert email.utils.parseaddr(sent["From"]) == ("Northwind Coffee", NORTHWIND)
    assert sent["In-Reply-To"] == "<dana-2@mail.example.com>"
    assert sent["References"].split() == ["<dana-1@mail.example.com>", "<dana-2@mail.example.com>"]
    assert sent["Subject"] == "Re: Beans arrived stale [#NW-1]"
    assert sent["Auto-Submitted"] == "auto-replied"
    reply_to = email.utils.parseaddr(sent["Reply-To"])[1]
    assert reply_to == f"support+{reply_token(ticket)}@northwind.test"
    body = sent.get_payload(decode=True).decode()
    assert body.rstrip().endswith("Northwind Coffee")
    assert "Hello Dana" in body and "$38.00" in body and "NW-1042" in body
    assert "38.00 USD" not in body  # money as Dana reads it, not as the log writes it
    assert "5-10 business days" in body
    for marker in MARKERS:
        assert marker not in body and marker not in sent["Subject"]

    # Claimed once in the ledger, approved by the owner's rule, and on the thread once.
    replies = LedgerEntry.objects.filter(run=run, tool="reply_to_customer")
    assert [(e.ok, e.provider_ref) for e in replies] == [(True, sent["Message-ID"])]
    approval = Approval.objects.get(run=run, tool="reply_to_customer")
    assert approval.channel == "policy" and approval.status == "approved"
    out = TicketMessage.objects.get(ticket=ticket, direction=MessageDirection.OUTBOUND)
    assert (out.message_id, out.in_reply_to, out.from_address) == (
        sent["Message-ID"],
        "<dana-2@mail.example.com>",
        NORTHWIND,
    )
    assert out.email is not None and out.email.body.endswith("Northwind Coffee")
    assert OutboundEmail.objects.count() == 1
    assert "Replied to the customer on NW-1." in run.summary
    assert_every_effect_was_approved()

    # Dana's answer to the reply threads by its Message-ID and joins NW-1.
    send(
        receiver,
        mail(
            sender=DANA,
            subject="Re: Beans arrived stale [#NW-1]",
            message_id="<dana-3@mail.example.com>",
            headers={"In-Reply-To": sent["Message-ID"]},
            body="Thank you!",
        ),
        sender=DANA,
    )
    assert TicketMessage.objects.get(message_id="<dana-3@mail.example.com>").ticket_id == ticket.pk


@pytest.mark.parametrize(("ref", "owner"), [("NW-2", "northwind"), ("NW-4", "northwind")])
def test_tickets_without_money_get_a_reply_that_carries_no_internal_marker(
    dbos_executor, ref, owner
):
    run = wait_terminal(str(start(ref, f"owner@{owner}.test").id))
    assert run.status == "succeeded", run.summary
    reply = OutboundEmail.objects.get(ticket__reference=ref)
    for marker in MARKERS:
        assert marker not in reply.body and marker not in reply.subject
    assert reply.body.endswith("Northwind Coffee")
    # NW-4's embedded instructions are neither obeyed nor quoted back to the customer.
    assert "SYSTEM" not in reply.body and "issue_refund" not in reply.body
    line = reply.thread_message
    assert line.direction == MessageDirection.OUTBOUND and line.message_id


def test_lu2s_email_carries_no_marker_and_is_signed_by_lumen(dbos_executor):
    run = parked_or_done(start("LU-2", "owner@lumen.test"))
    decide(run, "agent@lumen.test")
    run = parked_or_done(run)
    decide(run, "agent@lumen.test")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary
    sent = OutboundEmail.objects.get()
    for marker in MARKERS:
        assert marker not in sent.body and marker not in sent.subject
    assert sent.body.endswith("Lumen Audio")
    # The email told the customer; no second reply follows it.
    assert not LedgerEntry.objects.filter(run=run, tool="reply_to_customer").exists()
