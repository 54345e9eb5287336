"""A brake on password guessing that every web process shares: failures live in Postgres.

Keyed on the user name (as typed, lower-cased) and the client address. Ten
failures for one pair within ``DESKHAND_LOGIN_COOLOFF_SECONDS`` (15 minutes)
lock that pair for the same span, counted from the failure that reached the
limit: every sign-in attempt for it is then answered 429 before a password is
checked, by the console's login and the admin's alike, in whichever process.
The lock ends by itself (a cool-off, not a permanent lock), so nobody can lock
an approver out for good; other names from the same address are unaffected.

The client address is ``REMOTE_ADDR``, unless that is one of
``DESKHAND_TRUSTED_PROXIES``: then it is the right-most ``X-Forwarded-For``
hop that is not itself a trusted proxy. Without a trusted proxy the header is
ignored, so a client cannot pick its own address.
"""

from __future__ import annotations

import datetime as dt
import functools
import ipaddress
import math
import re
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.signals import user_login_failed
from django.core.exceptions import ImproperlyConfigured
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.utils import timezone

from deskhand.edge.models import LoginFailure
from deskhand.edge.pages import refused

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def limit() -> int:
    return int(settings.DESKHAND_LOGIN_FAILURE_LIMIT)


def cooloff() -> dt.timedelta:
    return dt.timedelta(seconds=int(settings.DESKHAND_LOGIN_COOLOFF_SECONDS))


@functools.cache
def _trusted(spec: tuple[str, ...]) -> tuple[Network, ...]:
    try:
        return tuple(ipaddress.ip_network(s, strict=False) for s in spec)
    except ValueError as exc:
        raise ImproperlyConfigured(f"DESKHAND_TRUSTED_PROXIES: {exc}") from None


def trusted_proxies() -> tuple[Network, ...]:
    return _trusted(tuple(settings.DESKHAND_TRUSTED_PROXIES))


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


def _is_trusted(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None, nets: tuple[Network, ...]
) -> bool:
    return ip is not None and any(ip in net for net in nets)


def client_address(request: HttpRequest) -> str:
    """Who is asking: ``REMOTE_ADDR``, or the forwarded client when a trusted proxy says so."""
    remote = str(request.META.get("REMOTE_ADDR", ""))[:64]
    nets = trusted_proxies()
    if not nets or not _is_trusted(_ip(remote), nets):
        return remote
    hops = [h for h in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",") if h.strip()]
    for hop in reversed(hops):
        ip = _ip(hop)
        if ip is None:  # the proxy passed on something that is not an address: stop trusting
            return remote
        if not _is_trusted(ip, nets):
            return str(ip)
    first = _ip(hops[0]) if hops else None
    return str(first) if first is not None else remote


def normalise_username(value: Any) -> str:
    return _CONTROL.sub("", str(value or "")).strip().lower()[:254]


def _pair(request: HttpRequest, username: Any) -> tuple[str, str]:
    return normalise_username(username), client_address(request)


def locked_until(request: HttpRequest, username: Any) -> dt.datetime | None:
    """When the lock on this name from this address ends, or None if there is none."""
    who, address = _pair(request, username)
    lock = (
        LoginFailure.objects.filter(username=who, address=address, locks_until__gt=timezone.now())
        .order_by("-locks_until")
        .values_list("locks_until", flat=True)
        .first()
    )
    return lock


def record_failure(request: HttpRequest, username: Any) -> None:
    """Count one failure; the one that reaches the limit within the window sets the lock."""
    who, address = _pair(request, username)
    now = timezone.now()
    window_start = now - cooloff()
    LoginFailure.objects.filter(
        Q(locks_until__isnull=True) | Q(locks_until__lt=now), at__lt=window_start
    ).delete()
    failure = LoginFailure.objects.create(username=who, address=address, at=now)
    recent = LoginFailure.objects.filter(username=who, address=address, at__gt=window_start)
    if recent.count() >= limit():
        LoginFailure.objects.filter(pk=failure.pk).update(locks_until=now + cooloff())


def _on_login_failed(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    if request is not None:
        record_failure(request, credentials.get("username", ""))


def connect_signals() -> None:
    user_login_failed.connect(_on_login_failed, dispatch_uid="deskhand.edge.login_failed")


def too_many(request: HttpRequest, until: dt.datetime) -> HttpResponse:
    minutes = max(1, math.ceil((until - timezone.now()).total_seconds() / 60))
    response = refused(
        request,
        429,
        "Too many failed sign-in attempts for this account from this address; "
        f"try again in {minutes} minute{'s' if minutes != 1 else ''}.",
    )
    response["Retry-After"] = str(max(1, math.ceil((until - timezone.now()).total_seconds())))
    return response


ViewFunc = Callable[..., HttpResponseBase]


def throttled(view: ViewFunc) -> ViewFunc:
    """Refuse a sign-in POST with 429 while its name and address are locked."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "POST":
            until = locked_until(request, request.POST.get("username", ""))
            if until is not None:
                return too_many(request, until)
        return view(request, *args, **kwargs)

    return wrapper
