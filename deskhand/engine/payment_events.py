"""The durable way in for a payment provider's webhook: a stored event processed on a worker.

``deskhand.payment_event`` (id ``payment-event-<row pk>``): one step, ``payments.event``,
compares what Stripe said about a refund with the ledger
(``agent.ledger.provider_events.payment_event_process``: under the row's lock, once). It
waits on the ``deskhand-intake`` queue, enqueued by the web view once the row is committed;
an event whose enqueue was lost is processed by its merchant's next reconciliation pass.
The step retries like intake's (a database that blinked), and is idempotent: a processed
row answers what it concluded.
"""

from __future__ import annotations

from dbos import DBOS
from django.db import close_old_connections

from agent.ledger.provider_events import payment_event_process
from deskhand.infra.dbos.names import PAYMENT_EVENT_WORKFLOW
from deskhand.infra.fleet.lease import guard
from deskhand.infra.retry import INTAKE_STEP, dbos_step

EVENT_STEP = "payments.event"


@DBOS.step(name=EVENT_STEP, **dbos_step(INTAKE_STEP))
def event_step(event_id: int) -> str:
    guard()
    close_old_connections()
    try:
        return payment_event_process(event_id)
    finally:
        close_old_connections()


@DBOS.workflow(name=PAYMENT_EVENT_WORKFLOW, max_recovery_attempts=10_000)
def payment_event_workflow(event_id: int) -> str:
    """Process stored payment event ``event_id``."""
    return event_step(event_id)
