"""The merchant's settings: an owner changes them on a form that explains each one, each
change audited with before and after; everyone else reads them; the operator's limits are
the operator's (``manage.py merchant limits``), never the owner's form."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from approvals.models import AuditEvent
from deskhand.domain.desk.models import Merchant, RefundAdapter
from tests.console.conftest import LU_OWNER, NW_AGENT, NW_OWNER, NW_VIEWER, client_for

pytestmark = pytest.mark.django_db

URL = "/merchant/settings/"


def _form(**changes: object) -> dict[str, object]:
    """What the page posts as it stands (its initial values), with ``changes``."""
    page = client_for(NW_OWNER).get(URL)
    initial = {name: page.context["form"][name].value() for name in page.context["form"].fields}
    data = {k: v for k, v in initial.items() if v is not None}
    if not data.get("reply_reminder"):
        data.pop("reply_reminder", None)
    data.update(changes)
    return data


def _northwind() -> Merchant:
    return Merchant.objects.get(slug="northwind")


def test_an_owner_changes_settings_in_the_units_people_use_and_each_change_is_audited(seeded):
    before = _northwind()
    r = client_for(NW_OWNER).post(
        URL,
        _form(
            run_refund_ceiling="$120.50",
            approval_ttl_hours=48,
            auto_runs="new_tickets",
            ticket_prefix="nwc",
        ),
    )
    assert r.status_code == 200 and "4 settings changed" in r.content.decode()
    after = _northwind()
    assert after.run_refund_ceiling_cents == 12050 and after.approval_ttl_seconds == 48 * 3600
    assert (after.auto_runs, after.ticket_prefix) == ("new_tickets", "NWC")
    event = AuditEvent.objects.get(action="merchant.settings_changed")
    assert event.actor_name == NW_OWNER and event.channel == "web"
    assert event.detail["changed"]["run_refund_ceiling_cents"] == [
        before.run_refund_ceiling_cents,
        12050,
    ]
    page = client_for(NW_VIEWER).get(URL).content.decode()  # the history, for everyone
    assert "run_refund_ceiling_cents" in page and NW_OWNER in page


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"run_refund_ceiling": "12.345"}, "more than two decimals"),
        ({"run_refund_ceiling": "-5"}, "negative"),
        ({"daily_refund_ceiling": "ten"}, "not an amount"),
        ({"run_refund_ceiling": "5000", "daily_refund_ceiling": "100"}, "above the day"),
        ({"timezone": "Mars/Olympus"}, "not a time zone"),
        ({"approval_ttl_hours": 0}, "greater than or equal to 1"),
        ({"approval_sla_hours": 100, "approval_ttl_hours": 10}, "before the request expires"),
        ({"ticket_prefix": "N-W"}, "Letters and digits only"),
        ({"auto_runs": "always"}, "Select a valid choice"),
        ({"order_source": "ftp"}, "Select a valid choice"),
    ],
)
def test_a_bad_value_is_a_400_with_a_sentence_and_nothing_is_saved(seeded, changes, said):
    before = Merchant.objects.filter(slug="northwind").values().get()
    r = client_for(NW_OWNER).post(URL, _form(**changes))
    assert r.status_code == 400 and said in r.content.decode()
    assert Merchant.objects.filter(slug="northwind").values().get() == before
    assert not AuditEvent.objects.filter(action="merchant.settings_changed").exists()


def test_an_owner_chooses_where_orders_are_read_and_the_page_says_what_that_does(seeded):
    page = client_for(NW_OWNER).get(URL).content.decode()
    assert "Where the agent, the ticket page and the refund ceilings read" in page
    assert "A run keeps the source it started with" in page
    r = client_for(NW_OWNER).post(URL, _form(order_source="pushed"))
    assert r.status_code == 200 and "1 setting changed" in r.content.decode()
    assert _northwind().order_source == "pushed"
    event = AuditEvent.objects.get(action="merchant.settings_changed")
    assert event.detail["changed"] == {"order_source": ["local", "pushed"]}
    # A form posted without the field (an older page) leaves the source as it is.
    without = {k: v for k, v in _form().items() if k != "order_source"}
    assert client_for(NW_OWNER).post(URL, without).status_code == 200
    assert _northwind().order_source == "pushed"
    r = client_for(NW_VIEWER).post(URL, _form(order_source="local"))
    assert r.status_code == 403 and _northwind().order_source == "pushed"


def test_shopify_without_a_connected_store_is_refused_with_a_sentence_and_nothing_saved(seeded):
    before = Merchant.objects.filter(slug="northwind").values().get()
    r = client_for(NW_OWNER).post(URL, _form(order_source="shopify", approval_ttl_hours=48))
    page = r.content.decode()
    assert r.status_code == 400 and "Connect the Shopify store first" in page
    assert "Nothing was saved" in page
    assert Merchant.objects.filter(slug="northwind").values().get() == before  # the TTL too
    assert not AuditEvent.objects.filter(action="merchant.settings_changed").exists()


def test_agents_and_viewers_read_the_settings_and_change_none(seeded):
    before = Merchant.objects.filter(slug="northwind").values().get()
    for email in (NW_AGENT, NW_VIEWER):
        c = client_for(email)
        assert c.get(URL).status_code == 200
        r = c.post(URL, _form(run_refund_ceiling="1"))
        assert r.status_code == 403 and "only an owner" in r.content.decode()
    # Another merchant's owner changes their own merchant, never Northwind.
    client_for(LU_OWNER).post(URL, {"timezone": "UTC"})
    assert Client().post(URL, _form(run_refund_ceiling="1")).status_code == 302  # sign in
    assert Merchant.objects.filter(slug="northwind").values().get() == before


def test_the_owners_form_cannot_reach_the_operators_limits(seeded):
    r = client_for(NW_OWNER).post(
        URL, _form(refund_adapter="payments", daily_spend_cap_micros=10**12, retention_days=1)
    )
    assert r.status_code == 200
    m = _northwind()
    assert (m.refund_adapter, m.retention_days) == (RefundAdapter.DATABASE, 365)
    assert m.daily_spend_cap_micros == 10_000_000


def test_the_operator_sets_limits_by_command_audited_as_the_operators_act(seeded):
    out = io.StringIO()
    call_command(
        "merchant",
        "limits",
        "northwind",
        "--daily-spend-cap",
        "25",
        "--refund-adapter",
        "payments",
        "--json",
        stdout=out,
    )
    changed = json.loads(out.getvalue())["changed"]
    assert changed["daily_spend_cap_micros"] == [10_000_000, 25_000_000]
    assert changed["refund_adapter"] == ["database", "payments"]
    event = AuditEvent.objects.get(action="merchant.limits_changed")
    assert (event.actor_name, event.channel) == ("", "cli")
    with pytest.raises(CommandError, match="at least 7"):
        call_command("merchant", "limits", "northwind", "--retention-days", "1")
    with pytest.raises(CommandError, match="no merchant"):
        call_command("merchant", "limits", "nowhere", "--retention-days", "30")
    assert _northwind().retention_days == 365
