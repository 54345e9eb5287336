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

INBOUND_WORKFLOW = "deskhand.inbound"
"""A stored inbound message processed: threaded, then its customer's line routed. Its id is
``inbound_workflow_id(row pk)``."""

CUSTOMER_LINE_WORKFLOW = "deskhand.customer_line"
"""A customer's line that came in another way (the API, a help desk) routed: a waiting run
woken or an automatic run opened. Its id is ``line_workflow_id(line pk)``."""

PAYMENT_EVENT_WORKFLOW = "deskhand.payment_event"
"""A stored payment-provider webhook event processed (a Stripe refund's news compared with
the ledger). Its id is ``payment_event_workflow_id(row pk)``."""

SHOPIFY_WEBHOOK_WORKFLOW = "deskhand.shopify_webhook"
"""A stored Shopify webhook processed (an order's mirror moved forwards, a customer erased).
Its id is ``shopify_webhook_workflow_id(row pk)``."""

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
"""Staff notes, sent as messages carrying only the note id. Runs of 0.2.0 on read notes
from their table; the messages are still sent for a run of an older version that a draining
worker of its own version finishes on the older turns (docs/deploys.md)."""

LIMITED_TOPIC = "limited-reply"
"""A limited call's child sends its output on ``<topic>:<child workflow id>``."""


def approval_topic(approval_id: uuid.UUID | str) -> str:
    """The topic a run waits on for this approval's decision."""
    return f"approval:{approval_id}"


def customer_topic(ticket_id: int | str) -> str:
    """The topic a run that asked the customer waits on for the ticket's next message."""
    return f"customer:{ticket_id}"


def inbound_workflow_id(inbound_id: int, attempt: int = 0) -> str:
    """The intake workflow of stored message ``inbound_id``: one per row, so a second
    enqueue (a re-delivery, the sweep) is the same workflow. ``attempt`` > 0 is a re-drive
    of a row whose workflow ended without processing it (``agent.customer.intake``)."""
    return f"inbound-{inbound_id}" + (f"-r{attempt}" if attempt else "")


def line_workflow_id(line_id: int, attempt: int = 0) -> str:
    """The routing workflow of customer line ``line_id`` (see ``inbound_workflow_id``)."""
    return f"line-{line_id}" + (f"-r{attempt}" if attempt else "")


def shopify_webhook_workflow_id(webhook_id: int) -> str:
    """The workflow of stored Shopify webhook ``webhook_id``: one per row (a redelivery is the
    same row, so the same workflow)."""
    return f"shopify-webhook-{webhook_id}"


def payment_event_workflow_id(event_id: int) -> str:
    """The workflow of stored payment event ``event_id``: one per row, so a redelivery or a
    second enqueue is the same workflow."""
    return f"payment-event-{event_id}"


def limited_reply_topic(child_workflow_id: str) -> str:
    return f"{LIMITED_TOPIC}:{child_workflow_id}"


# --- queues --------------------------------------------------------------------------------------


def model_queue_name(provider: str) -> str:
    """The queue a rate-limited provider's model calls wait on (the runs queue is the
    ``DESKHAND_QUEUE`` setting, ``deskhand-runs``)."""
    return f"model-{provider}"


INTAKE_QUEUE = "deskhand-intake"
"""Where stored messages and customer lines wait for a worker: unpartitioned, its own so a
burst of mail never waits behind runs (and runs never behind a burst)."""

QUEUE_CHANNEL = "deskhand_queue"
"""The Postgres channel workers LISTEN on: a NOTIFY starts their queue poll at once."""
