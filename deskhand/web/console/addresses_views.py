"""The merchant's support addresses: what they are, whether mail to them reaches Deskhand,
and what the mail server and DNS must say. Every member reads the page; only an owner adds,
removes, checks or picks the primary one (a 403 naming the rule for anyone else). Thin
views over ``approvals.support_addresses``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from approvals.notifications import console_url
from approvals.support_addresses import (
    AddressRefused,
    address_add,
    address_check_start,
    address_make_primary,
    address_remove,
    check_state,
)
from deskhand.domain.desk.models import SupportAddress
from deskhand.domain.desk.permissions import require_owner
from deskhand.web.console.decorators import ConsoleRequest, merchant_member, refuse, sentence_of


def _page(request: ConsoleRequest, status: int = 200, **extra: Any) -> HttpResponse:
    merchant = request.membership.merchant
    now = timezone.now()
    rows = []
    for a in SupportAddress.objects.filter(merchant=merchant).order_by("-primary", "address"):
        last = a.checks.order_by("-sent_at").first()
        rows.append(
            {"address": a, "check": check_state(last, now), "domain": a.address.rpartition("@")[2]}
        )
    return render(
        request,
        "console/addresses.html",
        {
            "merchant": merchant,
            "rows": rows,
            "is_owner": request.membership.is_owner,
            "webhook_url": console_url(reverse("mail:mailgun")),
            **extra,
        },
        status=status,
    )


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
@merchant_member
def addresses(request: ConsoleRequest) -> HttpResponse:
    if request.method != "POST":
        return _page(request)
    require_owner(request.user, request.membership.merchant_id, "change support addresses")
    try:
        added = address_add(
            merchant=request.membership.merchant,
            address=request.POST.get("address", ""),
            by=request.user,
        )
    except AddressRefused as exc:
        return _page(request, 400, error=sentence_of(exc))
    return _page(request, 201, done=f"{added.address} is added; its routing check is on its way.")


def _address(request: ConsoleRequest, pk: int) -> SupportAddress | None:
    return SupportAddress.objects.filter(merchant_id=request.membership.merchant_id, pk=pk).first()


@require_POST
@login_required
@merchant_member
def address_action(request: ConsoleRequest, pk: int, action: str) -> HttpResponse:
    require_owner(request.user, request.membership.merchant_id, "change support addresses")
    address = _address(request, pk)
    if address is None:
        return refuse(request, 404, "There is no such address, or it belongs to another merchant.")
    try:
        if action == "check":
            address_check_start(address=address, by=request.user)
            done = f"A routing check is on its way to {address.address}."
        elif action == "primary":
            address_make_primary(address=address, by=request.user)
            done = f"Replies now come from {address.address}."
        else:  # "remove": the URLs name no other action
            address_remove(address=address, by=request.user)
            done = f"{address.address} is removed: mail to it is refused from now on."
    except AddressRefused as exc:
        return _page(request, 409, error=sentence_of(exc))
    return _page(request, done=done)
