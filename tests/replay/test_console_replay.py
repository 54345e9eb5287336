"""Replay in the console: what the model saw at any step, and "fork from here", for owners only.

Driven through Django's test client against a real run (the scripted policy reader, a real
DBOS worker in-process): the page shows what ``replay --at`` prints, and the fork it
creates is the CLI's fork — same checks, same lineage, both run pages linked.
"""

from __future__ import annotations

import json

import pytest

from agent.models import Run, Step
from agent.providers.policy import PolicyProvider
from agent.run.services import run_create
from approvals.models import AuditEvent
from deskhand.domain.desk.models import Refund, Ticket
from tests.console.conftest import AUDITOR, LU_OWNER, NW_AGENT, NW_OWNER, NW_VIEWER, client_for
from tests.durability.helpers import decide, start, user
from tests.fixtures.dbos import wait_parked, wait_terminal
from tests.replay.conftest import replay_cmd

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def refunded(dbos_executor, provide) -> Run:
    """NW-1 run to the end by the policy reader: one refund, approved by the owner."""
    provide(PolicyProvider())
    run = wait_parked(str(start("NW-1", NW_OWNER).id))
    decide(run, NW_OWNER)
    run = wait_terminal(str(run.id))
    assert run.status == "succeeded" and Refund.objects.count() == 1
    return run


def at(run: Run, seq: int | str) -> str:
    return f"/runs/{run.id}/replay/{seq}/"


def fork_url(run: Run, seq: int | str) -> str:
    return f"/runs/{run.id}/replay/{seq}/fork"


def seq_of(run: Run, **filters: object) -> int:
    # The refund's gate, not the reply's that follows it (approved by the owner's rule).
    if filters.get("kind") == "approval":
        filters.setdefault("tool", "issue_refund")
    return Step.objects.get(run=run, **filters).seq


def test_replay_is_for_owners_and_another_merchants_run_is_not_there(refunded: Run) -> None:
    asked = seq_of(refunded, kind="model", result__content__0__name="issue_refund")
    for email in (NW_AGENT, NW_VIEWER):
        for response in (
            client_for(email).get(at(refunded, asked)),
            client_for(email).get(fork_url(refunded, asked)),
            client_for(email).post(fork_url(refunded, asked)),
        ):
            assert response.status_code == 403
            assert "only an owner may replay runs or fork them" in response.content.decode()
    # A staff auditor belongs to no merchant: a look is sent to the audit desk, a fork refused.
    staff = client_for(AUDITOR)
    looked = staff.get(at(refunded, asked))
    assert (looked.status_code, looked["Location"]) == (302, "/admin/")
    forked = staff.post(fork_url(refunded, asked))
    assert forked.status_code == 403
    assert "is not a member of any merchant" in forked.content.decode()
    other = client_for(LU_OWNER)
    for response in (other.get(at(refunded, asked)), other.post(fork_url(refunded, asked))):
        assert response.status_code == 404
        assert "belongs to another merchant" in response.content.decode()
    assert Run.objects.count() == 1  # nobody forked anything
    # The run page offers replay to its owner only.
    page = client_for(NW_OWNER).get(f"/runs/{refunded.id}/").content.decode()
    assert at(refunded, 1) in page
    assert at(refunded, 1) not in client_for(NW_AGENT).get(f"/runs/{refunded.id}/").content.decode()


def test_the_page_shows_what_the_model_saw_as_replay_at_prints_it(refunded: Run) -> None:
    owner = client_for(NW_OWNER)
    last = Step.objects.filter(run=refunded).order_by("-seq").first()
    assert last is not None
    for seq in range(1, last.seq + 2):  # every step, and the end
        response = owner.get(at(refunded, seq))
        assert response.status_code == 200, seq
        code, out = replay_cmd(str(refunded.id), "--at", str(seq), "--json")
        assert code == 0 and response.context["view"].messages == json.loads(out)["messages"]
    asked = seq_of(refunded, kind="model", result__content__0__name="issue_refund")
    html = owner.get(at(refunded, asked)).content.decode()
    assert f"What the model was sent at step {asked}" in html
    assert "asks for issue_refund" not in html  # its reply is not part of what it was sent
    assert "asks for issue_refund" in owner.get(at(refunded, asked + 1)).content.decode()
    assert fork_url(refunded, asked) in html  # a model step: a fork may start here
    ended = owner.get(at(refunded, last.seq)).content.decode()
    assert "Fork from here: not possible." in ended and "is where the run ended" in ended


@pytest.mark.parametrize(
    ("path", "status", "sentence"),
    [
        ("replay/0/", 404, "has no step 0; its steps are 1 to"),
        ("replay/999/", 404, "has no step 999; its steps are 1 to"),
        ("replay/99999999999999999999/", 404, "has no step 99999999999999999999"),
        ("replay/999/fork", 404, "has no step 999"),
        ("replay/-1/", 404, ""),
        ("replay/abc/", 404, ""),
        ("replay/1.5/fork", 404, ""),
    ],
)
def test_a_bad_step_is_a_sentence_never_a_500(refunded: Run, path: str, status: int, sentence: str):
    owner = client_for(NW_OWNER)
    response = owner.get(f"/runs/{refunded.id}/{path}")
    assert response.status_code == status, path
    assert sentence in response.content.decode()
    # A POST is the fork's (or not allowed on the read-only page): never a 500, never a fork.
    assert owner.post(f"/runs/{refunded.id}/{path}").status_code in (status, 405)
    assert owner.get(f"/runs/not-a-uuid/{path}").status_code == 404
    assert Run.objects.count() == 1


def test_a_step_no_fork_can_start_at_is_refused_with_the_reason(refunded: Run) -> None:
    owner = client_for(NW_OWNER)
    paid = seq_of(refunded, kind="tool", tool="issue_refund")
    for response in (owner.get(fork_url(refunded, paid)), owner.post(fork_url(refunded, paid))):
        assert response.status_code == 400
        assert "is an approved irreversible effect of the original run" in response.content.decode()
    assert Run.objects.count() == 1


def test_fork_from_here_lists_the_irreversible_steps_creates_the_fork_and_links_both_pages(
    refunded: Run,
) -> None:
    owner = client_for(NW_OWNER)
    asked = seq_of(refunded, kind="model", result__content__0__name="issue_refund")
    paid = seq_of(refunded, kind="tool", tool="issue_refund")
    requested = seq_of(refunded, kind="approval", result__event="requested")

    confirm = owner.get(fork_url(refunded, asked))
    assert confirm.status_code == 200
    listed = [s.seq for s in confirm.context["irreversible"]]
    # The refund's gate and effect, then the reply to the customer's (approved by the owner's rule).
    assert listed[:2] == [requested, paid]
    assert {s.tool for s in confirm.context["irreversible"][2:]} == {"reply_to_customer"}
    html = confirm.content.decode()
    assert f"#{paid}</span> issue_refund performed" in html
    assert 'method="post"' in html
    assert Run.objects.count() == 1  # the GET only asks

    response = owner.post(fork_url(refunded, asked))
    assert response.status_code == 302
    fork = Run.objects.exclude(pk=refunded.pk).get()
    assert response["Location"] == f"/runs/{fork.id}/"
    assert (fork.forked_from_id, fork.fork_step) == (refunded.id, asked)
    assert AuditEvent.objects.get(action="run.fork", run=fork).channel == "web"

    fork = wait_terminal(str(fork.id))
    assert fork.status == "succeeded", fork.summary
    assert Refund.objects.count() == 1  # the same refund, answered from the ledger
    fork_page = owner.get(f"/runs/{fork.id}/").content.decode()
    assert f'href="/runs/{refunded.id}/"' in fork_page  # fork → origin
    origin_page = owner.get(f"/runs/{refunded.id}/").content.decode()
    assert f'href="/runs/{fork.id}/"' in origin_page and "Forked into" in origin_page
    # The fork's own replay page starts with its parent's steps, marked as inherited.
    inherited = owner.get(at(fork, 1))
    assert inherited.status_code == 200 and inherited.context["steps"][0].inherited


def test_a_fork_while_the_ticket_has_an_open_run_is_refused_and_writes_nothing(
    refunded: Run,
) -> None:
    blocker = run_create(ticket=Ticket.objects.get(reference="NW-1"), user=user(NW_OWNER))
    asked = seq_of(refunded, kind="model", result__content__0__name="issue_refund")
    owner = client_for(NW_OWNER)
    for response in (owner.get(fork_url(refunded, asked)), owner.post(fork_url(refunded, asked))):
        assert response.status_code == 409
        assert f"already has an open run ({blocker.id}" in response.content.decode()
    assert Run.objects.count() == 2
