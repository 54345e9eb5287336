"""The sweep that proves the way in: nothing stored is left unprocessed, no line unrouted.

The receiving process stores a message, commits, and only then enqueues its intake
workflow; a customer's line that came through the API or a help desk is enqueued for
routing once committed. A process that dies between the commit and the enqueue leaves a
row ``received`` or a line ``pending`` that nothing would ever touch. On each reconciler
pass this finds them, older than ``DESKHAND_INTAKE_GRACE_SEC``, and re-drives them
through the same workflows:

- no workflow under the row's (line's) id: enqueued under that id (the same id twice is
  one workflow, so racing the original enqueue is harmless);
- the workflow is still queued or running: nothing (a worker has it, or will take it over);
- the workflow ended and the row is still waiting (its steps failed through every retry,
  say while the database was away): a re-drive under a new id, ``<id>-r<n>``, at most
  ``MAX_REDRIVES`` times; after that it is *stuck*, logged as an error and counted in
  ``manage.py health``, for a person.

Every step those workflows run is idempotent under a row lock, so a re-drive never adds a
second line or a second run.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils import timezone

from deskhand.domain.desk.models import Routing, TicketMessage
from deskhand.domain.mail.models import InboundEmail, InboundStatus
from deskhand.infra.dbos import client as dbos_client
from deskhand.infra.dbos.names import inbound_workflow_id, line_workflow_id

log = logging.getLogger(__name__)

MAX_REDRIVES = 3
BATCH = 500


def _cutoff(now: dt.datetime) -> dt.datetime:
    return now - dt.timedelta(seconds=settings.DESKHAND_INTAKE_GRACE_SEC)


def waiting_inbound(now: dt.datetime) -> list[int]:
    """Stored messages not processed within the grace period, oldest first."""
    rows = InboundEmail.objects.filter(
        status=InboundStatus.RECEIVED, received_at__lt=_cutoff(now), merchant__isnull=False
    ).order_by("received_at", "pk")
    return list(rows.values_list("pk", flat=True)[:BATCH])


def waiting_lines(now: dt.datetime) -> list[int]:
    """Customer lines not routed within the grace period, oldest first."""
    lines = TicketMessage.objects.filter(
        routing=Routing.PENDING, created_at__lt=_cutoff(now)
    ).order_by("created_at", "pk")
    return list(lines.values_list("pk", flat=True)[:BATCH])


def _redrive(
    what: str,
    waiting: list[int],
    workflow_id: Callable[..., str],
    enqueue: Callable[..., None],
) -> tuple[int, int]:
    """(re-driven, stuck) for these waiting pks (see the module)."""
    states = dbos_client.intake_workflow_states([workflow_id(pk) for pk in waiting])
    redriven = stuck = 0
    for pk in waiting:
        seen = states.get(workflow_id(pk), [])
        if seen and seen[-1] in dbos_client.ACTIVE_WORKFLOW_STATES:
            continue
        attempt = len(seen)  # 0: never enqueued; n: n workflows ended without doing it
        if attempt > MAX_REDRIVES:
            stuck += 1
            log.error(
                "%s %s is still waiting after %d workflows ended (last %s); a person must look",
                what,
                pk,
                attempt,
                seen[-1],
            )
            continue
        try:
            enqueue(pk, attempt, by_sweep=True)
        except Exception:
            log.exception("re-driving %s %s failed; the next pass tries again", what, pk)
            continue
        redriven += 1
        log.warning(
            "%s %s was still waiting %ss after it was stored: re-driven as %s",
            what,
            pk,
            settings.DESKHAND_INTAKE_GRACE_SEC,
            workflow_id(pk, attempt),
        )
    return redriven, stuck


def intake_sweep(now: dt.datetime | None = None) -> dict[str, int]:
    """Re-drive what the way in left waiting; how many of each, and how many are stuck."""
    now = now or timezone.now()
    inbound, inbound_stuck = _redrive(
        "inbound message", waiting_inbound(now), inbound_workflow_id, dbos_client.enqueue_inbound
    )
    lines, lines_stuck = _redrive(
        "customer line", waiting_lines(now), line_workflow_id, dbos_client.enqueue_line
    )
    return {
        "inbound_redriven": inbound,
        "lines_redriven": lines,
        "intake_stuck": inbound_stuck + lines_stuck,
    }


def intake_summary(now: dt.datetime) -> dict[str, Any]:
    """For ``manage.py health``: what waits past the grace period, re-drives in the last day,
    and what is stuck. Reads only."""
    inbound = waiting_inbound(now)
    lines = waiting_lines(now)
    oldest = [
        t
        for t in (
            InboundEmail.objects.filter(pk__in=inbound[:1])
            .values_list("received_at", flat=True)
            .first(),
            TicketMessage.objects.filter(pk__in=lines[:1])
            .values_list("created_at", flat=True)
            .first(),
        )
        if t is not None
    ]
    states = dbos_client.intake_workflow_states(
        [inbound_workflow_id(pk) for pk in inbound] + [line_workflow_id(pk) for pk in lines]
    )
    stuck = sum(
        1
        for seen in states.values()
        if len(seen) > MAX_REDRIVES and seen[-1] not in dbos_client.ACTIVE_WORKFLOW_STATES
    )
    return {
        "inbound_waiting": len(inbound),
        "lines_waiting": len(lines),
        "oldest_waiting_s": round((now - min(oldest)).total_seconds(), 1) if oldest else None,
        "redriven_24h": dbos_client.intake_redriven_since(now - dt.timedelta(days=1)),
        "stuck": stuck,
    }
