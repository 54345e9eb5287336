"""The merchant's team: who is a member with which role, who is invited, and the invitation link.

Every member sees the team; only an owner invites, resends, withdraws, changes a role or
removes someone (a 403 naming the rule for anyone else, before any input is read). A member
or invitation of another merchant is a 404. The link's page (``invitation``) is public: it
shows what is offered and accepts it, as a new person (name and password) or as the
signed-in account the invitation is for. Thin views over ``approvals.team``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model, login
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from approvals.team import (
    TeamRefused,
    invitation_accept,
    invitation_for_token,
    invitation_issue,
    invitation_resend,
    invitation_revoke,
    member_remove,
    member_role_set,
)
from deskhand.domain.desk.models import Invitation, Membership, Role
from deskhand.domain.desk.permissions import require_owner
from deskhand.web.console.decorators import (
    SESSION_MERCHANT,
    ConsoleRequest,
    merchant_member,
    refuse,
    sentence_of,
)


def _page(request: ConsoleRequest, status: int = 200, **extra: Any) -> HttpResponse:
    merchant = request.membership.merchant
    now = timezone.now()
    invitations = Invitation.objects.filter(
        merchant=merchant, accepted_at__isnull=True, revoked_at__isnull=True
    ).order_by("-sent_at")
    return render(
        request,
        "console/team.html",
        {
            "merchant": merchant,
            "members": Membership.objects.filter(merchant=merchant)
            .select_related("user")
            .order_by("role", "user__email"),
            "invitations": [(i, now >= i.expires_at) for i in invitations],
            "roles": Role.values,
            "is_owner": request.membership.is_owner,
            **extra,
        },
        status=status,
    )


@require_http_methods(["GET", "HEAD", "POST"])
@login_required
@merchant_member
def team(request: ConsoleRequest) -> HttpResponse:
    if request.method != "POST":
        return _page(request)
    require_owner(request.user, request.membership.merchant_id, "invite people")
    try:
        invitation = invitation_issue(
            merchant=request.membership.merchant,
            email=request.POST.get("email", ""),
            role=request.POST.get("role", ""),
            by=request.user,
        )
    except TeamRefused as exc:
        return _page(request, 400, error=sentence_of(exc))
    return _page(request, 201, done=f"{invitation.email} is invited as {invitation.role}.")


def _invitation(request: ConsoleRequest, pk: int) -> Invitation | None:
    return Invitation.objects.filter(merchant_id=request.membership.merchant_id, pk=pk).first()


@require_POST
@login_required
@merchant_member
def invitation_action(request: ConsoleRequest, pk: int, action: str) -> HttpResponse:
    """``resend`` (a new link; the old one stops working) or ``revoke`` an invitation."""
    require_owner(request.user, request.membership.merchant_id, "manage invitations")
    invitation = _invitation(request, pk)
    if invitation is None:
        return refuse(
            request, 404, "There is no such invitation, or it belongs to another merchant."
        )
    try:
        if action == "resend":
            invitation_resend(invitation=invitation, by=request.user)
            done = (
                f"The invitation to {invitation.email} is sent again: the old link no longer works."
            )
        else:  # "revoke": the URLs name no other action
            invitation_revoke(invitation=invitation, by=request.user)
            done = f"The invitation to {invitation.email} is withdrawn."
    except TeamRefused as exc:
        return refuse(request, 409, sentence_of(exc))
    return _page(request, done=done)


def _member(request: ConsoleRequest, pk: int) -> Membership | None:
    return (
        Membership.objects.filter(merchant_id=request.membership.merchant_id, pk=pk)
        .select_related("user")
        .first()
    )


@require_POST
@login_required
@merchant_member
def member_role_view(request: ConsoleRequest, pk: int) -> HttpResponse:
    require_owner(request.user, request.membership.merchant_id, "change roles")
    member = _member(request, pk)
    if member is None:
        return refuse(request, 404, "There is no such member, or they belong to another merchant.")
    try:
        changed = member_role_set(
            membership=member, role=request.POST.get("role", ""), by=request.user
        )
    except TeamRefused as exc:
        return _page(request, 409, error=sentence_of(exc))
    return _page(
        request, done=f"{changed.user.email or changed.user} is now {changed.role_article}."
    )


@require_POST
@login_required
@merchant_member
def member_remove_view(request: ConsoleRequest, pk: int) -> HttpResponse:
    require_owner(request.user, request.membership.merchant_id, "remove members")
    member = _member(request, pk)
    if member is None:
        return refuse(request, 404, "There is no such member, or they belong to another merchant.")
    try:
        member_remove(membership=member, by=request.user)
    except TeamRefused as exc:
        return _page(request, 409, error=sentence_of(exc))
    if member.user_id == request.user.pk:
        request.session.pop(SESSION_MERCHANT, None)
        return redirect("console:home")
    return _page(request, done=f"{member.user.email or member.user} is no longer a member.")


@require_POST
@login_required
def merchant_switch(request: HttpRequest) -> HttpResponse:
    """Work under another of one's memberships (kept in the session)."""
    raw = request.POST.get("merchant", "")
    chosen = (
        Membership.objects.filter(user=request.user.pk, merchant_id=int(raw)).first()
        if raw.isdigit()
        else None
    )
    if chosen is None:
        return refuse(request, 404, "You are not a member of that merchant.")
    request.session[SESSION_MERCHANT] = chosen.merchant_id
    return redirect("console:home")


@require_http_methods(["GET", "HEAD", "POST"])
def invitation(request: HttpRequest, token: str) -> HttpResponse:
    """The link's page: what is offered, and the way to accept it (see the module)."""
    try:
        offer = invitation_for_token(token)
    except TeamRefused as exc:
        return refuse(request, 404, sentence_of(exc), title="Invitation not valid")
    user = request.user
    context: dict[str, Any] = {"invitation": offer, "next": request.get_full_path()}
    if user.is_authenticated:
        context["mine"] = (getattr(user, "email", "") or "").lower() == offer.email
    else:
        context["has_account"] = get_user_model().objects.filter(email__iexact=offer.email).exists()
    if request.method != "POST":
        return render(request, "console/invitation.html", context)
    password = request.POST.get("password", "")
    if not user.is_authenticated and password != request.POST.get("password2", ""):
        return render(
            request,
            "console/invitation.html",
            {**context, "error": "The two passwords differ."},
            status=400,
        )
    try:
        membership = invitation_accept(
            token=token,
            user=user if user.is_authenticated else None,
            name=request.POST.get("name", ""),
            password=password,
        )
    except TeamRefused as exc:
        return render(
            request, "console/invitation.html", {**context, "error": sentence_of(exc)}, status=400
        )
    if not user.is_authenticated:
        login(request, membership.user, backend="django.contrib.auth.backends.ModelBackend")
    request.session[SESSION_MERCHANT] = membership.merchant_id
    return redirect(reverse("console:home"))
