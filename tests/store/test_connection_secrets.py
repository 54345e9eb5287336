"""A store's access token is sealed at rest, rotates to a new key, and is never shown."""

from __future__ import annotations

import json

import pytest
from cryptography.fernet import Fernet
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection as db

from deskhand.domain.desk.models import Merchant
from deskhand.domain.store.models import ShopifyConnection
from deskhand.infra.sealed import SealBroken, seal, unseal
from tests.support.shopify_double import ShopifyDouble

TOKEN = "shpat_double_0123456789abcdef0123456789abcdef"
SECRET = "shpss_client_secret_9f8e7d"


@pytest.fixture
def merchant(db):
    return Merchant.objects.create(slug="harbor", name="Harbor Tea")


def raw_row(pk: int) -> str:
    with db.cursor() as cursor:
        cursor.execute("SELECT * FROM store_shopifyconnection WHERE id = %s", [pk])
        return repr(cursor.fetchone())


def test_the_token_is_stored_sealed_and_opens_only_to_call_shopify(merchant, settings):
    shop = ShopifyDouble(access_token=TOKEN).start()
    settings.DESKHAND_SHOPIFY_BASE_URL = shop.url
    try:
        conn = ShopifyConnection.connect(
            merchant=merchant,
            shop_domain=" Northwind-Double.myshopify.com ",
            access_token=TOKEN,
            webhook_secret=SECRET,
        )
        row = raw_row(conn.pk)
        assert TOKEN not in row and SECRET not in row
        assert "northwind-double.myshopify.com" in row
        assert TOKEN not in repr(conn) + str(conn)
        assert (conn.token_shown, conn.webhook_secret_shown) == ("set", "set")
        assert conn.webhook_secret() == SECRET
        shop.add_order("#1001", "dana@example.com", 10000)
        fresh = ShopifyConnection.objects.get(merchant=merchant)
        with fresh.client() as client:
            assert client.order_by_name("#1001").total == 10000
            assert TOKEN not in repr(client)
        assert shop.requests[-1].token == TOKEN
    finally:
        shop.stop()


def test_connecting_again_replaces_the_connection(merchant):
    ShopifyConnection.connect(merchant=merchant, shop_domain="a.myshopify.com", access_token="t1")
    again = ShopifyConnection.connect(
        merchant=merchant, shop_domain="b.myshopify.com", access_token="t2"
    )
    assert ShopifyConnection.objects.filter(merchant=merchant).count() == 1
    assert again.shop_domain == "b.myshopify.com"
    assert unseal(again.access_token_sealed) == "t2"
    assert again.webhook_secret_shown == "not set"


@pytest.mark.parametrize(
    "domain", ["northwind.com", "https://x.myshopify.com", "x.myshopify.com/admin", ""]
)
def test_a_store_address_that_is_not_a_myshopify_domain_is_refused(merchant, domain):
    with pytest.raises(ValidationError, match=r"myshopify\.com"):
        ShopifyConnection.connect(merchant=merchant, shop_domain=domain, access_token="t")
    assert not ShopifyConnection.objects.exists()


def test_an_empty_token_is_refused(merchant):
    with pytest.raises(ValidationError, match="access token"):
        ShopifyConnection.connect(
            merchant=merchant, shop_domain="a.myshopify.com", access_token=" "
        )


def test_rotation_reseals_under_the_new_key_so_the_old_one_can_go(merchant, settings):
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    settings.DESKHAND_SECRET_KEYS = old
    conn = ShopifyConnection.connect(
        merchant=merchant, shop_domain="a.myshopify.com", access_token=TOKEN, webhook_secret=SECRET
    )
    before = raw_row(conn.pk)
    settings.DESKHAND_SECRET_KEYS = f"{new},{old}"  # deploy: the new key first, the old after
    out = _run("rotate_secrets", "--json")
    assert json.loads(out) == {"resealed": 1}
    assert raw_row(conn.pk) != before
    settings.DESKHAND_SECRET_KEYS = new  # the old key dropped: everything still opens
    conn.refresh_from_db()
    assert unseal(conn.access_token_sealed) == TOKEN
    assert conn.webhook_secret() == SECRET
    settings.DESKHAND_SECRET_KEYS = old  # and the old key alone no longer does
    with pytest.raises(SealBroken):
        unseal(conn.access_token_sealed)


def test_rotation_without_the_key_that_opens_a_secret_stops_with_a_sentence(merchant, settings):
    settings.DESKHAND_SECRET_KEYS = Fernet.generate_key().decode()
    conn = ShopifyConnection.connect(
        merchant=merchant, shop_domain="a.myshopify.com", access_token=TOKEN
    )
    before = raw_row(conn.pk)
    settings.DESKHAND_SECRET_KEYS = Fernet.generate_key().decode()  # the old key lost too soon
    with pytest.raises(CommandError) as stopped:
        call_command("rotate_secrets")
    message = str(stopped.value)
    assert "a.myshopify.com" in message and "no key" in message
    assert TOKEN not in message
    assert raw_row(conn.pk) == before


def test_keys_that_are_not_fernet_keys_are_a_sentence(settings):
    settings.DESKHAND_SECRET_KEYS = "not-a-key"
    with pytest.raises(SealBroken, match="Fernet keys"):
        seal("x")


def test_the_audit_desk_shows_set_never_the_token(merchant, admin_client):
    conn = ShopifyConnection.connect(
        merchant=merchant, shop_domain="a.myshopify.com", access_token=TOKEN, webhook_secret=SECRET
    )
    for url in (
        "/admin/store/shopifyconnection/",
        f"/admin/store/shopifyconnection/{conn.pk}/change/",
    ):
        page = admin_client.get(url)
        assert page.status_code == 200
        html = page.content.decode()
        assert "a.myshopify.com" in html
        assert TOKEN not in html and SECRET not in html
        assert conn.access_token_sealed not in html
    assert ">set<" in html or "set</div>" in html


def _run(*args: str) -> str:
    import io

    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()
