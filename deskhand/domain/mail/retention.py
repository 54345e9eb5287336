"""How long inbound mail is kept as it arrived.

The thread keeps a message's text for as long as the ticket lives (until erasure). The
raw bytes are kept ``DESKHAND_INBOUND_RAW_RETENTION_DAYS`` (30) after arrival, for a
person checking what exactly came in (headers, a rendering the text lost); then they
are dropped and the row keeps its facts: size, SHA-256, verdicts, status and reason, and
the keyed Message-ID hash that makes a late re-delivery a duplicate. A message no
merchant owned is deleted whole after as long. Attachments stay with the thread.
A row still waiting to be processed is never touched. The worker's daily retention
workflow (``privacy.retention_sweep``, ``agent.privacy.retention``) calls it.
"""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.utils import timezone

from deskhand.domain.mail.models import InboundEmail, InboundStatus


def inbound_prune(*, now: dt.datetime | None = None) -> dict[str, int]:
    """Drop what has been kept long enough; return how many rows were emptied or deleted."""
    cutoff = (now or timezone.now()) - dt.timedelta(
        days=settings.DESKHAND_INBOUND_RAW_RETENTION_DAYS
    )
    old = InboundEmail.objects.filter(received_at__lt=cutoff).exclude(status=InboundStatus.RECEIVED)
    deleted, _ = old.filter(merchant__isnull=True).delete()
    emptied = old.filter(merchant__isnull=False, raw_size__gt=0).exclude(raw=b"").update(raw=b"")
    return {"deleted": deleted, "emptied": emptied}
