"""Keys: create (the token shown once), revoke, authenticate, count a request.

A token is ``dh_<prefix>_<secret>``: the prefix (8 hex characters) finds the row and is
shown in lists and the audit; the whole token's sha256 proves it. A token has 192 bits
of randomness, so a plain hash suffices (a slow password hash guards guessable secrets).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import hmac
import math
import secrets
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from deskhand.domain.apikeys.models import ApiKey, Scope
from deskhand.domain.desk.models import Merchant
from deskhand.domain.desk.permissions import require_owner

TOKEN_PREFIX = "dh_"
NAME_MAX = 80


class KeyRefused(Exception):
    """A key could not be created or revoked; the message says why."""


def digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


def _person(user: Any) -> str:
    return str(getattr(user, "email", "") or user.get_username())


def key_create(
    *, merchant: Merchant, user: Any, name: str, scopes: Sequence[str]
) -> tuple[ApiKey, str]:
    """A new key for ``merchant`` (owners only); returns the row and the token, shown once."""
    require_owner(user, merchant, "manage API keys")
    name = " ".join(str(name).split())
    if not name:
        raise KeyRefused("a key needs a name, so its uses can be told apart in the audit trail.")
    if len(name) > NAME_MAX:
        raise KeyRefused(f"a key's name is at most {NAME_MAX} characters.")
    wanted = sorted(set(scopes))
    unknown = [s for s in wanted if s not in Scope.values]
    if unknown:
        raise KeyRefused(
            f"{unknown[0]!r} is not a scope; choose from {', '.join(Scope.values)}."[:200]
        )
    if not wanted:
        raise KeyRefused(f"a key needs at least one scope ({', '.join(Scope.values)}).")
    prefix = secrets.token_hex(4)
    token = f"{TOKEN_PREFIX}{prefix}_{secrets.token_urlsafe(24)}"
    key = ApiKey.objects.create(
        merchant=merchant,
        name=name,
        prefix=prefix,
        digest=digest(token),
        scopes=wanted,
        created_by=user,
        created_by_name=_person(user),
    )
    return key, token


def key_revoke(*, key: ApiKey, user: Any) -> ApiKey:
    """Revoke ``key`` at once (owners only); a revoked key is refused on its next request."""
    require_owner(user, key.merchant_id, "manage API keys")
    with transaction.atomic():
        locked = ApiKey.objects.select_for_update().get(pk=key.pk)
        if locked.revoked_at is not None:
            raise KeyRefused(f"key {locked.label} was already revoked.")
        locked.revoked_at = timezone.now()
        locked.revoked_by_name = _person(user)
        locked.save(update_fields=["revoked_at", "revoked_by_name"])
    return locked


def key_authenticate(token: str) -> ApiKey | None:
    """The active key this token proves, or None (unknown, malformed or revoked)."""
    token = token.strip()
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    prefix, _, rest = token.removeprefix(TOKEN_PREFIX).partition("_")
    if not rest or len(prefix) != 8:
        return None
    key = (
        ApiKey.objects.filter(prefix=prefix, revoked_at__isnull=True)
        .select_related("merchant", "created_by")
        .first()
    )
    if key is None or not hmac.compare_digest(key.digest, digest(token)):
        return None
    return key


@dataclasses.dataclass(frozen=True)
class Window:
    limit: int
    remaining: int
    reset_seconds: int

    @property
    def exceeded(self) -> bool:
        return self.remaining < 0


def rate_limit() -> tuple[int, int]:
    """(requests, seconds) one key may make per window."""
    return int(settings.DESKHAND_API_KEY_LIMIT), int(settings.DESKHAND_API_KEY_LIMIT_PERIOD_SEC)


def key_count_request(key: ApiKey) -> Window:
    """Count one request in the key's fixed window (and stamp its last use), in one statement.

    The counter lives on the key's row in Postgres, so every web process counts into the
    same window; a request over the limit is counted too, and refused by the caller.
    """
    limit, period = rate_limit()
    table = ApiKey._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {table} SET
              window_count = CASE WHEN window_start > now() - make_interval(secs => %s)
                                  THEN window_count + 1 ELSE 1 END,
              window_start = CASE WHEN window_start > now() - make_interval(secs => %s)
                                  THEN window_start ELSE now() END,
              last_used_at = now()
            WHERE id = %s
            RETURNING window_count, window_start
            """,
            [period, period, key.pk],
        )
        row = cursor.fetchone()
    if row is None:
        return Window(limit, limit, period)
    count, start = row
    left = (start + dt.timedelta(seconds=period) - timezone.now()).total_seconds()
    return Window(limit, limit - count, max(1, math.ceil(left)))
