"""Support addresses' routing checks, the part intake needs: recognise a check coming back.

A check is a message Deskhand sends to a support address with ``deskhand-check-<token>`` in
its text; the merchant's mail server routes it back into intake if the address is set up.
``routing_check_returned`` matches the token (only its sha256 is stored) against the checks
of the address the message came to, marks the check returned and the address verified, and
tells intake to keep the message off every thread. The owner's side — adding addresses,
starting checks, their rate limit and audit — is ``approvals.support_addresses``.
"""

from __future__ import annotations

import hashlib
import re

from django.utils import timezone

from deskhand.domain.desk.models import AddressCheck, SupportAddress

CHECK_PREFIX = "deskhand-check-"
_CHECK = re.compile(re.escape(CHECK_PREFIX) + r"([A-Za-z0-9_-]{43})")


def check_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def routing_check_returned(address: SupportAddress, text: str) -> AddressCheck | None:
    """The check this message carries back to ``address`` (now returned), or None."""
    found = _CHECK.search(text or "")
    if found is None:
        return None
    check = (
        AddressCheck.objects.select_for_update()
        .filter(address=address, token_hash=check_digest(found.group(1)))
        .first()
    )
    if check is None:
        return None
    now = timezone.now()
    if check.returned_at is None:
        check.returned_at = now
        check.save(update_fields=["returned_at"])
    if address.verified_at is None:
        address.verified_at = now
        address.save(update_fields=["verified_at"])
    return check
