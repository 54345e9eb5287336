"""The console's API keys page: an owner's to manage, the token shown once, revoked at once."""

from __future__ import annotations

import pytest

from deskhand.domain.apikeys.models import ApiKey
from tests.api.conftest import api_client, bearer, new_key
from tests.console.conftest import LU_OWNER, NW_AGENT, NW_OWNER, NW_VIEWER, client_for

pytestmark = pytest.mark.django_db


def test_an_owner_creates_a_key_that_is_shown_once_and_stored_hashed(seeded):
    owner = client_for(NW_OWNER)
    r = owner.post("/merchant/keys/", {"name": "Zendesk", "scope": ["read", "write"]})
    assert r.status_code == 201
    token = r.context["token"]
    assert token.startswith("dh_") and token in r.content.decode()
    key = ApiKey.objects.get(name="Zendesk")
    assert key.scopes == ["read", "write"] and token not in key.digest
    page = owner.get("/merchant/keys/").content.decode()
    assert "Zendesk" in page and token not in page and "never" in page
    assert api_client().get("/api/v1/tickets", **bearer(token)).status_code == 200
    assert key.prefix in owner.get("/merchant/keys/").content.decode()


def test_a_key_needs_a_name_and_a_known_scope(seeded):
    owner = client_for(NW_OWNER)
    assert owner.post("/merchant/keys/", {"name": "", "scope": ["read"]}).status_code == 400
    r = owner.post("/merchant/keys/", {"name": "x", "scope": ["admin"]})
    assert r.status_code == 400 and "not a scope" in r.content.decode()
    assert not ApiKey.objects.exists()


def test_only_an_owner_manages_keys(seeded):
    for email in (NW_AGENT, NW_VIEWER):
        c = client_for(email)
        assert c.get("/merchant/keys/").status_code == 403
        assert c.post("/merchant/keys/", {"name": "x", "scope": ["read"]}).status_code == 403
    assert not ApiKey.objects.exists()


def test_a_revoked_key_is_refused_and_another_merchant_cannot_revoke_ours(seeded):
    token = new_key(["read"])
    key = ApiKey.objects.get()
    assert client_for(LU_OWNER).post(f"/merchant/keys/{key.prefix}/revoke").status_code == 404
    assert api_client().get("/api/v1/usage", **bearer(token)).status_code == 200
    r = client_for(NW_OWNER).post(f"/merchant/keys/{key.prefix}/revoke")
    assert r.status_code == 200 and "revoked" in r.content.decode()
    assert api_client().get("/api/v1/usage", **bearer(token)).status_code == 401
    assert client_for(NW_OWNER).post(f"/merchant/keys/{key.prefix}/revoke").status_code == 409
