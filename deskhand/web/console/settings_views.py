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

from approvals.audit import audit_record
from approvals.merchant_settings import settings_change
from approvals.models import AuditEvent
from deskhand.domain.desk.models import Merchant
from deskhand.domain.desk.permissions import require_owner
from deskhand.domain.store.connect import ConnectRefused, store_connect, webhook_address
from deskhand.domain.store.models import ShopifyConnection
from deskhand.web.console import present
from deskhand.web.console.decorators import ConsoleRequest, merchant_member
from deskhand.web.console.forms import MerchantSettingsForm, ShopifyConnectForm

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
            "shopify_form": extra.pop("shopify_form", None) or ShopifyConnectForm(),
            "shopify_address": webhook_address(merchant.slug),
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
    changed = settings_change(merchant=merchant, values=form.values(), by=request.user)
    fresh = Merchant.objects.get(pk=merchant.pk)
    return _page(request, MerchantSettingsForm.for_merchant(fresh), changed=changed, saved=True)


@require_http_methods(["POST"])
@login_required
@merchant_member
def shopify_connect(request: ConsoleRequest) -> HttpResponse:
    """Connect the store (owner only): subscribe its webhooks, then seal and save the secrets.
    A refusal is a 400 with Shopify's or the form's sentence, and nothing is saved."""
    merchant = request.membership.merchant
    require_owner(request.user, merchant.pk, "connect the Shopify store")
    form = ShopifyConnectForm(request.POST)
    fresh = MerchantSettingsForm.for_merchant(merchant)
    if not form.is_valid():
        return _page(request, fresh, 400, shopify_form=form)
    try:
        _, created = store_connect(merchant=merchant, **form.cleaned_data)
    except ConnectRefused as exc:
        return _page(request, fresh, 400, shopify_form=ShopifyConnectForm(), shopify_error=str(exc))
    audit_record(
        merchant_id=merchant.pk,
        actor=request.user,
        action="merchant.shopify_connected",
        channel="web",
        detail={
            "shop_domain": form.cleaned_data["shop_domain"].strip().lower(),
            "subscribed": created,
        },
    )
    return _page(request, fresh, shopify_connected=created)
