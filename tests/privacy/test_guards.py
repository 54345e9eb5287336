"""The consent and audit guards allow a redaction of words, and nothing else, ever.

Raw ``UPDATE``s, as a bug or a shell would issue them: the database is the last word.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import IntegrityError, transaction

from agent.privacy.redaction import redacting
from approvals.models import Approval, AuditEvent
from approvals.services import approval_decide
from tests.console.conftest import make_approval, make_run, user

OWNER = "owner@northwind.test"


@pytest.fixture
def decided(seeded, fake_dbos) -> Approval:
    run = make_run("NW-1", status="awaiting_approval")
    approval = make_approval(
        run,
        amount_cents=3800,
        arguments={"order_reference": "NW-1042", "amount_cents": 3800, "reason": "Dana's beans"},
    )
    return approval_decide(approval=approval, user=user(OWNER), approve=True, reason="Dana asked")


def refused(model: Any, pk: Any, *, redaction: bool, **changes: Any) -> bool:
    """Whether the database refuses this raw update (it is rolled back either way)."""
    try:
        with transaction.atomic():
            if redaction:
                with redacting():
                    model.objects.filter(pk=pk).update(**changes)
            else:
                model.objects.filter(pk=pk).update(**changes)
            raise _Undo
    except IntegrityError:
        return True
    except _Undo:
        return False


class _Undo(Exception):
    pass


def test_an_approval_may_have_its_words_redacted_and_only_inside_a_redaction(decided):
    a = decided
    erased_args = {"order_reference": "NW-1042", "amount_cents": 3800, "reason": "[erased]"}
    assert refused(Approval, a.pk, redaction=False, arguments=erased_args)
    assert refused(Approval, a.pk, redaction=False, reason="[erased]")
    assert not refused(
        Approval,
        a.pk,
        redaction=True,
        arguments=erased_args,
        preview="Refund 38.00 USD against order NW-1042 — [erased]",
        reason="[erased]",
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"arguments": {"order_reference": "NW-1042", "amount_cents": 100, "reason": "[erased]"}},
        {"arguments": {"order_reference": "NW-1042", "amount_cents": 3800}},
        {"arguments": {"order_reference": "NW-1042", "amount_cents": 3800, "reason": "kind words"}},
        {"preview": "Refund 380.00 USD against order NW-1042"},
        {"reason": "someone else's words"},
        {"status": "denied"},
        {"args_hash": "b" * 64},
        {"decided_by_name": "someone@else.test"},
        {"tool": "cancel_order"},
    ],
    ids=lambda c: next(iter(c)),
)
def test_a_redaction_cannot_change_an_amount_a_decision_or_a_word_into_another(decided, changes):
    assert refused(Approval, decided.pk, redaction=True, **changes)


def test_an_audit_events_detail_is_redacted_only_inside_a_redaction_and_only_its_words(decided):
    event = AuditEvent.objects.get(action="approval.approve")
    assert event.actor_name == OWNER and event.actor_ref == user(OWNER).pk
    erased = {**event.detail, "preview": "[erased]", "reason": "[erased]"}
    assert refused(AuditEvent, event.pk, redaction=False, detail=erased)
    assert not refused(AuditEvent, event.pk, redaction=True, detail=erased)
    assert refused(AuditEvent, event.pk, redaction=True, detail={**erased, "approval": 1})
    assert refused(AuditEvent, event.pk, redaction=True, detail=erased, action="approval.deny")
    assert refused(AuditEvent, event.pk, redaction=True, detail=erased, actor_name="x@y.test")
    # Who acted is frozen, even when the account goes (only the link may become null).
    assert refused(AuditEvent, event.pk, redaction=False, actor_name="x@y.test")
    assert refused(AuditEvent, event.pk, redaction=False, actor_ref=None)
    assert not refused(AuditEvent, event.pk, redaction=False, actor=None)
