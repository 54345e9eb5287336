"""Moving runs parked under an old application version onto the running one (docs/deploys.md).

After a deploy, runs parked under version N wait for a worker of version N: DBOS
recovers and dequeues only its own version. Either leave an N worker running until
they drain (it takes them over from the slots that moved on, ``deskhand.engine.takeover``),
or move them with ``manage.py move_runs --from N``: each run's workflow goes back on
its queue at the new version, keeping its id, its history, its pending approval and any
decision already sent; a worker of the new version replays it from its checkpoints and
it waits (or goes on) exactly where it was. That replay is safe because every change to
the step sequence ships behind ``DBOS.patch`` (``rt.patch``), which
``tests/durability/test_upgrade.py`` holds every release to.
"""

from __future__ import annotations

from django.conf import settings
from django.db import transaction

from agent.models import Run
from agent.ops.health import health_report
from agent.run.services import RunRefused
from deskhand.engine.workarounds.version_move import move_workflows_to_version
from deskhand.infra import events


def runs_move_version(
    *, from_version: str, to_version: str | None = None, run_ids: list[str] | None = None
) -> list[str]:
    """Move the open runs of ``from_version`` to ``to_version`` (default: this code's); their ids.

    Refused (``RunRefused``, one sentence) while a live worker still serves
    ``from_version`` — it may be executing them — or when the two versions are the same.
    """
    to_version = to_version or settings.DESKHAND_APP_VERSION
    if from_version == to_version:
        raise RunRefused(f"the runs are already on version {to_version}.")
    serving = sorted(
        w.executor_id for w in health_report().workers if w.alive and w.app_version == from_version
    )
    if serving:
        raise RunRefused(
            f"version {from_version} is still served by {', '.join(serving)}: stop "
            + ("it" if len(serving) == 1 else "them")
            + " first (or let the runs drain there), then move what is left."
        )
    with transaction.atomic():
        moved = move_workflows_to_version(from_version, to_version, run_ids)
        Run.objects.filter(pk__in=moved).update(application_version=to_version)
    events.emit("runs.moved", from_version=from_version, to_version=to_version, runs=len(moved))
    return moved
