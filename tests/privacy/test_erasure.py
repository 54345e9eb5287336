"""Erasing a customer: gone from every column of ours and DBOS's; the money facts stay.

NW-1 is worked end to end through the strict Messages-API double (the real SDK, the
policy reader deciding), with a staff note naming the customer, then erased with
``manage.py erase_customer``. Omar Reyes (NW-2, same merchant) and Lumen's customers
are the neighbours an erasure must not touch.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterator

import pytest

from agent.models import Run, Step
from agent.models.ledger import LedgerEntry
from agent.models.privacy import Redaction
from agent.run.steering import run_steer
from approvals.models import Approval, AuditEvent
from deskhand.domain.desk.models import (
    Customer,
    Merchant,
    Order,
    OutboundEmail,
    Refund,
    TicketMessage,
)
from deskhand.domain.mail.models import InboundAttachment, InboundEmail
from deskhand.domain.mail.parse import Verdicts
from deskhand.infra.dbos import client as dbos_client
from tests.console.conftest import client_for
from tests.durability.helpers import decide, start, user
from tests.edge.test_cli_conventions import cli
from tests.fixtures.dbos import wait_terminal, workflow_settled
from tests.mail.conftest import mail, received
from tests.privacy.helpers import where_found
from tests.support.fake_anthropic import policy_double, settle
from tests.support.messages_api import MessagesApi

pytestmark = pytest.mark.django_db(transaction=True)

DANA = ["dana.whitfield@example.com", "Dana Whitfield", "Whitfield", "dana.whitfield"]
OWNER = "owner@northwind.test"


@pytest.fixture
def api(settings) -> Iterator[MessagesApi]:
    with policy_double(settings, "claude-sonnet-4-6") as double:
        yield double


def work_nw1_to_a_refund() -> Run:
    run = settle(start("NW-1", "agent@northwind.test"))
    assert run.status == "awaiting_approval"
    run_steer(run=run, user=user(OWNER), body="Dana Whitfield is a regular; be kind.")
    decide(run, OWNER, reason="Dana Whitfield's bags were stale")
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded", run.summary
    workflow_settled(str(run.id))
    return run


def dana_writes_in() -> list[bytes]:
    """Dana's mail: a reply on NW-1 with an attachment, and one held (it failed DMARC)."""
    # A person starts runs here: an automatic run on her reply would still be in flight when
    # she is erased (tests/customer/test_erasure.py erases a customer who wrote to the agent).
    Merchant.objects.filter(slug="northwind").update(auto_runs="off")
    nw1_first = TicketMessage.objects.get(ticket__reference="NW-1", kind="customer").message_id
    sender = "Dana Whitfield <dana.whitfield@example.com>"
    reply = mail(
        sender=sender,
        subject="Re: stale beans",
        body="Thank you! Dana Whitfield",
        headers={"In-Reply-To": nw1_first},
        attachments=[("receipt.txt", "text/plain", b"Receipt for Dana Whitfield")],
    )
    held = mail(sender=sender, subject="Also this", body="From Dana Whitfield")
    to = ["support@northwind.test"]
    assert received(reply, envelope_recipients=to).status == "threaded"
    quarantined = received(held, envelope_recipients=to, verdicts=Verdicts(dmarc="fail"))
    assert quarantined.status == "quarantined"
    return [reply, held]


def money_facts() -> dict[str, object]:
    return {
        "refunds": sorted(Refund.objects.values_list("order__reference", "amount_cents")),
        "ledger": sorted(
            (
                e.key,
                e.args_hash,
                e.arguments.get("amount_cents"),
                e.arguments.get("order_reference"),
            )
            for e in LedgerEntry.objects.all()
        ),
        "approvals": sorted(
            (str(a.pk), a.status, a.args_hash, a.decided_by_name, a.arguments.get("amount_cents"))
            for a in Approval.objects.all()
        ),
        "orders": sorted(Order.objects.values_list("reference", "total_cents", "status")),
        "costs": sorted(Run.objects.values_list("id", "cost_micros", "input_tokens", "steps")),
    }


def test_an_erased_customer_is_in_no_column_of_ours_or_dbos_and_the_money_facts_stay(
    dbos_executor, api
):
    run = work_nw1_to_a_refund()
    neighbour = wait_terminal(str(settle(start("NW-2", "agent@northwind.test")).id))
    workflow_settled(str(neighbour.id))
    sent_in = dana_writes_in()
    copies = {hit.split(":")[0] for hit in where_found(DANA)}
    # The run copied the customer into step payloads, approvals, notes and DBOS's checkpoints.
    assert {
        "public.agent_step.result",
        "public.approvals_staffnote.body",
        "public.approvals_approval.reason",
        "dbos.operation_outputs.output",
        "public.desk_customer.name",
        "public.desk_ticketmessage.body",
        "public.desk_ticketmessage.from_address",
        "public.mail_inboundemail.raw",
        "public.mail_inboundemail.from_address",
        "public.mail_inboundattachment.content",
    } <= copies, copies
    # What the model was sent never held the full address (tool results are masked) …
    assert api.count > 0 and not any(
        "dana.whitfield@example.com" in json.dumps(b) for b in api.bodies()
    )
    # … and the run page shows the masked form the model saw (the staff's own line keeps it whole).
    timeline = client_for(OWNER).get(f"/runs/{run.id}/").content.decode().split('id="timeline"')[1]
    assert "d***@e***.com" in timeline and "dana.whitfield@example.com" not in timeline
    before = money_facts()

    code, out, err = cli(
        "erase_customer", "dana.whitfield@example.com", "--as", OWNER, "--dry-run", "--json"
    )
    assert code == 0, err
    planned = json.loads(out)
    assert planned["dry_run"] and planned["counts"]["runs"] == 1
    assert (planned["counts"]["inbound_emails"], planned["counts"]["inbound_attachments"]) == (2, 1)
    assert planned["counts"]["dbos_workflows"] == 1 and planned["counts"]["steps"] == run.steps
    assert "dana" not in out.lower()  # the output names the customer by id, never the address
    assert where_found(DANA) and not Redaction.objects.exists()  # a dry run changes nothing

    code, out, err = cli("erase_customer", "dana.whitfield@example.com", "--as", OWNER, "--json")
    assert code == 0, err
    done = json.loads(out)
    assert done["counts"] == planned["counts"] and not done["dry_run"]

    assert where_found(DANA) == []
    assert money_facts() == before
    # The mail rows stay (counted, hashed), empty; delivered again, nothing of it comes back.
    assert InboundEmail.objects.filter(erased_at__isnull=False).count() == 2
    assert not InboundAttachment.objects.exists()
    lines = TicketMessage.objects.count()
    for raw in sent_in:
        received(raw, envelope_recipients=["support@northwind.test"])
    assert where_found(DANA) == [] and TicketMessage.objects.count() == lines
    [event] = AuditEvent.objects.filter(action="customer.erase")
    assert event.actor_name == OWNER and event.detail["counts"] == done["counts"]
    assert event.detail["customer"] == Customer.objects.get(erased_at__isnull=False).pk
    assert "dana" not in json.dumps(event.detail).lower()

    # DBOS: the erased run's history is gone; the neighbour's is whole.
    assert dbos_client.workflow_states([str(run.id), str(neighbour.id)]).keys() == {
        str(neighbour.id)
    }
    assert any(
        "Omar Reyes" in s.payload.text  # type: ignore[union-attr]
        for s in Step.objects.filter(run=neighbour, kind="tool")
    )
    assert Customer.objects.filter(name="Saoirse Quinn").exists()
    assert TicketMessage.objects.filter(ticket__reference="NW-2").exclude(body="[erased]").exists()
    assert not OutboundEmail.objects.exclude(subject="[erased]").filter(
        customer__erased_at__isnull=False
    )

    # The run page shows the erased fields as erased, and says so.
    page = html.unescape(client_for(OWNER).get(f"/runs/{run.id}/").content.decode())
    assert "Erased on" in page and "[erased]" in page
    assert "Refund 38.00 USD against order NW-1042 — [erased]" in page  # re-rendered
    assert "Whitfield" not in page and "dana.whitfield" not in page

    # And the run can no longer be replayed or forked.
    code, out, err = cli("replay", str(run.id))
    assert code == 1 and "erased at the customer's request" in err and err.count("\n") == 1


def test_a_customer_with_a_run_in_flight_is_refused_in_one_sentence(dbos_executor, api):
    run = settle(start("NW-1", "agent@northwind.test"))
    assert run.status == "awaiting_approval"
    code, out, err = cli("erase_customer", "dana.whitfield@example.com", "--as", OWNER)
    assert code == 1 and out == ""
    assert err.startswith("CommandError: ") and err.count("\n") == 1
    assert "in flight" in err and "cancel it first" in err
    assert Customer.objects.filter(name="Dana Whitfield").exists()
    assert not AuditEvent.objects.filter(action="customer.erase").exists()


@pytest.mark.parametrize(
    ("email", "actor", "code_name", "words"),
    [
        ("dana.whitfield@example.com", "agent@northwind.test", "not_allowed", "only an owner"),
        ("dana.whitfield@example.com", "owner@lumen.test", "not_found", "no customer"),
        ("nobody@example.com", OWNER, "not_found", "no customer"),
    ],
)
def test_only_an_owner_of_the_customers_merchant_may_erase(seeded, email, actor, code_name, words):
    code, out, err = cli("erase_customer", email, "--as", actor, "--json")
    assert code == 1 and err == ""
    answer = json.loads(out)
    assert answer["code"] == code_name and words in answer["error"]
    assert Customer.objects.filter(name="Dana Whitfield").exists()
