"""Secrets kept in the database, sealed with keys that live only in the environment.

A merchant's credentials for another system (a Shopify access token, a webhook secret) must
be read back to be used, so they are encrypted, not hashed: Fernet (AES-128-CBC with an
HMAC-SHA256, from ``cryptography``) under ``MultiFernet``, which seals with the first key and
opens with any. Rotation is therefore two steps that never lock anyone out: put a new key
first in ``DESKHAND_SECRET_KEYS`` (the old ones after it) and deploy, then run
``manage.py rotate_secrets`` to reseal every stored secret under the new key; after that the
old key can be dropped.

``DESKHAND_SECRET_KEYS`` holds comma-separated Fernet keys (``Fernet.generate_key()``, 44
url-safe base64 characters). Unset, settings derive one key, the url-safe base64 of
sha256(``"deskhand-sealing-key:"`` + a secret generated once under the checkout's local data
folder, ``.deskhand/sealing_key``, as ``SECRET_KEY`` is): fine for the demo and the tests,
never for a deployment, which must set the variable.

A sealed value is bytes of text; what it seals never appears in a repr, a log or a page.
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings


class SealBroken(ValueError):
    """A sealed value no configured key opens (a key dropped too soon, or tampering)."""


def _keyring() -> MultiFernet:
    keys = [k.strip() for k in str(settings.DESKHAND_SECRET_KEYS).split(",") if k.strip()]
    if not keys:
        raise SealBroken("No sealing key: set DESKHAND_SECRET_KEYS (Fernet.generate_key()).")
    try:
        return MultiFernet([Fernet(k.encode()) for k in keys])
    except ValueError:
        raise SealBroken(
            "The sealing keys in DESKHAND_SECRET_KEYS must be Fernet keys (44 url-safe base64 "
            "characters each), comma-separated."
        ) from None


def seal(plain: str) -> str:
    """``plain`` encrypted under the first key, as text for a column."""
    return _keyring().encrypt(plain.encode()).decode()


def unseal(sealed: str) -> str:
    try:
        return _keyring().decrypt(sealed.encode()).decode()
    except InvalidToken:
        raise SealBroken("A stored secret could not be opened with any configured key.") from None


def reseal(sealed: str) -> str:
    """The same secret sealed under the first key (``MultiFernet.rotate``)."""
    try:
        return _keyring().rotate(sealed.encode()).decode()
    except InvalidToken:
        raise SealBroken("A stored secret could not be opened with any configured key.") from None
