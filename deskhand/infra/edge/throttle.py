"""A brake on password guessing that every web process shares: failures live in Postgres.

Two caps, both counted over ``DESKHAND_LOGIN_COOLOFF_SECONDS`` (15 minutes):

* **per user name and client address** (``DESKHAND_LOGIN_FAILURE_LIMIT``, 10): the
  failure that reaches it locks that pair for the cool-off; other names from the
  same address, and the same name from elsewhere, are unaffected;
* **per user name, over every address** (``DESKHAND_LOGIN_NAME_FAILURE_LIMIT``, 30):
  the failure that reaches it locks the name for the cool-off from everywhere, so
  a guesser who spreads attempts over many addresses (a botnet, or forged
  ``X-Forwarded-For`` headers had they been believed) gets 30 guesses per window
  at one account, not 10 per address.

While a lock runs, every sign-in attempt it covers is answered 429 before a
password is checked, by the console's login and the admin's alike, in whichever
process. A lock ends by itself (a cool-off, not a permanent lock): the price of the
name cap is that anyone may keep an account locked by failing 30 times a window;
the account's owner is told so in the 429's sentence, and nothing else is shared.

The client address is ``REMOTE_ADDR``, unless that is one of
``DESKHAND_TRUSTED_PROXIES``: then it is the right-most ``X-Forwarded-For``
hop that is not itself a trusted proxy. Without a trusted proxy the header is
ignored, so a client cannot pick its own address. The web process must not
rewrite ``REMOTE_ADDR`` from the header on its own authority either: ``manage.py
web`` (``deskhand/infra/edge/web.py``) configures uvicorn's proxy handling from the
same setting.

Why not django-axes: its lock-out parameters can name the pair and the name
(``[["username", "ip_address"], "username"]``), but one failure limit applies to
every parameter, so the per-name cap could only equal the per-pair cap (each
address would then get nothing the name cap had not already given) or a custom
handler would re-implement this module inside axes. It would also read the
client address through its own proxy settings (django-ipware), a second place to
configure trust, and log every success by default (docs/operations.md).
"""

from __future__ import annotations

import dataclasses
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

from deskhand.infra.edge.models import LoginFailure
from deskhand.infra.edge.pages import refused

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def limit() -> int:
    return int(settings.DESKHAND_LOGIN_FAILURE_LIMIT)


def name_limit() -> int:
    return int(settings.DESKHAND_LOGIN_NAME_FAILURE_LIMIT)


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


@dataclasses.dataclass(frozen=True)
class Lock:
    until: dt.datetime
    whole_name: bool  # locked from every address, not only this one


def locked_until(request: HttpRequest, username: Any) -> Lock | None:
    """The lock that refuses this name from this address now (the longer one), or None."""
    who, address = _pair(request, username)
    now = timezone.now()
    pair = (
        LoginFailure.objects.filter(username=who, address=address, locks_until__gt=now)
        .order_by("-locks_until")
        .values_list("locks_until", flat=True)
        .first()
    )
    name = (
        LoginFailure.objects.filter(username=who, locks_name_until__gt=now)
        .order_by("-locks_name_until")
        .values_list("locks_name_until", flat=True)
        .first()
    )
    if name is not None and (pair is None or name >= pair):
        return Lock(name, whole_name=True)
    return Lock(pair, whole_name=False) if pair is not None else None


def record_failure(request: HttpRequest, username: Any) -> None:
    """Count one failure; the one that reaches a limit within the window sets that lock."""
    who, address = _pair(request, username)
    now = timezone.now()
    window_start = now - cooloff()
    LoginFailure.objects.filter(
        Q(locks_until__isnull=True) | Q(locks_until__lt=now),
        Q(locks_name_until__isnull=True) | Q(locks_name_until__lt=now),
        at__lt=window_start,
    ).delete()
    failure = LoginFailure.objects.create(username=who, address=address, at=now)
    recent = LoginFailure.objects.filter(username=who, at__gt=window_start)
    locks: dict[str, dt.datetime] = {}
    if recent.filter(address=address).count() >= limit():
        locks["locks_until"] = now + cooloff()
    if recent.count() >= name_limit():
        locks["locks_name_until"] = now + cooloff()
    if locks:
        LoginFailure.objects.filter(pk=failure.pk).update(**locks)


def _on_login_failed(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    if request is not None:
        record_failure(request, credentials.get("username", ""))


def connect_signals() -> None:
    user_login_failed.connect(_on_login_failed, dispatch_uid="deskhand.infra.edge.login_failed")


def too_many(request: HttpRequest, lock: Lock) -> HttpResponse:
    seconds = max(1, math.ceil((lock.until - timezone.now()).total_seconds()))
    minutes = max(1, math.ceil(seconds / 60))
    when = f"try again in {minutes} minute{'s' if minutes != 1 else ''}."
    if lock.whole_name:
        message = (
            "Too many failed sign-in attempts for this account, from several addresses; "
            f"it is locked from everywhere for now: {when}"
        )
    else:
        message = f"Too many failed sign-in attempts for this account from this address; {when}"
    response = refused(request, 429, message)
    response["Retry-After"] = str(seconds)
    return response


ViewFunc = Callable[..., HttpResponseBase]


def throttled(view: ViewFunc) -> ViewFunc:
    """Refuse a sign-in POST with 429 while its name and address are locked."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method == "POST":
            lock = locked_until(request, request.POST.get("username", ""))
            if lock is not None:
                return too_many(request, lock)
        return view(request, *args, **kwargs)

    return wrapper
