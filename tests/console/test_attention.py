"""The attention queue: what waits for a person, with its age, money at stake and a link.

Two tenants always in play: a Lumen page never shows a Northwind item, and every role
(owner, agent, viewer) may look at its own merchant's queue.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from agent.models import Run
from deskhand.domain.desk.models import Ticket
from tests.console.conftest import (
    LU_OWNER,
    NW_AGENT,
    NW_OWNER,
    NW_VIEWER,
    client_for,
    make_approval,
    make_run,
)


def _escalate(reference: str, slug: str = "northwind") -> Ticket:
    ticket = Ticket.objects.get(reference=reference, merchant__slug=slug)
    ticket.status = "escalated"
    ticket.save(update_fields=["status", "updated_at"])
    return ticket


@pytest.mark.parametrize("who", [NW_OWNER, NW_AGENT, NW_VIEWER])
def test_every_role_sees_its_merchants_queue_with_age_money_and_link(seeded, who):
    run = make_run("NW-1", status="awaiting_approval")
    approval = make_approval(run, amount_cents=3800)
    _escalate("NW-3")
    response = client_for(who).get("/attention/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "Approval waiting" in body and f"/approvals/#approval-{approval.pk}" in body
    assert "$38.00" in body  # the refund the approval would move
    assert "Ticket escalated" in body and "/tickets/NW-3/" in body
    assert "$156.00" in body  # still refundable on NW-0918, the order NW-3 names
    queue = response.context["queue"]
    assert sorted(i.kind for i in queue) == ["approval", "escalated"]
    assert [i.since for i in queue] == sorted(i.since for i in queue)  # oldest first
    assert all(i.age for i in queue)


def test_another_merchants_items_never_appear(seeded):
    make_approval(make_run("NW-1", status="awaiting_approval"), amount_cents=3800)
    _escalate("NW-3")
    response = client_for(LU_OWNER).get("/attention/")
    assert response.status_code == 200
    body = response.content.decode()
    assert "NW-" not in body
    assert response.context["queue"] == []
    assert response.context["attention"]["total"] == 0


def test_a_failed_run_waits_until_the_ticket_is_re_run(seeded):
    failed = make_run("NW-2", status="failed", stop_reason="provider_error")
    cut = make_run("NW-4", status="succeeded", stop_reason="truncated")
    owner = client_for(NW_OWNER)
    kinds = {(i.kind, i.ticket) for i in owner.get("/attention/").context["queue"]}
    assert {("run", "NW-2"), ("run", "NW-4")} <= kinds
    # A newer run on NW-2 takes the failed one off the queue.
    make_run("NW-2", status="succeeded", created_at=failed.created_at + dt.timedelta(seconds=1))
    kinds = {(i.kind, i.ticket) for i in owner.get("/attention/").context["queue"]}
    assert ("run", "NW-2") not in kinds and ("run", "NW-4") in kinds
    # A resolved ticket takes its run off too.
    Ticket.objects.filter(pk=cut.ticket_id).update(status="resolved")
    assert not owner.get("/attention/").context["queue"]


def test_the_navigation_counts_what_waits_and_the_home_page_lists_it(seeded):
    make_approval(make_run("NW-1", status="awaiting_approval"), amount_cents=3800)
    _escalate("NW-3")
    response = client_for(NW_VIEWER).get("/")
    assert response.status_code == 200
    body = response.content.decode()
    assert response.context["attention"]["total"] == 2
    assert 'aria-label="2 waiting">2</span>' in body
    assert 'aria-label="1 pending">1</span>' in body
    assert "Needs attention (2)" in body and "Ticket escalated" in body


def test_a_run_sleeping_out_a_rate_limit_is_in_the_queue_with_its_reason_until_it_proceeds(
    seeded,
):
    run = make_run("NW-2", status="running")
    Run.objects.filter(pk=run.pk).update(
        waiting_until=timezone.now() + dt.timedelta(seconds=30),
        wait_reason="rate limited by anthropic: retry after 30 s",
    )
    make_run("NW-4", status="failed", stop_reason="provider_error")  # another kind, still there
    owner = client_for(NW_OWNER)
    response = owner.get("/attention/")
    [waiting] = [i for i in response.context["queue"] if i.kind == "provider_wait"]
    assert (waiting.ticket, waiting.url) == ("NW-2", f"/runs/{run.pk}/")
    assert "rate limited by anthropic: retry after 30 s" in response.content.decode()
    assert response.context["attention"]["provider_wait"] == 1
    assert client_for(LU_OWNER).get("/attention/").context["attention"]["provider_wait"] == 0
    # The call went ahead (agent.run.turns clears the wait): off the queue.
    Run.objects.filter(pk=run.pk).update(waiting_until=None, wait_reason="")
    kinds = {i.kind for i in owner.get("/attention/").context["queue"]}
    assert "provider_wait" not in kinds and "run" in kinds


def test_the_runs_and_tickets_lists_carry_money_and_both_statuses(seeded):
    make_run("NW-3", status="succeeded")
    _escalate("NW-3")
    owner = client_for(NW_OWNER)
    runs = owner.get("/runs/").content.decode()
    assert "<th>Run status</th><th>Ticket status</th>" in runs
    assert '<th class="num">Money</th>' in runs
    assert "$156.00 at stake" in runs
    assert "Run status</strong> is how the agent" in runs  # the one-line legend
    tickets = owner.get("/tickets/").content.decode()
    assert "<th>Ticket status</th>" in tickets and "Money at stake" in tickets
    assert "run finished" in tickets and 'title="run status: succeeded"' in tickets


def test_an_unauthenticated_visitor_is_sent_to_sign_in(seeded):
    from django.test import Client

    response = Client().get("/attention/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_a_stale_ticket_update_shows_its_age(seeded):
    ticket = _escalate("NW-3")
    Ticket.objects.filter(pk=ticket.pk).update(updated_at=timezone.now() - dt.timedelta(hours=3))
    (item,) = client_for(NW_OWNER).get("/attention/").context["queue"]
    assert item.age.startswith("3h")


def test_money_is_at_stake_only_while_the_ticket_is_unresolved(seeded):
    from deskhand.web.console.attention import ticket_stakes

    nw1 = Ticket.objects.get(reference="NW-1")
    assert ticket_stakes(merchant_id=nw1.merchant_id, tickets=[nw1])  # NW-1042 is refundable
    Ticket.objects.filter(pk=nw1.pk).update(status="resolved")
    nw1.refresh_from_db()
    assert ticket_stakes(merchant_id=nw1.merchant_id, tickets=[nw1]) == {}
    row = client_for(NW_OWNER).get("/tickets/").content.decode()
    row = row[row.index('href="/tickets/NW-1/"') :].split("</tr>", 1)[0]
    assert 'data-label="Money at stake" class="num">—<' in row
