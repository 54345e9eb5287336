"""Every name Deskhand gives DBOS to keep: workflows, schedules, message topics, queues.

DBOS stores these with each workflow and checkpoint, and a worker on the next release
finds a parked run by them: a workflow it cannot name, a message on a topic nobody waits
on, is a run that never finishes. They are compatibility data, named here once and pinned
by ``tests/integrity/test_persisted_names.py``; renaming one needs ``DBOS.patch`` or a new
application version (docs/deploys.md). The names of a run's own steps are the loop's and
live beside it (``agent.runtime.StepName``).

Pure constants: importing this module never imports DBOS.
"""

from __future__ import annotations

import uuid

# --- workflows ------------------------------------------------------------------------------

RUN_WORKFLOW = "deskhand.run"
"""The durable run (its id is the run id)."""

LIMITED_CALL_WORKFLOW = "deskhand.limited_call"
"""A run's rate-limited model call: a child workflow on its provider's queue."""

ESCALATION_WORKFLOW = "approvals.escalation_sweep"
RECONCILIATION_WORKFLOW = "effects.reconciliation"
RETENTION_WORKFLOW = "privacy.retention_sweep"
SCHEDULED_WORKFLOWS = (ESCALATION_WORKFLOW, RECONCILIATION_WORKFLOW, RETENTION_WORKFLOW)
"""Every scheduled workflow a worker registers (their firings' history is trimmed)."""

# --- schedules ------------------------------------------------------------------------------

ESCALATION_SCHEDULE = "approvals-escalation"
RECONCILIATION_SCHEDULE = "effects-reconciliation"
RETENTION_SCHEDULE = "privacy-retention"

# --- message topics ----------------------------------------------------------------------------

STEER_TOPIC = "steer"
"""Staff notes for runs recorded before notes were read from their table (messages carry
only the note id); still sent, so such a run drains them."""

LIMITED_TOPIC = "limited-reply"
"""A limited call's child sends its output on ``<topic>:<child workflow id>``."""


def approval_topic(approval_id: uuid.UUID | str) -> str:
    """The topic a run waits on for this approval's decision."""
    return f"approval:{approval_id}"


def customer_topic(ticket_id: int | str) -> str:
    """The topic a run that asked the customer waits on for the ticket's next message."""
    return f"customer:{ticket_id}"


def limited_reply_topic(child_workflow_id: str) -> str:
    return f"{LIMITED_TOPIC}:{child_workflow_id}"


# --- queues --------------------------------------------------------------------------------------


def model_queue_name(provider: str) -> str:
    """The queue a rate-limited provider's model calls wait on (the runs queue is the
    ``DESKHAND_QUEUE`` setting, ``deskhand-runs``)."""
    return f"model-{provider}"


QUEUE_CHANNEL = "deskhand_queue"
"""The Postgres channel workers LISTEN on: a NOTIFY starts their queue poll at once."""
