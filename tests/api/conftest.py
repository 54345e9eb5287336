"""API fixtures: keys of both tenants, made the way an owner makes them."""

from __future__ import annotations

from typing import Any

from django.test import Client

from deskhand.domain.apikeys.services import key_create
from deskhand.domain.desk.models import Merchant
from tests.console.conftest import LU_OWNER, NW_OWNER, fake_dbos, user

__all__ = ["fake_dbos"]


def new_key(scopes: list[str], merchant: str = "northwind", name: str = "") -> str:
    owner = NW_OWNER if merchant == "northwind" else LU_OWNER
    _, token = key_create(
        merchant=Merchant.objects.get(slug=merchant),
        user=user(owner),
        name=name or f"{merchant} {'+'.join(scopes)}",
        scopes=scopes,
    )
    return token


def bearer(token: str) -> dict[str, Any]:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


def api_client() -> Client:
    return Client(enforce_csrf_checks=True)
