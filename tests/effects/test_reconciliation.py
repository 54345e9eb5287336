"""Reconciliation: the ledger against the provider's refunds, on a DBOS schedule; reported, never fixed."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from dbos import DBOS
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from agent.effects.selectors import findings_summary
from agent.ledger.provider_reconciliation import reconcile_merchant
from agent.models.effects import EffectFinding
from agent.models.ledger import LedgerEntry
from deskhand.domain.desk.models import Merchant, Refund
from deskhand.engine.schedules import RECONCILIATION_CRON
from deskhand.infra.dbos.names import RECONCILIATION_SCHEDULE
from tests.durability.helpers import decide, start, user
from tests.fixtures.dbos import clear_of_its_firing, trigger_now, wait_parked, wait_terminal

pytestmark = pytest.mark.django_db(transaction=True)

OWNER = "owner@northwind.test"
CHARGE = "pi_northwind_nw_1042"
NORTHWIND_OTHER_CHARGE = "pi_northwind_nw_1077"


def paid_refund() -> None:
    run = start("NW-1", OWNER)
    wait_parked(str(run.id))
    decide(run, OWNER)
    assert wait_terminal(str(run.id)).status == "succeeded"


def signed_in(email: str) -> Client:
    c = Client()
    c.force_login(user(email))
    return c


def test_a_refund_made_behind_the_ledgers_back_is_found_and_shown_never_fixed(
    dbos_executor, northwind_pays_at_the_provider
):
    api = northwind_pays_at_the_provider
    clear_of_its_firing(RECONCILIATION_SCHEDULE, need_s=60)  # the 5-minute pass must not come first
    paid_refund()
    behind = api.refund_directly(CHARGE, 500)  # in the provider's dashboard, say

    schedule = DBOS.get_schedule(RECONCILIATION_SCHEDULE)
    assert schedule is not None and schedule["schedule"] == RECONCILIATION_CRON
    assert schedule["workflow_name"] == "effects.reconciliation"
    first = trigger_now(RECONCILIATION_SCHEDULE)
    northwind = str(Merchant.objects.get(slug="northwind").pk)
    assert first[northwind]["provider_only"] == 1
    assert sum(first[northwind].values()) == 1  # the refund Deskhand made matches its entry

    finding = EffectFinding.objects.get()
    assert (finding.kind, finding.provider_ref, finding.provider_amount_cents) == (
        "provider_only",
        behind["id"],
        500,
    )
    assert "5.00" in finding.detail and "NW-1042" in finding.detail
    # Seen again on the next pass: the same row, not a second one.
    trigger_now(RECONCILIATION_SCHEDULE)
    assert EffectFinding.objects.count() == 1
    # Never "fixed": no refund row invented, nothing voided at the provider.
    assert Refund.objects.count() == 1 and len(api.refunds) == 2
    assert LedgerEntry.objects.filter(tool="issue_refund").count() == 1

    summary = findings_summary()
    assert summary["ok"] is False and summary["open"] == 1
    assert summary["by_kind"] == {"provider_only": 1} and summary["by_merchant"] == {"northwind": 1}
    # ...and so does the operator's health report, which is not ok while money disagrees.
    out = io.StringIO()
    with pytest.raises(SystemExit):  # not healthy: a non-zero exit
        call_command("health", "--json", stdout=out)
    report = json.loads(out.getvalue().strip().splitlines()[-1])
    assert report["effects"]["open"] == 1 and report["effects"]["by_kind"] == {"provider_only": 1}
    assert report["ok"] is False
    assert Client().get("/healthz").json()["effect_findings_open"] == 1

    admin = signed_in("auditor@deskhand.test").get("/admin/agent/effectfinding/")
    assert admin.status_code == 200 and behind["id"] in admin.content.decode()
    page = signed_in(OWNER).get("/merchant/").content.decode()
    assert behind["id"] in page or "5.00" in page
    assert "payment finding" in signed_in(OWNER).get("/").content.decode()
    # The other tenant sees none of it.
    assert "payment finding" not in signed_in("owner@lumen.test").get("/").content.decode()


def test_a_ledger_entry_the_provider_does_not_know_and_an_amount_that_differs_are_found(
    dbos_executor, northwind_pays_at_the_provider
):
    api = northwind_pays_at_the_provider
    clear_of_its_firing(RECONCILIATION_SCHEDULE, need_s=60)  # the 5-minute pass must not come first
    paid_refund()
    entry = LedgerEntry.objects.get(tool="issue_refund")
    api.refunds[0]["amount"] = 3700  # the provider's record of it says otherwise

    counts = reconcile_merchant(entry.merchant_id, now=timezone.now())
    assert counts["amount_differs"] == 1
    differs = EffectFinding.objects.get(kind="amount_differs")
    assert (differs.ledger_amount_cents, differs.provider_amount_cents) == (3800, 3700)
    assert differs.ledger_entry == entry

    api.refunds.clear()  # ...and then it has no record of it at all
    counts = reconcile_merchant(entry.merchant_id, now=timezone.now())
    assert counts["ledger_only"] == 1
    assert EffectFinding.objects.get(kind="ledger_only").ledger_entry == entry
    entry.refresh_from_db()
    assert entry.state == "done"  # reported, not rewritten


def test_the_reconciliation_clock_is_its_input(tseeded, northwind_pays_at_the_provider):
    api = northwind_pays_at_the_provider
    now = timezone.now()
    api.clock = lambda: (now - dt.timedelta(days=30)).timestamp()
    api.refund_directly(NORTHWIND_OTHER_CHARGE, 700)  # a month ago
    northwind = Merchant.objects.get(slug="northwind").pk

    assert reconcile_merchant(northwind, now=now)["provider_only"] == 0  # outside the look-back
    assert reconcile_merchant(northwind, now=now - dt.timedelta(days=29))["provider_only"] == 1
    assert EffectFinding.objects.get().found_at == now - dt.timedelta(days=29)


def test_a_person_settles_a_finding_and_it_leaves_the_summary(
    tseeded, northwind_pays_at_the_provider, capsys
):
    from django.core.management import call_command

    api = northwind_pays_at_the_provider
    api.refund_directly(CHARGE, 900)
    call_command("effects_findings", "--reconcile")
    finding = EffectFinding.objects.get()
    assert findings_summary()["open"] == 1

    call_command(
        "effects_findings",
        "--resolve",
        str(finding.pk),
        "--note",
        "goodwill refund by phone",
        "--by",
        OWNER,
    )
    finding.refresh_from_db()
    assert finding.resolved_by == OWNER and finding.resolution == "goodwill refund by phone"
    assert findings_summary() == {**findings_summary(), "ok": True, "open": 0}
    # Seen again by the next pass, it stays settled (the same fingerprint).
    call_command("effects_findings", "--reconcile")
    assert EffectFinding.objects.count() == 1 and findings_summary()["open"] == 0
