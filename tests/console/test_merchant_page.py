"""The merchant page says where each effect happens, and never shows a credential."""

from __future__ import annotations

import pytest

from deskhand.domain.desk.models import Merchant
from tests.console.conftest import LU_OWNER, NW_VIEWER, client_for

pytestmark = pytest.mark.django_db

KEY = "sk_test_PAGEsecret_00112233445566778899"


def test_the_merchant_page_names_the_adapters_in_use_and_hides_the_key(seeded, monkeypatch):
    Merchant.objects.filter(slug="northwind").update(refund_adapter="payments", mail_adapter="smtp")
    monkeypatch.setenv("DESKHAND_PAYMENTS_URL", "https://payments.example.test")
    monkeypatch.setenv("DESKHAND_PAYMENTS_API_KEY_NORTHWIND", KEY)
    monkeypatch.delenv("DESKHAND_SMTP_HOST", raising=False)

    page = client_for(NW_VIEWER).get("/merchant/").content.decode()

    assert "payment provider (Stripe-style refunds API)" in page
    assert "payments.example.test" in page
    assert "set (DESKHAND_PAYMENTS_API_KEY_NORTHWIND)" in page
    assert KEY not in page
    assert "mail server (SMTP)" in page and "not configured (DESKHAND_SMTP_HOST)" in page


def test_a_merchant_on_the_defaults_is_told_its_effects_stay_in_this_database(seeded):
    page = client_for(LU_OWNER).get("/merchant/").content.decode()
    assert page.count("in this database") == 2
    assert "Lumen" in page and "Northwind" not in page.split("<main")[1]
    assert "No open findings" in page


def test_a_missing_key_is_said_plainly(seeded, monkeypatch):
    Merchant.objects.filter(slug="lumen").update(refund_adapter="payments")
    monkeypatch.delenv("DESKHAND_PAYMENTS_API_KEY", raising=False)
    monkeypatch.delenv("DESKHAND_PAYMENTS_API_KEY_LUMEN", raising=False)
    monkeypatch.setenv("DESKHAND_PAYMENTS_URL", "https://payments.example.test")
    page = client_for(LU_OWNER).get("/merchant/").content.decode()
    assert "missing (DESKHAND_PAYMENTS_API_KEY)" in page
