"""The admin is the audit desk: staff read everything, nobody changes anything, merchants never get in."""

from __future__ import annotations

import pytest
from django.contrib import admin
from django.urls import reverse

from agent.models import Run, Step
from agent.models.ledger import LedgerEntry
from approvals.models import Approval, AuditEvent
from deskhand.domain.desk.models import Refund
from tests.console.conftest import AUDITOR, NW_OWNER, client_for
from tests.devtools.synthetic import synthetic_generate

AUDITED = [Run, Step, LedgerEntry, Approval, AuditEvent, Refund]


@pytest.fixture
def history(seeded):
    synthetic_generate(200, seed=5)


def changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def test_merchant_users_never_reach_the_admin(history):
    c = client_for(NW_OWNER)
    response = c.get("/admin/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert c.get(changelist(Run)).status_code == 302


def test_the_auditor_reads_every_audit_table_and_detail_page(history):
    c = client_for(AUDITOR)
    assert c.get("/admin/").status_code == 200
    for model in AUDITED:
        assert c.get(changelist(model)).status_code == 200, model
        obj = model.objects.first()
        url = reverse(
            f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[obj.pk]
        )
        body = c.get(url).content.decode()
        assert "Save" not in body, model


def test_nobody_may_add_change_or_delete_not_even_a_superuser(history, django_user_model):
    root = django_user_model.objects.create_superuser(
        "root@deskhand.test", "root@deskhand.test", "x" * 20
    )
    ours = [
        (m, a)
        for m, a in admin.site._registry.items()
        if m._meta.app_label in ("desk", "mail", "agent", "approvals")
    ]
    assert len(ours) >= 14
    for model, model_admin in ours:
        request = type("R", (), {"user": root})()
        assert not model_admin.has_add_permission(request), model
        assert not model_admin.has_change_permission(request), model
        assert not model_admin.has_delete_permission(request), model
    c = client_for(AUDITOR)
    run = Run.objects.first()
    meta = Run._meta
    assert c.get(reverse(f"admin:{meta.app_label}_{meta.model_name}_add")).status_code == 403
    assert (
        c.post(
            reverse(f"admin:{meta.app_label}_{meta.model_name}_delete", args=[run.pk]),
            {"post": "yes"},
        ).status_code
        == 403
    )
    assert Run.objects.filter(pk=run.pk).exists()


def test_filters_and_search_by_ledger_key_run_id_and_order_reference(history):
    c = client_for(AUDITOR)
    entry = LedgerEntry.objects.first()
    assert entry.key in c.get(changelist(LedgerEntry), {"q": entry.key}).content.decode()
    run_id = str(entry.run_id)
    assert run_id[:8] in c.get(changelist(Step), {"q": run_id}).content.decode()
    assert c.get(changelist(Step), {"q": "not-a-uuid"}).status_code == 200
    ref = entry.arguments.get("order_reference") or entry.arguments.get("reference")
    assert c.get(changelist(Refund), {"q": ref}).status_code == 200
    assert entry.key in c.get(changelist(LedgerEntry), {"q": ref}).content.decode()
    for model, params in (
        (Run, {"status__exact": "failed"}),
        (Step, {"tool": "get_ticket"}),
        (Approval, {"status__exact": "approved"}),
        (LedgerEntry, {"merchant__id__exact": entry.merchant_id}),
    ):
        assert c.get(changelist(model), params).status_code == 200


def test_related_records_are_linked(history):
    c = client_for(AUDITOR)
    entry = LedgerEntry.objects.exclude(approval=None).first()
    body = c.get(changelist(LedgerEntry)).content.decode()
    assert reverse("admin:agent_run_change", args=[entry.run_id]) in body
    assert reverse("admin:approvals_approval_change", args=[entry.approval_id]) in body
    run_page = c.get(reverse("admin:agent_run_change", args=[entry.run_id])).content.decode()
    assert f"run__id__exact={entry.run_id}" in run_page


def test_the_audit_desk_names_its_tables_in_english(seeded):
    body = client_for(AUDITOR).get("/admin/").content.decode()
    assert "Approval policies" in body and "Webhook deliveries" in body
    for model in admin.site._registry:
        plural = str(model._meta.verbose_name_plural)
        assert not plural.endswith(("ys", "sss")) or plural.endswith(("days", "keys")), plural


def test_runs_are_listed_newest_first_in_columns_that_fit(seeded):
    from tests.console.conftest import make_run

    older = make_run("NW-1", status="succeeded")
    newer = make_run("NW-2", status="succeeded")
    Run.objects.filter(pk=older.pk).update(created_at=newer.created_at.replace(year=2020))
    body = client_for(AUDITOR).get(changelist(Run)).content.decode()
    assert body.index(str(newer.pk)[:8]) < body.index(str(older.pk)[:8])
    assert "<th" in body and "provider" not in body.split("<thead>", 1)[1].split("</thead>", 1)[0]
