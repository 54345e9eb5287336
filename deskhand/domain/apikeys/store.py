"""An ``Idempotency-Key``'s first answer, kept for its retries (24 hours).

The claim is a committed row before the write runs: of five identical requests sent at
once, one inserts it and runs; the others find it (unique per key and idempotency key),
wait for its answer and return it. A request with the same idempotency key and another
body is refused (422), and one that finds the first still running after the wait gets a
409 to retry later (draft-ietf-httpapi-idempotency-key-header).

"The same body" is the same JSON: a retry whose client wrote the body again with other
whitespace or key order is the same request. The fingerprint hashes the canonical JSON
(sorted keys, no whitespace); rows kept from before hashed the raw bytes, so a retry
matches either (``fingerprints``) until they expire.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import re
import time
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from deskhand.domain.apikeys.models import ApiKey, StoredResponse

KEEP = dt.timedelta(hours=24)
KEY_MAX = 255
# Visible ASCII, spaces inside only (a header's own spaces at either end are not kept), 1 to
# KEY_MAX long: a UUID, a ULID, base64 all fit. The OpenAPI document declares this pattern.
KEY_PATTERN = rf"^[!-~](?:[ -~]{{0,{KEY_MAX - 2}}}[!-~])?$"
_KEY = re.compile(KEY_PATTERN)


def key_valid(idempotency_key: str) -> bool:
    return _KEY.match(idempotency_key) is not None


def fingerprint(method: str, path: str, body: bytes) -> str:
    h = hashlib.sha256()
    for part in (method.encode(), path.encode(), body):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def canonical(body: bytes) -> bytes:
    """The body as canonical JSON (sorted keys, no whitespace), or as it came if not JSON."""
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return body
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def fingerprints(method: str, path: str, body: bytes) -> tuple[str, str]:
    """This request's fingerprint (of the canonical JSON), then the one of its raw bytes that
    rows kept before the canonical one was stored with."""
    return fingerprint(method, path, canonical(body)), fingerprint(method, path, body)


@dataclasses.dataclass(frozen=True)
class Claim:
    row: StoredResponse
    mine: bool  # this request inserted it and must answer it


class OtherBody(Exception):
    """The idempotency key was first used with another request."""


class StillRunning(Exception):
    """The first request with this idempotency key has not answered yet."""


def response_claim(
    *, key: ApiKey, idempotency_key: str, prints: tuple[str, str], wait_seconds: float = 10.0
) -> Claim:
    """Claim ``idempotency_key`` for this request, or find the answer a first one gave.

    ``prints`` are ``fingerprints(...)``: the first is stored, either matches a kept row."""
    now = timezone.now()
    StoredResponse.objects.filter(api_key=key, expires_at__lte=now).delete()
    try:
        with transaction.atomic():
            row = StoredResponse.objects.create(
                api_key=key,
                idempotency_key=idempotency_key,
                fingerprint=prints[0],
                expires_at=now + KEEP,
            )
        return Claim(row, mine=True)
    except IntegrityError:
        pass
    deadline = time.monotonic() + wait_seconds
    while True:
        found = StoredResponse.objects.filter(api_key=key, idempotency_key=idempotency_key).first()
        if found is None:  # the first request failed and let go of it: take it over
            return response_claim(
                key=key, idempotency_key=idempotency_key, prints=prints, wait_seconds=0
            )
        if found.fingerprint not in prints:
            raise OtherBody
        if found.status_code is not None:
            return Claim(found, mine=False)
        if time.monotonic() >= deadline:
            raise StillRunning
        time.sleep(0.1)


def response_record(
    claim: Claim, *, status: int, body: Any, customer_id: int | None = None
) -> None:
    StoredResponse.objects.filter(pk=claim.row.pk).update(
        status_code=status, body=body, customer_id=customer_id
    )


def response_release(claim: Claim) -> None:
    """Let go of a claim whose request failed on our side, so a retry runs it afresh."""
    StoredResponse.objects.filter(pk=claim.row.pk, status_code__isnull=True).delete()
