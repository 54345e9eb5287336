"""The merchant's settings page: every member reads the settings, only an owner changes them.

A viewer or agent who posts gets a 403 naming the rule (not just a missing button); a form
that fails is a 400 with a sentence on each field and changes nothing. The operator's limits
(spend cap, inbound volumes, retention, adapters) are shown, not edited: they are changed by
``manage.py merchant limits`` (``approvals.merchant_settings``).
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from approvals.merchant_settings import settings_change
from approvals.models import AuditEvent
from approvals.store_connection import StoreRefused
from deskhand.domain.desk.models import Merchant
from deskhand.domain.desk.permissions import require_owner
from deskhand.domain.store.models import ShopifyConnection
from deskhand.web.console import present
from deskhand.web.console.decorators import ConsoleRequest, merchant_member
from deskhand.web.console.forms import MerchantSettingsForm

HISTORY = 20


def _page(
    request: ConsoleRequest, form: MerchantSettingsForm, status: int = 200, **extra: object
) -> HttpResponse:
    merchant = Merchant.objects.get(pk=request.membership.merchant_id)
    history = AuditEvent.objects.filter(
        merchant_id=merchant.pk,
        action__in=("merchant.settings_changed", "merchant.limits_changed"),
    ).order_by("-pk")[:HISTORY]
    return render(
        request,
        "console/settings.html",
        {
            "merchant": merchant,
            "form": form,
            "is_owner": request.membership.is_owner,
            "spend_cap": present.dollars(merchant.daily_spend_cap_micros),
            "history": history,
            "shopify": ShopifyConnection.objects.filter(merchant=merchant).first(),
            **extra,
        },
        status=status,
    )


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
@merchant_member
def merchant_settings(request: ConsoleRequest) -> HttpResponse:
    merchant = request.membership.merchant
    if request.method != "POST":
        return _page(request, MerchantSettingsForm.for_merchant(merchant))
    require_owner(request.user, merchant.pk, "change the merchant's settings")
    form = MerchantSettingsForm(request.POST)
    if not form.is_valid():
        return _page(request, form, 400)
    try:
        changed = settings_change(merchant=merchant, values=form.values(), by=request.user)
    except StoreRefused as exc:  # Shopify chosen with no store connected: nothing saved
        form.add_error(exc.field, str(exc))
        return _page(request, form, 400)
    fresh = Merchant.objects.get(pk=merchant.pk)
    return _page(request, MerchantSettingsForm.for_merchant(fresh), changed=changed, saved=True)
