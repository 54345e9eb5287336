"""A merchant's team: making a merchant, inviting people to it, and changing who holds which role.

Why here: the team is the people who approve, and everything they do to it is audited
(``approvals.audit``) and told by mail through the notifications outbox, both of which live
in this package; the rows themselves (``Merchant``, ``Membership``, ``Invitation``) are the
domain's.

**The invitation token.** A link carries 256 random bits (``secrets.token_urlsafe``); the
row keeps only their sha256, so reading the database accepts nothing, and a 256-bit secret
needs no slow hash (as API keys, ``deskhand.domain.apikeys``). Django's own token machinery
(``PasswordResetTokenGenerator``) was the other choice: it is stateless, tied to
``PASSWORD_RESET_TIMEOUT`` and to a user who does not exist yet here, and could not be
revoked one at a time. Password reset itself does use Django's (``deskhand.web.console.team``).
The link waits in its outbox row until sent and is scrubbed there once sent (at least once,
as every notification: a crash between the send and the commit sends it again).

**What an invitation link never does**: set or reset the password of an account that exists.
An address with an account must sign in first and then accept into a second membership.

Every act here is one transaction: a merchant with its owner's invitation, an acceptance
with its account and membership, or nothing.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
import zoneinfo
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model, password_validation
from django.core.exceptions import ValidationError
from django.core.validators import validate_email, validate_slug
from django.db import IntegrityError, transaction
from django.db.models.functions import Lower
from django.urls import reverse
from django.utils import timezone

from approvals.audit import audit_record
from approvals.models import Channel, person_name
from approvals.notification_models import Notification, NotificationEvent, Transport
from approvals.notifications import console_url
from deskhand.domain.desk.models import Invitation, Membership, Merchant, Role
from deskhand.domain.desk.permissions import require_owner

NAME_MAX = 200
SLUG_MAX = 50


class TeamRefused(Exception):
    """A team act that cannot be done, with the sentence that says why."""


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _address(email: str) -> str:
    address = (email or "").strip().lower()
    try:
        validate_email(address)
    except ValidationError:
        raise TeamRefused(f"{email!r} is not an email address.") from None
    return address


def _role(role: str) -> str:
    if role not in Role.values:
        raise TeamRefused(f"role must be one of {', '.join(Role.values)}.")
    return role


def merchant_create(*, name: str, slug: str, owner_email: str, tz: str = "UTC") -> Invitation:
    """A new merchant and the invitation of its first owner (the operator's act)."""
    name = " ".join((name or "").split())
    if not name or len(name) > NAME_MAX:
        raise TeamRefused(f"a merchant needs a name of 1 to {NAME_MAX} characters.")
    slug = (slug or "").strip().lower()
    try:
        validate_slug(slug)
    except ValidationError:
        raise TeamRefused(
            f"{slug!r} is not a slug: use lower-case letters, digits, hyphens and underscores."
        ) from None
    if len(slug) > SLUG_MAX:
        raise TeamRefused(f"a slug is at most {SLUG_MAX} characters.")
    if tz not in zoneinfo.available_timezones():
        raise TeamRefused(f"{tz!r} is not a time zone (for example Europe/Paris, UTC).")
    address = _address(owner_email)
    try:
        with transaction.atomic():
            merchant = Merchant.objects.create(name=name, slug=slug, timezone=tz)
            audit_record(
                merchant_id=merchant.pk,
                action="merchant.created",
                channel=Channel.CLI,
                detail={"slug": slug, "name": name, "timezone": tz},
            )
            return _issue(merchant, address, Role.OWNER, by=None, channel=Channel.CLI)
    except IntegrityError:
        if Merchant.objects.filter(slug=slug).exists():
            raise TeamRefused(f"a merchant with the slug {slug!r} exists already.") from None
        raise


def invitation_issue(
    *, merchant: Merchant, email: str, role: str, by: Any, channel: str = Channel.WEB
) -> Invitation:
    """Invite ``email`` to ``merchant`` as ``role``: an owner's act, mailed through the outbox."""
    require_owner(by, merchant.pk, "invite people")
    address, role = _address(email), _role(role)
    with transaction.atomic():
        Merchant.locked(merchant.pk)  # one open invitation per address, checked then written
        member = (
            Membership.objects.filter(merchant=merchant)
            .annotate(address=Lower("user__email"))
            .filter(address=address)
            .first()
        )
        if member is not None:
            raise TeamRefused(f"{address} is already {member.role_article} at {merchant.name}.")
        if _open(merchant).filter(address=address).exists():
            raise TeamRefused(
                f"{address} has an invitation waiting already: send it again or withdraw it."
            )
        return _issue(merchant, address, role, by=by, channel=channel)


def _open(merchant: Merchant) -> Any:
    return Invitation.objects.filter(
        merchant=merchant, accepted_at__isnull=True, revoked_at__isnull=True
    ).annotate(address=Lower("email"))


def _issue(merchant: Merchant, address: str, role: str, *, by: Any, channel: str) -> Invitation:
    now = timezone.now()
    token = secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        merchant=merchant,
        email=address,
        role=role,
        token_hash=token_digest(token),
        invited_by=by,
        invited_by_name=person_name(by) if by is not None else "",
        sent_at=now,
        expires_at=now + dt.timedelta(days=settings.DESKHAND_INVITATION_DAYS),
    )
    _mail(invitation, token)
    audit_record(
        merchant_id=merchant.pk,
        actor=by,
        action="team.invited",
        channel=channel,
        detail={"invitation": invitation.pk, "email": address, "role": role},
    )
    return invitation


def invitation_link(token: str) -> str:
    return console_url(reverse("invitation", args=[token]))


def _mail(invitation: Invitation, token: str) -> Notification:
    merchant = invitation.merchant
    who = invitation.invited_by_name or "The operator of this Deskhand"
    days = settings.DESKHAND_INVITATION_DAYS
    return Notification.objects.create(
        merchant=merchant,
        invitation=invitation,
        event=NotificationEvent.INVITED,
        transport=Transport.EMAIL,
        recipient=invitation.email,
        subject=f"You are invited to {merchant.name}'s support desk"[:200],
        body=(
            f"{who} invites you to {merchant.name}'s support desk on Deskhand, as"
            f" {'an' if invitation.role[0] in 'aeiou' else 'a'} {invitation.role}.\n\n"
            "Open this link to accept (it works once, for "
            f"{days} day{'s' if days != 1 else ''}):\n\n{{secret}}\n\n"
            "If you did not expect this, ignore this message: nothing happens unless you open"
            " the link.\n"
        ),
        payload={"secret": invitation_link(token)},
        next_attempt_at=timezone.now(),
    )


def invitation_resend(*, invitation: Invitation, by: Any, channel: str = Channel.WEB) -> Invitation:
    """A new link (the old one stops working) and a new expiry, mailed again."""
    require_owner(by, invitation.merchant_id, "send invitations")
    with transaction.atomic():
        locked = (
            Invitation.objects.select_for_update().select_related("merchant").get(pk=invitation.pk)
        )
        if locked.accepted_at is not None:
            raise TeamRefused("This invitation has already been accepted.")
        if locked.revoked_at is not None:
            raise TeamRefused("This invitation was withdrawn: invite the address again instead.")
        token, now = secrets.token_urlsafe(32), timezone.now()
        locked.token_hash = token_digest(token)
        locked.sent_at = now
        locked.expires_at = now + dt.timedelta(days=settings.DESKHAND_INVITATION_DAYS)
        locked.save(update_fields=["token_hash", "sent_at", "expires_at"])
        _mail(locked, token)
        audit_record(
            merchant_id=locked.merchant_id,
            actor=by,
            action="team.invitation_resent",
            channel=channel,
            detail={"invitation": locked.pk, "email": locked.email},
        )
        return locked


def invitation_revoke(*, invitation: Invitation, by: Any, channel: str = Channel.WEB) -> Invitation:
    """Withdraw an invitation not yet accepted: its link stops working."""
    require_owner(by, invitation.merchant_id, "withdraw invitations")
    with transaction.atomic():
        locked = Invitation.objects.select_for_update().get(pk=invitation.pk)
        if locked.accepted_at is not None:
            raise TeamRefused(
                "This invitation has already been accepted: remove the member instead."
            )
        if locked.revoked_at is None:
            locked.revoked_at = timezone.now()
            locked.save(update_fields=["revoked_at"])
            audit_record(
                merchant_id=locked.merchant_id,
                actor=by,
                action="team.invitation_revoked",
                channel=channel,
                detail={"invitation": locked.pk, "email": locked.email},
            )
        return locked


def invitation_for_token(token: str) -> Invitation:
    """The invitation a link names, still acceptable; else a sentence saying why not."""
    invitation = (
        Invitation.objects.select_related("merchant")
        .filter(token_hash=token_digest(token or ""))
        .first()
    )
    if invitation is None:
        raise TeamRefused(
            "This invitation link is not valid: it was mistyped, or a newer invitation replaced it."
        )
    why = invitation.refusal(timezone.now())
    if why:
        raise TeamRefused(why)
    return invitation


def invitation_accept(
    *, token: str, user: Any = None, name: str = "", password: str = ""
) -> Membership:
    """Accept: a signed-in ``user`` whose address it is, or a new person with a name and password.

    An address that has an account must sign in first: the link never sets its password.
    """
    User = get_user_model()
    with transaction.atomic():
        found = invitation_for_token(token)
        invitation = (
            Invitation.objects.select_for_update().select_related("merchant").get(pk=found.pk)
        )
        why = invitation.refusal(timezone.now())
        if why:  # accepted or withdrawn since it was read
            raise TeamRefused(why)
        if user is not None and user.is_authenticated:
            if (user.email or "").strip().lower() != invitation.email:
                raise TeamRefused(
                    f"This invitation is for {invitation.email}, and you are signed in as"
                    f" {person_name(user)}. Sign out, then open the link again."
                )
            person = user
        else:
            if User.objects.filter(email__iexact=invitation.email).exists() or (
                User.objects.filter(username__iexact=invitation.email).exists()
            ):
                raise TeamRefused(
                    f"{invitation.email} already has an account: sign in, then open the link again."
                )
            name = " ".join((name or "").split())
            if not name or len(name) > 150:
                raise TeamRefused("Your name is needed (at most 150 characters).")
            person = User(username=invitation.email, email=invitation.email)
            first, _, last = name.partition(" ")
            person.first_name, person.last_name = first[:150], last[:150]
            try:
                password_validation.validate_password(password, person)
            except ValidationError as exc:
                raise TeamRefused(" ".join(exc.messages)) from None
            person.set_password(password)
            person.save()
        if Membership.objects.filter(user=person, merchant=invitation.merchant).exists():
            raise TeamRefused(f"You are already a member of {invitation.merchant.name}.")
        membership = Membership.objects.create(
            user=person, merchant=invitation.merchant, role=invitation.role
        )
        invitation.accepted_at, invitation.accepted_by = timezone.now(), person
        invitation.save(update_fields=["accepted_at", "accepted_by"])
        audit_record(
            merchant_id=invitation.merchant_id,
            actor=person,
            action="team.joined",
            channel=Channel.WEB,
            detail={"invitation": invitation.pk, "role": invitation.role},
        )
        return membership


def _owners_left(merchant_id: int, without: Membership) -> int:
    return (
        Membership.objects.filter(merchant_id=merchant_id, role=Role.OWNER, user__is_active=True)
        .exclude(pk=without.pk)
        .count()
    )


def member_role_set(
    *, membership: Membership, role: str, by: Any, channel: str = Channel.WEB
) -> Membership:
    """Change a member's role (an owner's act); the last owner stays an owner."""
    require_owner(by, membership.merchant_id, "change roles")
    role = _role(role)
    with transaction.atomic():
        Merchant.locked(membership.merchant_id)  # two owners demoting each other: one wins
        locked = Membership.objects.select_for_update().get(pk=membership.pk)
        if locked.role == role:
            return locked
        if locked.role == Role.OWNER and _owners_left(locked.merchant_id, locked) == 0:
            raise TeamRefused("The last owner cannot be demoted: make someone else an owner first.")
        before, locked.role = locked.role, role
        locked.save(update_fields=["role"])
        audit_record(
            merchant_id=locked.merchant_id,
            actor=by,
            action="team.role_changed",
            channel=channel,
            detail={"user": locked.user_id, "before": before, "after": role},
        )
        return locked


def member_remove(*, membership: Membership, by: Any, channel: str = Channel.WEB) -> None:
    """Remove a member (an owner's act): a staff member who left, named by their past acts."""
    require_owner(by, membership.merchant_id, "remove members")
    with transaction.atomic():
        Merchant.locked(membership.merchant_id)
        locked = Membership.objects.select_for_update().select_related("user").get(pk=membership.pk)
        if locked.role == Role.OWNER and _owners_left(locked.merchant_id, locked) == 0:
            raise TeamRefused("The last owner cannot be removed: make someone else an owner first.")
        audit_record(
            merchant_id=locked.merchant_id,
            actor=by,
            action="team.member_removed",
            channel=channel,
            detail={"user": locked.user_id, "name": person_name(locked.user), "role": locked.role},
        )
        locked.delete()
