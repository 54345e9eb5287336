"""The merchant's API keys (docs/api.md): an owner creates one (its token shown once, on the
page the create answers with), sees every key's scopes and last use, and revokes one.

Thin views over ``deskhand.domain.apikeys.services``; only an owner sees the page (a 403 naming the
rule for anyone else), and a key of another merchant is a 404.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods, require_POST

from deskhand.domain.apikeys.models import ApiKey, Scope
from deskhand.domain.apikeys.services import KeyRefused, key_create, key_revoke
from deskhand.domain.desk.permissions import require_owner
from deskhand.web.console.decorators import ConsoleRequest, merchant_member, refuse


def _page(request: ConsoleRequest, status: int = 200, **extra: Any) -> HttpResponse:
    merchant = request.membership.merchant
    return render(
        request,
        "console/keys.html",
        {
            "merchant": merchant,
            "keys": ApiKey.objects.filter(merchant=merchant),
            "scopes": Scope.values,
            **extra,
        },
        status=status,
    )


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
@merchant_member
def keys(request: ConsoleRequest) -> HttpResponse:
    require_owner(request.user, request.membership.merchant_id, "manage API keys")
    if request.method != "POST":
        return _page(request)
    try:
        key, token = key_create(
            merchant=request.membership.merchant,
            user=request.user,
            name=request.POST.get("name", ""),
            scopes=request.POST.getlist("scope"),
        )
    except KeyRefused as exc:
        return _page(request, 400, error=f"{str(exc)[:1].upper()}{str(exc)[1:]}")
    return _page(request, 201, created=key, token=token)


@require_POST
@login_required
@merchant_member
def key_revoke_view(request: ConsoleRequest, prefix: str) -> HttpResponse:
    require_owner(request.user, request.membership.merchant_id, "manage API keys")
    key = ApiKey.objects.filter(merchant_id=request.membership.merchant_id, prefix=prefix).first()
    if key is None:
        return refuse(request, 404, "There is no such key, or it belongs to another merchant.")
    try:
        key_revoke(key=key, user=request.user)
    except KeyRefused as exc:
        return refuse(request, 409, f"{str(exc)[:1].upper()}{str(exc)[1:]}")
    return _page(request, revoked=key)
