"""The console's rules at a glance: who is signed in, at which merchant, and may they act.

A view stacks ``@login_required`` (Django), ``@merchant_member`` (the request
gets ``request.membership``; everything it reads is scoped to that merchant)
and, for writes, ``@actor_required("…")`` (owners and agents act; a viewer
watches and gets a 403 naming the rule). Objects of another merchant are
looked up *through* the membership's merchant, so they 404 rather than 403:
a tenant never learns what another tenant has.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, cast

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django_htmx.middleware import HtmxDetails

from deskhand.domain.desk.models import Membership
from deskhand.domain.desk.permissions import NotAllowed, NotVisible, require_actor

ViewFunc = Callable[..., HttpResponse]

SESSION_MERCHANT = "console_merchant_id"


class ConsoleRequest(HttpRequest):
    htmx: HtmxDetails
    membership: Membership


def refuse(request: HttpRequest, status: int, message: str, title: str = "") -> HttpResponse:
    """A clear 4xx page (or fragment, for htmx) with the sentence that explains it."""
    titles = {
        400: "Not accepted",
        403: "Not allowed",
        404: "Not found",
        409: "Cannot do that now",
        429: "Too many attempts",
    }
    return render(
        request,
        "console/refused.html",
        {"status": status, "title": title or titles.get(status, "Refused"), "message": message},
        status=status,
    )


def sentence_of(exc: Exception) -> str:
    """A service's refusal as the page says it: its sentence, capitalised."""
    text = str(exc)
    return f"{text[:1].upper()}{text[1:]}"


def current_membership(request: HttpRequest) -> Membership | None:
    """The membership the console works under: the one chosen this session, else the first."""
    user = request.user
    if not user.is_authenticated:
        return None
    memberships = (
        Membership.objects.filter(user_id=user.pk)
        .select_related("merchant")
        .order_by("merchant_id")
    )
    chosen = request.session.get(SESSION_MERCHANT)
    if chosen is not None:
        picked = memberships.filter(merchant_id=chosen).first()
        if picked is not None:
            return picked
    return memberships.first()


def merchant_member(view: ViewFunc) -> ViewFunc:
    """Attach ``request.membership``. A signed-in user with no merchant gets a 403, except a
    staff auditor reading a page, who is sent to the audit desk (the admin) instead."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        membership = current_membership(request)
        if membership is None:
            if request.user.is_staff and request.method in ("GET", "HEAD"):
                # A staff auditor belongs to no merchant: the audit desk is their console.
                return redirect("admin:index")
            hint = (
                " Staff auditors read the audit trail at /admin/." if request.user.is_staff else ""
            )
            return refuse(request, 403, f"{request.user} is not a member of any merchant.{hint}")
        cast(ConsoleRequest, request).membership = membership
        try:
            return view(request, *args, **kwargs)
        except NotVisible:
            return refuse(request, 404, "There is nothing here, or it belongs to another merchant.")
        except NotAllowed as exc:
            return refuse(request, 403, str(exc))

    return wrapper


def actor_required(action: str) -> Callable[[ViewFunc], ViewFunc]:
    """Only owners and agents may ``action``; checked before the view reads its input."""

    def decorator(view: ViewFunc) -> ViewFunc:
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            membership = cast(ConsoleRequest, request).membership
            try:
                require_actor(request.user, membership.merchant_id, action)
            except NotAllowed as exc:
                return refuse(request, 403, str(exc))
            return view(request, *args, **kwargs)

        return wrapper

    return decorator
