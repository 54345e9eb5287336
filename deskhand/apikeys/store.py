"""An ``Idempotency-Key``'s first answer, kept for its retries (24 hours).

The claim is a committed row before the write runs: of five identical requests sent at
once, one inserts it and runs; the others find it (unique per key and idempotency key),
wait for its answer and return it. A request with the same idempotency key and another
body is refused (422), and one that finds the first still running after the wait gets a
409 to retry later (draft-ietf-httpapi-idempotency-key-header).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import time
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from deskhand.apikeys.models import ApiKey, StoredResponse

KEEP = dt.timedelta(hours=24)
KEY_MAX = 255


def fingerprint(method: str, path: str, body: bytes) -> str:
    h = hashlib.sha256()
    for part in (method.encode(), path.encode(), body):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


@dataclasses.dataclass(frozen=True)
class Claim:
    row: StoredResponse
    mine: bool  # this request inserted it and must answer it


class OtherBody(Exception):
    """The idempotency key was first used with another request."""


class StillRunning(Exception):
    """The first request with this idempotency key has not answered yet."""


def response_claim(
    *, key: ApiKey, idempotency_key: str, print_: str, wait_seconds: float = 10.0
) -> Claim:
    """Claim ``idempotency_key`` for this request, or find the answer a first one gave."""
    now = timezone.now()
    StoredResponse.objects.filter(api_key=key, expires_at__lte=now).delete()
    try:
        with transaction.atomic():
            row = StoredResponse.objects.create(
                api_key=key,
                idempotency_key=idempotency_key,
                fingerprint=print_,
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
                key=key, idempotency_key=idempotency_key, print_=print_, wait_seconds=0
            )
        if found.fingerprint != print_:
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
