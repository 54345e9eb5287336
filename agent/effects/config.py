"""Where the adapters find the systems they talk to, and their credentials: the environment only.

Nothing here is ever stored in the database, written to a log line, a step row, an
approval or an error message. A merchant row says *which kind* of system its effects go
to (``Merchant.refund_adapter``, ``Merchant.mail_adapter``); the address and the secret
are read from the process environment when a call is made, so a worker picks up a
rotated key on its next call and the console can say whether one is configured without
ever holding it.

Payments (Stripe, through its SDK: ``agent.effects.payments``):

``DESKHAND_PAYMENTS_URL``
    The API's base address, handed to the SDK (``base_addresses``); unset, Stripe's own
    (``https://api.stripe.com``). ``http://127.0.0.1:…`` is the tests' and the demo's double.
``DESKHAND_PAYMENTS_API_KEY`` / ``DESKHAND_PAYMENTS_API_KEY_<SLUG>``
    The secret key; the per-merchant name (slug upper-cased, ``-`` as ``_``) wins.
``DESKHAND_PAYMENTS_KEY_WINDOW_SECONDS`` (86400)
    How long the provider keeps an idempotency key. A pending claim older than this, less
    ``DESKHAND_PAYMENTS_KEY_MARGIN_SECONDS`` (3600), is never re-sent: it is looked up.
``DESKHAND_PAYMENTS_TIMEOUT_SECONDS`` (10)
    One request's connect + read timeout.

``DESKHAND_STRIPE_WEBHOOK_SECRET_<SLUG>``
    The signing secret (``whsec_…``) of the merchant's Stripe webhook endpoint,
    ``/inbound/stripe/<slug>/``; one per merchant, and no shared fallback: a secret
    verifies only its own merchant's events. Unset: that endpoint answers 404.

Mail (SMTP through Django's email framework):

``DESKHAND_SMTP_HOST``, ``DESKHAND_SMTP_PORT`` (587), ``DESKHAND_SMTP_USER``,
``DESKHAND_SMTP_PASSWORD``, ``DESKHAND_SMTP_STARTTLS`` (``1``), ``DESKHAND_SMTP_SSL`` (``0``),
``DESKHAND_SMTP_TIMEOUT_SECONDS`` (10), ``DESKHAND_MAIL_FROM`` (``support@deskhand.invalid``;
its domain is the right-hand side of every ``Message-ID``).

Both: ``DESKHAND_EFFECT_BUDGET_SECONDS`` (20) and ``DESKHAND_EFFECT_ATTEMPTS`` (4) bound the
retries of one effect inside its step, all under the same key (``deskhand.infra.retry.EFFECT``).
"""

from __future__ import annotations

import dataclasses
import os
import re

from deskhand.infra.retry import EFFECT


class NotConfigured(Exception):
    """An adapter was chosen but the environment does not say how to reach its system."""


def _int(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    return int(value) if value else default


def _float(name: str, default: float) -> float:
    value = os.environ.get(name, "").strip()
    return float(value) if value else default


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or not value.strip():
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _slug_suffix(slug: str) -> str:
    return re.sub(r"[^A-Z0-9]", "_", slug.upper())


@dataclasses.dataclass(frozen=True)
class Budget:
    """What one effect may spend on retries inside its step (all under one key)."""

    attempts: int
    seconds: float


def budget() -> Budget:
    return Budget(
        attempts=max(1, _int("DESKHAND_EFFECT_ATTEMPTS", EFFECT.max_attempts)),
        seconds=max(0.0, _float("DESKHAND_EFFECT_BUDGET_SECONDS", EFFECT.budget_seconds)),
    )


@dataclasses.dataclass(frozen=True)
class PaymentsConfig:
    base_url: str
    api_key: str = dataclasses.field(repr=False)
    key_window_seconds: int
    key_margin_seconds: int
    timeout_seconds: float

    @property
    def resend_horizon_seconds(self) -> int:
        """How old a claim may be and still be re-sent under its key."""
        return max(0, self.key_window_seconds - self.key_margin_seconds)


def payments_key_names(slug: str) -> tuple[str, str]:
    """The environment variables a merchant's payments key is read from, most specific first."""
    return (f"DESKHAND_PAYMENTS_API_KEY_{_slug_suffix(slug)}", "DESKHAND_PAYMENTS_API_KEY")


STRIPE_URL = "https://api.stripe.com"


def payments_url() -> str:
    """Where refunds are made: ``DESKHAND_PAYMENTS_URL``, else Stripe's own address."""
    return os.environ.get("DESKHAND_PAYMENTS_URL", "").strip().rstrip("/") or STRIPE_URL


def payments(slug: str) -> PaymentsConfig:
    base = payments_url()
    key = next((os.environ[n] for n in payments_key_names(slug) if os.environ.get(n)), "")
    if not key:
        raise NotConfigured(
            f"the payments adapter is chosen for merchant {slug!r} but "
            "DESKHAND_PAYMENTS_API_KEY is not set in the environment"
        )
    if not re.match(r"^https?://[^/\s]+", base):
        raise NotConfigured("DESKHAND_PAYMENTS_URL must be an http(s) URL")
    return PaymentsConfig(
        base_url=base,
        api_key=key,
        key_window_seconds=_int("DESKHAND_PAYMENTS_KEY_WINDOW_SECONDS", 86_400),
        key_margin_seconds=_int("DESKHAND_PAYMENTS_KEY_MARGIN_SECONDS", 3_600),
        timeout_seconds=_float("DESKHAND_PAYMENTS_TIMEOUT_SECONDS", 10.0),
    )


def stripe_webhook_secret(slug: str) -> str:
    """The signing secret of ``slug``'s Stripe endpoint, or ``""`` when none is set."""
    return os.environ.get(f"DESKHAND_STRIPE_WEBHOOK_SECRET_{_slug_suffix(slug)}", "").strip()


@dataclasses.dataclass(frozen=True)
class SmtpConfig:
    host: str
    port: int
    username: str
    password: str = dataclasses.field(repr=False)
    starttls: bool
    ssl: bool
    timeout_seconds: float
    mail_from: str

    @property
    def domain(self) -> str:
        return self.mail_from.rpartition("@")[2] or "deskhand.invalid"


def smtp() -> SmtpConfig:
    host = os.environ.get("DESKHAND_SMTP_HOST", "").strip()
    if not host:
        raise NotConfigured(
            "the SMTP mail adapter is chosen but DESKHAND_SMTP_HOST is not set in the environment"
        )
    return SmtpConfig(
        host=host,
        port=_int("DESKHAND_SMTP_PORT", 587),
        username=os.environ.get("DESKHAND_SMTP_USER", ""),
        password=os.environ.get("DESKHAND_SMTP_PASSWORD", ""),
        starttls=_flag("DESKHAND_SMTP_STARTTLS", True),
        ssl=_flag("DESKHAND_SMTP_SSL", False),
        timeout_seconds=_float("DESKHAND_SMTP_TIMEOUT_SECONDS", 10.0),
        mail_from=os.environ.get("DESKHAND_MAIL_FROM", "").strip() or "support@deskhand.invalid",
    )


def secrets_in_use() -> list[str]:
    """Every credential the adapters could send, so text from outside can be scrubbed of them."""
    names = [
        n
        for n in os.environ
        if n.startswith(("DESKHAND_PAYMENTS_API_KEY", "DESKHAND_STRIPE_WEBHOOK_SECRET_"))
    ]
    names.append("DESKHAND_SMTP_PASSWORD")
    return [os.environ[n] for n in names if len(os.environ.get(n, "")) >= 4]


def redact(text: str) -> str:
    """``text`` with every configured credential (and anything shaped like a secret key) masked.

    Provider error messages are outside text: a provider may echo the key it was sent
    ("Invalid API Key provided: sk_…"). Whatever reaches a step row, a log line or a model
    passes through here first.
    """
    for secret in sorted(secrets_in_use(), key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    return re.sub(r"\b(sk|rk)_(live|test)_[A-Za-z0-9_*]+", r"\1_\2_[redacted]", text)
