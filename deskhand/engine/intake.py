"""The durable way in: a stored message processed, a customer's line routed, on a worker.

- ``deskhand.inbound`` (id ``inbound-<row pk>``): step ``mail.process`` threads the stored
  message (``deskhand.domain.mail.process.inbound_process``: believe or hold it, thread it, one
  transaction under the row's lock), then step ``customer.route`` routes the customer's
  line it added (``agent.customer.route.customer_line_route``: wake the waiting run or open
  one, the outcome written on the line).
- ``deskhand.customer_line`` (id ``line-<line pk>``): step ``customer.route`` alone, for a
  line that came in through the API or a help desk.

While one runs, this worker's queues poll at least once a second
(``queues_kicked_while_waiting``): a slot it frees is taken at once by the next message of
a burst, not at the next fallback poll (``DESKHAND_QUEUE_POLL_SEC``, 5 s). Both wait on the
``deskhand-intake`` queue, enqueued by the receiving process once the row
is committed (``deskhand.domain.mail.intake``, ``agent.customer.route.on_customer_wrote``), and
by the sweep for anything whose enqueue was lost (``agent.customer.intake``). Every step
is idempotent under a row lock, and DBOS resumes a workflow at the step that did not
finish: a crash anywhere loses nothing and does nothing twice. The steps retry (a database
that blinked): a message must not be left unprocessed by one failed query.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dbos import DBOS
from django.db import close_old_connections

from agent.customer.route import customer_line_route
from deskhand.domain.mail.process import inbound_process
from deskhand.engine.queues import queues_kicked_while_waiting
from deskhand.infra import crashpoints
from deskhand.infra.crashpoints import Point
from deskhand.infra.dbos.names import CUSTOMER_LINE_WORKFLOW, INBOUND_WORKFLOW
from deskhand.infra.fleet.lease import guard
from deskhand.infra.retry import INTAKE_STEP, dbos_step

PROCESS_STEP = "mail.process"
ROUTE_STEP = "customer.route"


def _body[R](name: str, fn: Callable[[], R]) -> R:
    # Like a run's steps (engine.workflow): nothing runs while this worker cannot prove it
    # owns its executor id, and a crash point on each side of the step's own commit.
    guard()
    close_old_connections()
    try:
        crashpoints.at(Point.BEFORE_STEP, name)
        result = fn()
        crashpoints.at(Point.AFTER_STEP, name)
        return result
    finally:
        close_old_connections()


@DBOS.step(name=PROCESS_STEP, **dbos_step(INTAKE_STEP))
def process_step(inbound_id: int) -> dict[str, Any]:
    def work() -> dict[str, Any]:
        row = inbound_process(inbound_id)
        if row is None:
            return {"status": "gone", "line": None}
        return {"status": row.status, "line": row.thread_message_id}

    return _body(PROCESS_STEP, work)


@DBOS.step(name=ROUTE_STEP, **dbos_step(INTAKE_STEP))
def route_step(line_id: int) -> dict[str, Any]:
    return _body(ROUTE_STEP, lambda: customer_line_route(line_id).as_dict())


@DBOS.workflow(name=INBOUND_WORKFLOW, max_recovery_attempts=10_000)
def inbound_workflow(inbound_id: int) -> dict[str, Any]:
    """Process stored message ``inbound_id``, then route the customer's line it added."""
    with queues_kicked_while_waiting():
        processed = process_step(inbound_id)
        line = processed["line"]
        routed = route_step(int(line)) if line is not None else None
    return {"processed": processed, "routed": routed}


@DBOS.workflow(name=CUSTOMER_LINE_WORKFLOW, max_recovery_attempts=10_000)
def customer_line_workflow(line_id: int) -> dict[str, Any]:
    """Route customer line ``line_id`` (one that came in another way than mail)."""
    with queues_kicked_while_waiting():
        return route_step(line_id)
