"""Who may do what: one function, used by views, commands and services alike."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from deskhand.domain.desk.models import Membership, Merchant, Role


class NotAllowed(Exception):
    """The user may see this merchant's data but may not take this action."""


class NotVisible(Exception):
    """The user has no role at this merchant: it must look as if the thing does not exist."""


def membership(
    user: AbstractBaseUser | AnonymousUser, merchant: Merchant | int
) -> Membership | None:
    if not user.is_authenticated:
        return None
    merchant_id = merchant if isinstance(merchant, int) else merchant.pk
    return (
        Membership.objects.filter(user_id=user.pk, merchant_id=merchant_id)
        .select_related("merchant")
        .first()
    )


def require_member(user: AbstractBaseUser | AnonymousUser, merchant: Merchant | int) -> Membership:
    m = membership(user, merchant)
    if m is None:
        raise NotVisible("not found")
    if not user.is_active:
        # A person who left: their past acts stay on record, and they can take no new one.
        raise NotAllowed(f"{user} is deactivated and may no longer act for {m.merchant.name}.")
    return m


def require_actor(
    user: AbstractBaseUser | AnonymousUser, merchant: Merchant | int, action: str
) -> Membership:
    """Owners and agents act; a viewer watches. Raises with a sentence naming the rule."""
    m = require_member(user, merchant)
    if m.role not in (Role.OWNER, Role.AGENT):
        raise NotAllowed(
            f"{user} is a viewer at {m.merchant.name} and may watch runs but not {action}."
        )
    return m


def require_owner(
    user: AbstractBaseUser | AnonymousUser, merchant: Merchant | int, action: str
) -> Membership:
    """Only an owner may ``action`` (e.g. write the approval policy); a sentence says so."""
    m = require_member(user, merchant)
    if m.role != Role.OWNER:
        raise NotAllowed(
            f"{user} is {m.role_article} at {m.merchant.name}; only an owner may {action}."
        )
    return m
