"""Is this webhook from Shopify? The signature check, as a pure function.

Shopify signs each delivery with the app's client secret: ``X-Shopify-Hmac-Sha256`` is the
base64 of HMAC-SHA256 over the *raw* request body. So the check runs on the bytes as they
arrived (a body parsed and re-serialised would not match), compares in constant time
(``hmac.compare_digest``, so the time taken says nothing about how much matched), and answers
False for a missing or malformed header rather than raising: the web view turns False into a
401 with nothing stored.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac


def shopify_webhook_verified(secret: str, body: bytes, header: str | None) -> bool:
    """Whether ``header`` (``X-Shopify-Hmac-Sha256``) signs ``body`` under ``secret``."""
    if not secret or not header:
        return False
    try:
        given = base64.b64decode(header.strip(), validate=True)
    except (binascii.Error, ValueError):
        return False
    expected = hmac.new(secret.encode(), body, hashlib.sha256).digest()
    return hmac.compare_digest(given, expected)
