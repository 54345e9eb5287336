"""``row_by_pk`` hands back what the ORM would: the same field values, the related rows
cached, an empty foreign key cached as None, and the ORM's error for a missing row."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth import get_user_model
from django.forms.models import model_to_dict

from agent.models import Run
from agent.run.services import run_create
from deskhand.desk.models import Order, Ticket
from deskhand.desk.rows import row_by_pk


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
