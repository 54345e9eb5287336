"""An owner's support addresses: adding and removing them, the primary one, and routing checks.

An address is how inbound mail finds its merchant, so it is unique across the deployment
(whatever the case): one another merchant uses is refused without saying whose it is. A new
address is unverified — mail to it is held, never a ticket — until a **routing check**
comes back: a message sent to the address through the notifications outbox with a one-time
token (``deskhand-check-…``) that the merchant's mail server must route back into Deskhand's
intake (``deskhand.domain.desk.addresses`` recognises it there; the check message never becomes a
ticket). Checks are limited to ``CHECKS_PER_HOUR`` per address. Replies go out from the
primary address, so only a verified address can be primary. Every act is audited.
"""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models.functions import Lower
from django.utils import timezone

from approvals.audit import audit_record
from approvals.models import Channel
from approvals.notification_models import Notification, NotificationEvent, Transport
from deskhand.domain.desk.addresses import CHECK_PREFIX, check_digest
from deskhand.domain.desk.models import AddressCheck, Merchant, SupportAddress
from deskhand.domain.desk.permissions import require_owner

CHECKS_PER_HOUR = 5
# A check not back after this long is reported as not arrived (the route is likely wrong).
CHECK_PATIENCE = dt.timedelta(minutes=5)


class AddressRefused(Exception):
    """An address act that cannot be done, with the sentence that says why."""


def address_add(*, merchant: Merchant, address: str, by: Any) -> SupportAddress:
    """Add an address (unverified; its routing check is sent at once)."""
    require_owner(by, merchant.pk, "change support addresses")
    text = (address or "").strip()
    try:
        validate_email(text)
    except ValidationError:
        raise AddressRefused(f"{text[:254]!r} is not an email address.") from None
    if "+" in text.partition("@")[0]:
        raise AddressRefused("Use the address without a +tag: replies use tags of their own.")
    with transaction.atomic():
        Merchant.locked(merchant.pk)
        taken = (
            SupportAddress.objects.annotate(lower=Lower("address"))
            .filter(lower=text.lower())
            .first()
        )
        if taken is not None:
            if taken.merchant_id == merchant.pk:
                raise AddressRefused(f"{text} is already one of {merchant.name}'s addresses.")
            raise AddressRefused(f"{text} belongs to another merchant on this Deskhand.")
        first = not SupportAddress.objects.filter(merchant=merchant).exists()
        added = SupportAddress.objects.create(merchant=merchant, address=text, primary=first)
        audit_record(
            merchant_id=merchant.pk,
            actor=by,
            action="address.added",
            channel=Channel.WEB,
            detail={"address": text},
        )
        _check(added, by)
        return added


def address_remove(*, address: SupportAddress, by: Any) -> None:
    """Remove an address; mail to it then belongs to no merchant (refused at the door)."""
    require_owner(by, address.merchant_id, "change support addresses")
    with transaction.atomic():
        Merchant.locked(address.merchant_id)
        locked = SupportAddress.objects.select_for_update().get(pk=address.pk)
        audit_record(
            merchant_id=locked.merchant_id,
            actor=by,
            action="address.removed",
            channel=Channel.WEB,
            detail={"address": locked.address, "was_primary": locked.primary},
        )
        was_primary = locked.primary
        locked.delete()
        if was_primary:  # the oldest verified one replies from now on
            heir = (
                SupportAddress.objects.filter(
                    merchant_id=address.merchant_id, verified_at__isnull=False
                )
                .order_by("created_at")
                .first()
            )
            if heir is not None:
                heir.primary = True
                heir.save(update_fields=["primary"])


def address_make_primary(*, address: SupportAddress, by: Any) -> SupportAddress:
    """The address replies come from when a conversation did not start at another one."""
    require_owner(by, address.merchant_id, "change support addresses")
    with transaction.atomic():
        Merchant.locked(address.merchant_id)
        locked = SupportAddress.objects.select_for_update().get(pk=address.pk)
        if locked.verified_at is None:
            raise AddressRefused(
                f"{locked.address} has not passed its routing check: replies cannot come from it."
            )
        if not locked.primary:
            SupportAddress.objects.filter(merchant_id=locked.merchant_id, primary=True).update(
                primary=False
            )
            locked.primary = True
            locked.save(update_fields=["primary"])
            audit_record(
                merchant_id=locked.merchant_id,
                actor=by,
                action="address.primary",
                channel=Channel.WEB,
                detail={"address": locked.address},
            )
        return locked


def address_check_start(*, address: SupportAddress, by: Any) -> AddressCheck:
    """Send a routing check to the address (at most ``CHECKS_PER_HOUR`` an hour)."""
    require_owner(by, address.merchant_id, "check support addresses")
    with transaction.atomic():
        locked = SupportAddress.objects.select_for_update().get(pk=address.pk)
        return _check(locked, by)


def _check(address: SupportAddress, by: Any) -> AddressCheck:
    since = timezone.now() - dt.timedelta(hours=1)
    if AddressCheck.objects.filter(address=address, sent_at__gte=since).count() >= CHECKS_PER_HOUR:
        raise AddressRefused(
            f"{address.address} was checked {CHECKS_PER_HOUR} times in the last hour:"
            " wait for those to come back, or try again later."
        )
    token = secrets.token_urlsafe(32)
    check = AddressCheck.objects.create(address=address, token_hash=check_digest(token))
    Notification.objects.create(
        merchant_id=address.merchant_id,
        address_check=check,
        event=NotificationEvent.ADDRESS_CHECK,
        transport=Transport.EMAIL,
        recipient=address.address,
        subject=f"Deskhand routing check for {address.address}"[:200],
        body=(
            f"This message checks that mail to {address.address} reaches Deskhand. If your"
            " mail server routes it, Deskhand receives it back and marks the address as"
            " working; it never becomes a ticket.\n\n"
            "{secret}\n"
        ),
        payload={"secret": f"{CHECK_PREFIX}{token}"},
        next_attempt_at=timezone.now(),
    )
    audit_record(
        merchant_id=address.merchant_id,
        actor=by,
        action="address.check_sent",
        channel=Channel.WEB,
        detail={"address": address.address, "check": check.pk},
    )
    return check


def check_state(check: AddressCheck | None, now: dt.datetime) -> str:
    """What the page says of an address's last check."""
    if check is None:
        return "never checked"
    if check.returned_at is not None:
        return f"came back {check.returned_at:%Y-%m-%d %H:%M}"
    if now - check.sent_at > CHECK_PATIENCE:
        return (
            f"sent {check.sent_at:%Y-%m-%d %H:%M} and not back after"
            f" {int(CHECK_PATIENCE.total_seconds() // 60)} minutes: check the mail server's route"
        )
    return f"sent {check.sent_at:%Y-%m-%d %H:%M}, waiting for it to come back"
