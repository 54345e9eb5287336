"""``row_by_pk`` hands back what the ORM would: the same field values, the related rows
cached, an empty foreign key cached as None, and the ORM's error for a missing row."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import FieldDoesNotExist
from django.forms.models import model_to_dict

from agent.models import Run
from agent.run.services import run_create
from deskhand.domain.desk.models import Order, Ticket
from deskhand.domain.desk.rows import row_by_pk


def _same(a, b) -> None:
    assert type(a) is type(b) and a.pk == b.pk
    assert {f.attname: getattr(a, f.attname) for f in a._meta.concrete_fields} == {
        f.attname: getattr(b, f.attname) for f in b._meta.concrete_fields
    }


def test_a_run_reads_as_the_orm_reads_it_with_its_merchant_and_ticket(seeded):
    ticket = Ticket.objects.get(reference="NW-1")
    owner = get_user_model().objects.get(email="owner@northwind.test")
    run = run_create(ticket=ticket, user=owner)
    orm = Run.objects.select_related("merchant", "ticket").get(pk=run.pk)
    fast = row_by_pk(Run, run.pk, related=("merchant", "ticket"))
    _same(fast, orm)
    _same(fast.merchant, orm.merchant)
    _same(fast.ticket, orm.ticket)
    # Cached as select_related caches them: reading them asks the database nothing.
    assert Run.merchant.is_cached(fast) and Run.ticket.is_cached(fast)
    assert not fast._state.adding and fast._state.db == "default"


def test_an_empty_foreign_key_is_cached_as_none(seeded):
    ticket = Ticket.objects.get(reference="NW-1")
    Ticket.objects.filter(pk=ticket.pk).update(assignee=None)
    fast = row_by_pk(Ticket, ticket.pk, related=("customer", "assignee"))
    assert Ticket.assignee.is_cached(fast) and fast.assignee is None
    assert model_to_dict(fast.customer) == model_to_dict(ticket.customer)


def test_a_locked_read_and_a_missing_row(seeded):
    order = Order.objects.filter(merchant__slug="northwind").first()
    _same(row_by_pk(Order, order.pk, lock=True), Order.objects.get(pk=order.pk))
    with pytest.raises(Run.DoesNotExist):
        row_by_pk(Run, uuid.uuid4())


def _orm_ticket(merchant_id, reference):
    from django.db.models import Prefetch

    from deskhand.domain.desk.models import TicketMessage

    return (
        Ticket.objects.filter(merchant_id=merchant_id, reference__iexact=reference)
        .select_related("customer", "assignee")
        .prefetch_related(
            Prefetch("messages", queryset=TicketMessage.objects.order_by("created_at", "id"))
        )
        .first()
    )


def test_a_ticket_by_reference_reads_as_the_orm_reads_it_thread_included(
    seeded, django_assert_num_queries
):
    from deskhand.domain.desk.selectors import ticket_get

    ticket = Ticket.objects.get(reference="NW-1")
    orm = _orm_ticket(ticket.merchant_id, "nw-1")
    fast = ticket_get(merchant_id=ticket.merchant_id, reference=" #nw-1 ")
    _same(fast, orm)
    _same(fast.customer, orm.customer)
    assert orm.messages.all(), "the seeded NW-1 has a thread to compare"
    with django_assert_num_queries(0):  # the thread came with the ticket
        mine = list(fast.messages.all())
        assert all(m.ticket is fast for m in mine)
    theirs = list(orm.messages.all())
    assert [m.pk for m in mine] == [m.pk for m in theirs]
    for a, b in zip(mine, theirs, strict=True):
        _same(a, b)
    alone = ticket_get(merchant_id=ticket.merchant_id, reference="NW-1", thread=False)
    _same(alone, orm)
    # Another merchant's reference, or none: no ticket, whichever way it is asked.
    other = Ticket.objects.exclude(merchant_id=ticket.merchant_id).first()
    assert ticket_get(merchant_id=ticket.merchant_id, reference=other.reference) is None
    assert ticket_get(merchant_id=ticket.merchant_id, reference="NW-0", thread=False) is None


def test_an_order_by_reference_reads_as_the_orm_reads_it_items_and_refunds_included(
    seeded, django_assert_num_queries
):
    from django.db.models import Prefetch

    from deskhand.domain.desk.models import Refund
    from deskhand.domain.desk.selectors import order_get

    order = Order.objects.filter(items__isnull=False, refunds__isnull=False).first() or (
        Order.objects.filter(items__isnull=False).first()
    )
    orm = (
        Order.objects.filter(merchant_id=order.merchant_id, reference__iexact=order.reference)
        .select_related("customer")
        .prefetch_related(
            "items", Prefetch("refunds", queryset=Refund.objects.order_by("created_at", "id"))
        )
        .first()
    )
    fast = order_get(merchant_id=order.merchant_id, reference=order.reference.lower())
    _same(fast, orm)
    _same(fast.customer, orm.customer)
    with django_assert_num_queries(0):
        items, refunds = list(fast.items.all()), list(fast.refunds.all())
    assert sorted(i.pk for i in items) == sorted(i.pk for i in orm.items.all()) != []
    assert [r.pk for r in refunds] == [r.pk for r in orm.refunds.all()]
    _same(order_get(merchant_id=order.merchant_id, reference=order.reference, lines=False), orm)
    assert order_get(merchant_id=order.merchant_id, reference="no-such-order") is None


def test_a_knowledge_base_search_loads_the_rows_the_orm_loads_in_the_ranked_order(seeded):
    from django.contrib.postgres.search import SearchQuery

    from deskhand.domain.desk.knowledge import kb_ranked
    from deskhand.domain.desk.models import KbArticle
    from deskhand.domain.desk.selectors import kb_query_words, kb_search

    merchant_id = Ticket.objects.get(reference="NW-1").merchant_id
    for query in ("refund policy damaged goods", "how long does a refund take", "zzzqqq"):
        words = kb_query_words(query)
        tsquery = SearchQuery(" | ".join(words), search_type="raw", config="english")
        matching = set(
            KbArticle.objects.filter(
                merchant_id=merchant_id, published=True, search=tsquery
            ).values_list("pk", flat=True)
        )
        ranked = kb_ranked(merchant_id=merchant_id, words=words, limit=5)
        fast = kb_search(merchant_id=merchant_id, query=query)
        assert [a.pk for a in fast] == ranked and set(ranked) <= matching
        assert len(ranked) == min(5, len(matching))
        orm = KbArticle.objects.in_bulk(ranked)
        for a in fast:
            b = orm[a.pk]
            assert (a.pk, a.title, a.body, a.slug) == (b.pk, b.title, b.body, b.slug)
    assert kb_search(merchant_id=merchant_id, query="refund")  # the seed's articles match


def test_only_the_models_own_foreign_keys_are_read_beside_it(seeded):
    ticket = Ticket.objects.get(reference="NW-1")
    with pytest.raises(FieldDoesNotExist):
        row_by_pk(Ticket, ticket.pk, related=("customer__merchant",))
    with pytest.raises(TypeError):
        row_by_pk(Ticket, ticket.pk, related=("messages",))  # a reverse relation


def test_a_runs_ledger_entries_and_unperformed_approvals_read_as_the_orm_reads_them(seeded):
    """``effects_summary``'s two reads: an entry under a person's approval (cached on it), one
    with no approval (cached as None), and of three approvals only the one approved and
    performed is left out."""
    import datetime as dt

    from django.db.models import Exists, OuterRef, Q
    from django.utils import timezone

    from agent.models.ledger import LedgerEntry, LedgerState
    from agent.run.selectors import run_approvals_not_performed, run_ledger_entries
    from approvals.models import Approval, ApprovalStatus

    owner = get_user_model().objects.get(email="owner@northwind.test")
    run = run_create(ticket=Ticket.objects.get(reference="NW-1"), user=owner)
    now = timezone.now()

    def approval(call: str, status: str, minutes: int) -> Approval:
        return Approval.objects.create(
            merchant_id=run.merchant_id,
            run=run,
            tool_call_id=call,
            tool="issue_refund",
            arguments={"order_reference": "NW-1042", "amount_cents": 100},
            args_hash=call * 8,
            preview=f"Refund 1.00 USD ({call})",
            status=status,
            decided_by=owner if status != ApprovalStatus.PENDING else None,
            requested_at=now - dt.timedelta(minutes=minutes),
            expires_at=now + dt.timedelta(hours=1),
        )

    performed = approval("toolu_a", ApprovalStatus.APPROVED, 3)
    approval("toolu_b", ApprovalStatus.APPROVED, 2)  # approved, never performed
    approval("toolu_c", ApprovalStatus.DENIED, 1)
    for call, by in (("toolu_a", performed), ("toolu_d", None)):
        LedgerEntry.objects.create(
            key=f"{run.pk}:{call}",
            merchant_id=run.merchant_id,
            root_run=run,
            run=run,
            tool="issue_refund",
            tool_call_id=call,
            args_hash="x",
            identity="i",
            arguments={},
            approval=by,
            ok=True,
            result="done",
            state=LedgerState.DONE,
            adapter="database",
        )
    orm_entries = list(
        LedgerEntry.objects.filter(run_id=run.pk)
        .select_related("approval")
        .order_by("created_at", "id")
    )
    fast_entries = run_ledger_entries(run.pk)
    assert len(fast_entries) == len(orm_entries) == 2
    for fast, orm in zip(fast_entries, orm_entries, strict=True):
        _same(fast, orm)
        assert LedgerEntry.approval.is_cached(fast)
    with_approval, without = fast_entries
    _same(with_approval.approval, performed)
    assert with_approval.approval.decider == owner.email and without.approval is None
    used = Exists(LedgerEntry.objects.filter(approval_id=OuterRef("id")))
    orm_left = list(
        Approval.objects.filter(run_id=run.pk)
        .exclude(Q(status=ApprovalStatus.APPROVED) & Q(used))
        .order_by("requested_at", "id")
    )
    fast_left = run_approvals_not_performed(run.pk)
    assert [a.tool_call_id for a in fast_left] == ["toolu_b", "toolu_c"]
    for fast, orm in zip(fast_left, orm_left, strict=True):
        _same(fast, orm)
