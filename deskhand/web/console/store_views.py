"""The "Shopify store" page beside the settings: which store is connected, and connecting or
disconnecting it. Every member reads the page (the shop's address, the secrets as "set");
only an owner connects, replaces the token or disconnects (a 403 naming the rule for anyone
else). Thin views over ``approvals.store_connection``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods, require_POST

from approvals.models import AuditEvent
from approvals.store_connection import (
    TOPICS,
    StoreRefused,
    connect_store,
    disconnect_store,
    shopify_webhook_address,
)
from deskhand.domain.desk.permissions import require_owner
from deskhand.domain.store.models import ShopifyConnection
from deskhand.web.console.decorators import ConsoleRequest, merchant_member, sentence_of
from deskhand.web.console.forms import ShopifyConnectForm

HISTORY = 20


def _page(
    request: ConsoleRequest, form: ShopifyConnectForm | None = None, status: int = 200, **extra: Any
) -> HttpResponse:
    merchant = request.membership.merchant
    connection = ShopifyConnection.objects.filter(merchant=merchant).first()
    if form is None:
        form = ShopifyConnectForm(
            initial={"shop_domain": connection.shop_domain if connection else ""}
        )
    return render(
        request,
        "console/shopify.html",
        {
            "merchant": merchant,
            "connection": connection,
            "form": form,
            "is_owner": request.membership.is_owner,
            "address": shopify_webhook_address(merchant),
            "topics": TOPICS,
            "history": AuditEvent.objects.filter(
                merchant_id=merchant.pk, action__startswith="store.shopify_"
            ).order_by("-pk")[:HISTORY],
            **extra,
        },
        status=status,
    )


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
@merchant_member
def shopify_store(request: ConsoleRequest) -> HttpResponse:
    if request.method != "POST":
        return _page(request)
    merchant = request.membership.merchant
    require_owner(request.user, merchant.pk, "connect the Shopify store")
    form = ShopifyConnectForm(request.POST)
    if not form.is_valid():
        return _page(request, form, 400)
    try:
        connection, subscribed = connect_store(
            merchant=merchant,
            shop_domain=form.cleaned_data["shop_domain"],
            access_token=form.cleaned_data["access_token"],
            webhook_secret=form.cleaned_data["webhook_secret"],
            by=request.user,
        )
    except StoreRefused as exc:
        form.add_error(exc.field, sentence_of(exc))
        return _page(request, form, 400)
    made = f" Subscribed now: {', '.join(subscribed)}." if subscribed else ""
    return _page(request, done=f"Connected to {connection.shop_domain}.{made}")


@require_POST
@login_required
@merchant_member
def shopify_disconnect(request: ConsoleRequest) -> HttpResponse:
    require_owner(request.user, request.membership.merchant_id, "disconnect the Shopify store")
    try:
        domain = disconnect_store(merchant=request.membership.merchant, by=request.user)
    except StoreRefused as exc:
        return _page(request, status=409, error=sentence_of(exc))
    return _page(request, done=f"Disconnected from {domain}: its token and secret are forgotten.")
