"""The client side of DBOS: everything web, CLI and the reconciler say to it.

Web and CLI processes never launch an executor: they enqueue, cancel, fork and send
through a ``DBOSClient`` on the Django database, and ask DBOS's tables the questions the
reconciler and health need. This is DBOS's lower half (``deskhand.infra.dbos``): apps
(``agent``, ``approvals``) import it; it imports no app and not the engine above it,
which runs workflows in a worker (``deskhand.engine``) and shares the URL rules here.

Over 400 lines on purpose: every question asked of DBOS's tables from outside a worker
(health, the reconciler, forks made with DBOS's own tools) is here, so an upgrade of
``dbos`` that changes its schema is checked against one file.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
import yaml
from django.conf import settings
from django.db import connections

from deskhand.infra.dbos.names import (
    CUSTOMER_LINE_WORKFLOW,
    INBOUND_WORKFLOW,
    INTAKE_QUEUE,
    PAYMENT_EVENT_WORKFLOW,
    QUEUE_CHANNEL,
    RUN_WORKFLOW,
    SHOPIFY_WEBHOOK_WORKFLOW,
    STEER_TOPIC,
    approval_topic,
    customer_topic,
    inbound_workflow_id,
    line_workflow_id,
    payment_event_workflow_id,
    shopify_webhook_workflow_id,
)

if TYPE_CHECKING:
    from dbos import DBOSClient

CONFIG_FILE = Path(settings.BASE_DIR) / "dbos-config.yaml"

# DBOS workflow states in which a workflow can still execute steps.
ACTIVE_WORKFLOW_STATES = ("PENDING", "ENQUEUED")
# DBOS's own queue: recovery of unqueued workflows, and where `dbos workflow fork` and
# `dbos workflow resume` put a workflow (dbos._utils.INTERNAL_QUEUE_NAME, pinned by a test).
DBOS_INTERNAL_QUEUE = "_dbos_internal_queue"


class DBOSSetupError(RuntimeError):
    pass


# --- where DBOS lives -------------------------------------------------------------


def app_name() -> str:
    data = yaml.safe_load(CONFIG_FILE.read_text())
    return str(data["name"])


def database_url(alias: str = "default") -> str:
    """A SQLAlchemy URL for the Django database (read at call time: tests switch to test_*).

    The connection options Django passes to libpq (``OPTIONS``, filled from the query of
    ``DATABASE_URL``: sslmode, connect_timeout, application_name, options,
    target_session_attrs, …) travel in the URL's query, so DBOS connects as Django does;
    only ``application_name`` is DBOS's own on its pools (``dbos_transact``, ``…_client``).
    """
    # Keys of OPTIONS that Django consumes itself and never hands to libpq.
    django_only = {
        "assume_role",
        "context",
        "cursor_factory",
        "isolation_level",
        "pool",
        "prepare_threshold",
        "server_side_binding",
    }
    sd = connections[alias].settings_dict
    query: dict[str, str | tuple[str, ...]] = {}
    for key, value in (sd.get("OPTIONS") or {}).items():
        if key in django_only or value is None:
            continue
        values = value if isinstance(value, list | tuple) else [value]
        # dj_database_url turns "true"/"5" into True/5; libpq wants the text back.
        texts = tuple(str(v).lower() if isinstance(v, bool) else str(v) for v in values)
        query[key] = texts[0] if len(texts) == 1 else texts
    host = sd.get("HOST") or ""
    url_host: str | None = host or None
    if host.startswith("/"):
        query["host"] = host
        url_host = None
    url = sa.URL.create(
        "postgresql+psycopg",
        username=sd.get("USER") or None,
        password=sd.get("PASSWORD") or None,
        host=url_host,
        port=int(sd["PORT"]) if sd.get("PORT") else None,
        database=sd["NAME"],
        query=query,
    )
    return url.render_as_string(hide_password=False)


def check_system_database(url: str, alias: str = "default") -> None:
    """Refuse to run unless DBOS's system database is the Django database.

    Connects with ``url`` and through Django, and compares what each connection is
    connected to: the database, the server's port and start time and, when the role may
    read it, the cluster's system identifier. Django connects first, which also starts
    the embedded Postgres when DBOS is the first in a process to need it (the worker).
    """
    if not url.startswith("postgresql"):
        raise DBOSSetupError(
            f"DBOS system database must be the Django Postgres database, not {url!r}"
        )
    identity = (
        "SELECT current_database(), current_setting('port'), pg_postmaster_start_time(),"
        " has_function_privilege('pg_control_system()', 'EXECUTE')"
    )
    cluster = "SELECT system_identifier FROM pg_control_system()"

    with connections[alias].cursor() as cur:
        cur.execute(identity)
        django_db, django_port, django_started, readable = cur.fetchone()
        django_cluster = None
        if readable:
            cur.execute(cluster)
            django_cluster = cur.fetchone()[0]

    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.connect() as conn:
            dbos_db, dbos_port, dbos_started, readable = conn.execute(sa.text(identity)).one()
            dbos_cluster = conn.execute(sa.text(cluster)).scalar() if readable else None
    except sa.exc.DBAPIError as exc:
        raise DBOSSetupError(
            f"DBOS cannot connect to its system database: {exc.orig or exc}"
        ) from exc
    finally:
        engine.dispose()

    same_server = (dbos_port, dbos_started) == (django_port, django_started) and (
        dbos_cluster is None or django_cluster is None or dbos_cluster == django_cluster
    )
    if dbos_db != django_db or not same_server:
        raise DBOSSetupError(
            f"DBOS's system database (database {dbos_db!r} on the server on port {dbos_port},"
            f" up since {dbos_started:%Y-%m-%d %H:%M:%S}) is not the database Django uses"
            f" (database {django_db!r} on port {django_port}, up since"
            f" {django_started:%Y-%m-%d %H:%M:%S}): DBOS must keep its tables in the"
            " Django database."
        )


# --- the client -------------------------------------------------------------------

_client_lock = threading.Lock()
_clients: dict[str, DBOSClient] = {}


def client() -> DBOSClient:
    """The DBOS client for web and CLI processes: enqueue, send, cancel; never execute."""
    # Imported here: loading DBOS (about a second) is for processes that talk to it.
    from dbos import DBOSClient, DBOSPortableJSONSerializer

    url = database_url()
    with _client_lock:
        if url not in _clients:
            check_system_database(url)  # once per client: it opens a connection each way
            _clients[url] = DBOSClient(
                system_database_url=url,
                serializer=DBOSPortableJSONSerializer(),
                application_name=app_name(),
                system_database_pool_size=4,
            )
        return _clients[url]


def close_clients() -> None:
    """Release client connections (tests must, or the test database cannot be dropped)."""
    with _client_lock:
        for c in _clients.values():
            c.destroy()
        _clients.clear()


# --- what Deskhand asks of DBOS ---------------------------------------------------


@dataclass(frozen=True)
class WorkflowState:
    """What DBOS says about one workflow."""

    workflow_id: str
    status: str
    error: str | None

    @property
    def active(self) -> bool:
        """Whether the workflow may still run a step (and so still act)."""
        return self.status in ACTIVE_WORKFLOW_STATES


def notify_queue() -> None:
    """Tell the workers there is work on the queue (never fails the caller: polling remains)."""
    try:
        with connections["default"].cursor() as cur:
            cur.execute("SELECT pg_notify(%s, '')", [QUEUE_CHANNEL])
    except Exception:
        pass


def enqueue_run(*, run_id: str, partition_key: str) -> None:
    """Queue the run's workflow; the run id is the workflow id, the merchant the partition."""
    client().enqueue(
        {
            "workflow_name": RUN_WORKFLOW,
            "queue_name": settings.DESKHAND_QUEUE,
            "workflow_id": run_id,
            "queue_partition_key": partition_key,
            "app_version": settings.DESKHAND_APP_VERSION,
        }
    )
    notify_queue()


SWEEP_USER = "deskhand.intake-sweep"
"""Recorded as the ``authenticated_user`` of an intake workflow the sweep enqueued: health
counts the re-drives by it (DBOS keeps it with the workflow)."""


def _enqueue_intake(workflow_name: str, workflow_id: str, pk: int, by_sweep: bool) -> None:
    options: Any = {
        "workflow_name": workflow_name,
        "queue_name": INTAKE_QUEUE,
        "workflow_id": workflow_id,
        "app_version": settings.DESKHAND_APP_VERSION,
    }
    if by_sweep:
        options["authenticated_user"] = SWEEP_USER
    client().enqueue(options, pk)
    notify_queue()


def enqueue_inbound(inbound_id: int, attempt: int = 0, *, by_sweep: bool = False) -> None:
    """Queue the intake workflow of a stored message (the same id twice is one workflow)."""
    _enqueue_intake(
        INBOUND_WORKFLOW, inbound_workflow_id(inbound_id, attempt), inbound_id, by_sweep
    )


def enqueue_line(line_id: int, attempt: int = 0, *, by_sweep: bool = False) -> None:
    """Queue the routing workflow of a customer's line (the same id twice is one workflow)."""
    _enqueue_intake(CUSTOMER_LINE_WORKFLOW, line_workflow_id(line_id, attempt), line_id, by_sweep)


def enqueue_payment_event(event_id: int) -> None:
    """Queue the workflow of a stored payment event (the same id twice is one workflow)."""
    _enqueue_intake(
        PAYMENT_EVENT_WORKFLOW, payment_event_workflow_id(event_id), event_id, by_sweep=False
    )


def enqueue_shopify_webhook(webhook_id: int) -> None:
    """Queue the workflow of a stored Shopify webhook (the same id twice is one workflow)."""
    _enqueue_intake(
        SHOPIFY_WEBHOOK_WORKFLOW,
        shopify_webhook_workflow_id(webhook_id),
        webhook_id,
        by_sweep=False,
    )


def intake_redriven_since(since: dt.datetime) -> int:
    """Intake workflows the sweep enqueued since ``since`` (each one a hand-on that was lost)."""
    with connections["default"].cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM dbos.workflow_status WHERE name = ANY(%s)"
            " AND authenticated_user = %s AND created_at >= %s",
            [
                [INBOUND_WORKFLOW, CUSTOMER_LINE_WORKFLOW],
                SWEEP_USER,
                int(since.timestamp() * 1000),
            ],
        )
        return int(cur.fetchone()[0])


def fork_run_workflow(
    *, source_run_id: str, start_step: int, fork_run_id: str, partition_key: str
) -> None:
    """Fork ``source_run_id``'s workflow from DBOS step ``start_step`` as ``fork_run_id``."""
    from dbos import SetWorkflowID

    with SetWorkflowID(fork_run_id):
        client().fork_workflow(
            source_run_id,
            start_step,
            application_version=settings.DESKHAND_APP_VERSION,
            queue_name=settings.DESKHAND_QUEUE,
            queue_partition_key=partition_key,
        )
    notify_queue()


def cancel_run_workflow(run_id: str) -> WorkflowState | None:
    """Cancel the run's workflow and return what DBOS then says about it (``None``: it never existed).

    DBOS's cancel is a no-op for a workflow that is already finished or absent,
    so the state read back afterwards is the confirmation: a workflow that is
    not ``active`` can no longer act. Raises whatever the client raises.
    """
    # Children too: a model call still waiting for its rate limit (engine.workflow) is not made.
    client().cancel_workflow(run_id, cancel_children=True)
    return workflow_states([run_id]).get(run_id)


def workflow_state(workflow_id: str) -> WorkflowState | None:
    """What DBOS says about one workflow right now (``None``: it does not exist).

    Read straight from DBOS's own table through the Django connection, so a caller holding
    row locks in a transaction asks without a second connection: what a person's decision
    is checked against, because an operator may have cancelled the workflow with DBOS's
    own tools a moment ago and our run row does not know it yet.
    """
    with connections["default"].cursor() as cur:
        cur.execute(
            "SELECT status, error FROM dbos.workflow_status WHERE workflow_uuid = %s",
            [workflow_id],
        )
        row = cur.fetchone()
    return None if row is None else WorkflowState(workflow_id, str(row[0]), _error_text(row[1]))


def workflow_states(run_ids: list[str]) -> dict[str, WorkflowState]:
    """DBOS's view of these workflows, by id (absent ids never existed)."""
    out: dict[str, WorkflowState] = {}
    for i in range(0, len(run_ids), 500):
        chunk = run_ids[i : i + 500]
        for wf in client().list_workflows(workflow_ids=chunk, load_input=False, load_output=False):
            error = None if wf.error is None else str(wf.error)
            out[wf.workflow_id] = WorkflowState(wf.workflow_id, str(wf.status), error)
    return out


# The reconciler's questions, each one query joining a run table with DBOS's own
# ``workflow_status`` (both live in this database). Asked every few seconds with thousands
# of runs parked, they must cost what the answer costs, not what the parked runs cost:
# listing every open run's workflow through the client was O(parked) Python each pass
# (docs/scaling.md, "Idle cost").
# A run's id is a UUID; a workflow id may be any text (``dbos workflow fork -f <id>``).
_AS_RUN_ID = (
    "CASE WHEN w.workflow_uuid ~ '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
    "[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$' THEN w.workflow_uuid::uuid END"
)


TROUBLED_WORKFLOW_STATES = ("ERROR", "MAX_RECOVERY_ATTEMPTS_EXCEEDED", "CANCELLED", "SUCCESS")


def troubled_run_workflows(*, run_table: str, run_statuses: list[str]) -> dict[str, WorkflowState]:
    """Runs in ``run_statuses`` whose workflow DBOS records as failed, out of recovery
    attempts, cancelled or ended, by run id (a run closes itself before its workflow ends,
    so an open run's workflow never ends on its own)."""
    with connections["default"].cursor() as cur:
        cur.execute(
            f'SELECT w.workflow_uuid, w.status, w.error FROM "{run_table}" r'
            " JOIN dbos.workflow_status w ON w.workflow_uuid = r.id::text"
            " WHERE r.status = ANY(%s) AND w.status = ANY(%s)",
            [run_statuses, list(TROUBLED_WORKFLOW_STATES)],
        )
        return {
            wf_id: WorkflowState(wf_id, status, _error_text(error))
            for wf_id, status, error in cur.fetchall()
        }


def runs_without_workflow(*, run_table: str, status: str, created_before: dt.datetime) -> list[str]:
    """Runs in ``status`` created before ``created_before`` that have no workflow at all."""
    with connections["default"].cursor() as cur:
        cur.execute(
            f'SELECT r.id::text FROM "{run_table}" r WHERE r.status = %s AND r.created_at < %s'
            " AND NOT EXISTS (SELECT 1 FROM dbos.workflow_status w"
            " WHERE w.workflow_uuid = r.id::text)",
            [status, created_before],
        )
        return [r[0] for r in cur.fetchall()]


def intake_workflow_states(base_ids: list[str]) -> dict[str, list[str]]:
    """Each intake workflow id's statuses: its own, then its re-drives' (``<id>-r<n>``), in order.

    An id with no workflow at all is absent. Asked only of rows the sweep found waiting, so
    the re-drives' prefix match runs over a handful of ids, never over DBOS's whole table.
    """
    if not base_ids:
        return {}
    out: dict[str, list[str]] = {}
    with connections["default"].cursor() as cur:
        cur.execute(
            "SELECT workflow_uuid, status FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s)",
            [base_ids],
        )
        for wid, status in cur.fetchall():
            out[wid] = [status]
        ended = [w for w, (status,) in out.items() if status not in ACTIVE_WORKFLOW_STATES]
        if ended:
            cur.execute(
                "SELECT workflow_uuid, status FROM dbos.workflow_status"
                " WHERE workflow_uuid LIKE ANY(%s) ORDER BY created_at",
                [[f"{w}-r%" for w in ended]],
            )
            for wid, status in cur.fetchall():
                out.setdefault(wid.rsplit("-r", 1)[0], []).append(status)
    return out


def runs_with_active_workflow(
    *,
    run_table: str,
    statuses: list[str],
    finished_before: dt.datetime | None = None,
    resumed_only: bool = False,
) -> dict[str, WorkflowState]:
    """Runs in ``statuses`` (closed ones) whose run workflow DBOS holds as able to act, by run
    id. With ``finished_before``, only runs closed before it (a run's own last step closes it
    a moment before DBOS records its workflow's end); with ``resumed_only``, only workflows
    on DBOS's internal queue (where ``dbos workflow resume`` puts one; recovery after a crash
    leaves a run's workflow on its own queue). Through DBOS's in-flight index."""
    with connections["default"].cursor() as cur:
        cur.execute(
            f'SELECT w.workflow_uuid, w.status FROM dbos.workflow_status w JOIN "{run_table}" r'
            f" ON r.id = {_AS_RUN_ID}"
            " WHERE w.name = %s AND w.status = ANY(%s) AND r.status = ANY(%s)"
            " AND (%s::timestamptz IS NULL OR r.finished_at < %s::timestamptz)"
            " AND (NOT %s OR w.queue_name = %s)",
            [
                RUN_WORKFLOW,
                list(ACTIVE_WORKFLOW_STATES),
                statuses,
                finished_before,
                finished_before,
                resumed_only,
                DBOS_INTERNAL_QUEUE,
            ],
        )
        return {wid: WorkflowState(wid, status, None) for wid, status in cur.fetchall()}


def runs_whose_workflow_ended_later(
    *,
    run_table: str,
    statuses: list[str],
    since: dt.datetime,
    finding_table: str,
    finding_kind: str,
) -> dict[str, WorkflowState]:
    """Closed runs whose workflow DBOS ran again after the run was closed and that has ended
    since ``since``, with no finding of ``finding_kind`` yet, by run id.

    "Ran again": dequeued from DBOS's internal queue after the run closed — where ``dbos
    workflow resume`` puts a workflow (DBOS records the dequeue in ``started_at_epoch_ms``);
    a run's own queue is ``DESKHAND_QUEUE``, which recovery after a crash keeps. Through
    DBOS's index on ``completed_at``: only recent endings are read.
    """
    with connections["default"].cursor() as cur:
        cur.execute(
            "SELECT w.workflow_uuid, w.status, w.error FROM dbos.workflow_status w"
            f' JOIN "{run_table}" r ON r.id = {_AS_RUN_ID}'
            " WHERE w.completed_at >= %s AND w.name = %s AND r.status = ANY(%s)"
            " AND w.status <> ALL(%s) AND w.queue_name = %s"
            " AND w.started_at_epoch_ms > extract(epoch FROM r.finished_at) * 1000"
            f' AND NOT EXISTS (SELECT 1 FROM "{finding_table}" f'
            " WHERE f.workflow_id = w.workflow_uuid AND f.kind = %s)",
            [
                int(since.timestamp() * 1000),
                RUN_WORKFLOW,
                statuses,
                list(ACTIVE_WORKFLOW_STATES),
                DBOS_INTERNAL_QUEUE,
                finding_kind,
            ],
        )
        return {
            wid: WorkflowState(wid, status, _error_text(error))
            for wid, status, error in cur.fetchall()
        }


def workflow_output(workflow_id: str) -> Any:
    """What the workflow returned, as DBOS recorded it (``None`` if nothing or unreadable)."""
    found = client().list_workflows(workflow_ids=[workflow_id], load_input=False)
    return found[0].output if found else None


@dataclass(frozen=True)
class WorkflowOrigin:
    """Where a workflow came from, as DBOS records it: what a run workflow with no run is."""

    workflow_id: str
    name: str
    status: str
    error: str | None
    forked_from: str | None
    start_step: int
    """The first DBOS step the workflow runs itself. For a fork, one past the last checkpoint
    DBOS copied from the original (it copies every step before the fork's start step); DBOS
    records no start step of its own. Read before the fork runs a step of its own."""

    @property
    def active(self) -> bool:
        return self.status in ACTIVE_WORKFLOW_STATES


def workflow_origin(workflow_id: str) -> WorkflowOrigin | None:
    """What DBOS records of where this workflow came from (``None``: it does not exist)."""
    with connections["default"].cursor() as cur:
        cur.execute(
            "SELECT w.name, w.status, w.error, w.forked_from,"
            " (SELECT coalesce(max(o.function_id), 0) FROM dbos.operation_outputs o"
            "  WHERE o.workflow_uuid = w.workflow_uuid)"
            " FROM dbos.workflow_status w WHERE w.workflow_uuid = %s",
            [workflow_id],
        )
        row = cur.fetchone()
    if row is None:
        return None
    name, status, error, forked_from, last_copied = row
    return WorkflowOrigin(
        workflow_id, str(name), str(status), _error_text(error), forked_from, int(last_copied) + 1
    )


def forks_without_run(*, run_table: str, finding_table: str) -> list[WorkflowOrigin]:
    """Run workflows forked with DBOS's own tools that are no run's and nobody has reported yet.

    A fork Deskhand makes (``replay --fork-from``) has its run before DBOS has the fork;
    one made with ``dbos workflow fork`` or a client has none until Deskhand adopts it.
    Through DBOS's partial index on ``forked_from`` and the runs' primary key: forks are few.
    """
    with connections["default"].cursor() as cur:
        cur.execute(
            "SELECT w.workflow_uuid FROM dbos.workflow_status w"
            " WHERE w.forked_from IS NOT NULL AND w.name = %s"
            f' AND NOT EXISTS (SELECT 1 FROM "{run_table}" r WHERE r.id = {_AS_RUN_ID})'
            f' AND NOT EXISTS (SELECT 1 FROM "{finding_table}" f'
            " WHERE f.workflow_id = w.workflow_uuid)"
            " ORDER BY w.created_at LIMIT 500",
            [RUN_WORKFLOW],
        )
        ids = [r[0] for r in cur.fetchall()]
    origins = (workflow_origin(wid) for wid in ids)
    return [o for o in origins if o is not None]


def _error_text(raw: str | None) -> str | None:
    """DBOS stores a workflow's error serialized; the reconciler wants a readable line."""
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return raw
    if isinstance(data, dict):
        return str(data.get("message") or data.get("name") or raw)
    return str(data)


def workflow_steps(run_id: str) -> list[dict[str, Any]]:
    """The run workflow's checkpointed steps (``function_id``, ``function_name``, times), in order."""
    return [dict(s) for s in client().list_workflow_steps(run_id, load_output=False)]


def delete_finished_workflows(run_ids: list[str]) -> list[str]:
    """Delete these workflows' whole DBOS history (status, inputs, outputs, checkpoints,
    messages, events, streams), their child workflows' with it; return the ids deleted.

    Only finished ones: a workflow DBOS still holds as able to act is left alone (deleting
    it would strand a live run), and so is an id DBOS does not know.
    """
    states = workflow_states(run_ids)
    done = [wid for wid, state in states.items() if not state.active]
    for i in range(0, len(done), 500):
        # Children too: a rate-limited model call's workflow holds the conversation it sent.
        client().delete_workflows(done[i : i + 500], delete_children=True)
    return done


def delete_workflow_history(
    names: list[str], finished_before: dt.datetime, limit: int = 5000
) -> int:
    """Delete finished workflows of these names (e.g. the scheduled sweeps' firings) that
    completed before ``finished_before``; return how many."""
    ids = [
        wf.workflow_id
        for wf in client().list_workflows(
            name=names,
            status=["SUCCESS", "ERROR", "CANCELLED", "MAX_RECOVERY_ATTEMPTS_EXCEEDED"],
            completed_before=finished_before.isoformat(),
            load_input=False,
            load_output=False,
            limit=limit,
        )
    ]
    if ids:
        client().delete_workflows(ids)
    return len(ids)


def send_decision(*, run_id: str, approval_id: str, decision: str) -> None:
    """Wake the run waiting on this approval; keyed by the approval, so delivered once."""
    client().send(
        run_id,
        {"approval_id": approval_id, "decision": decision},
        approval_topic(approval_id),
        idempotency_key=f"decision:{approval_id}",
    )


def send_customer_message(*, run_id: str, ticket_id: int, key: str) -> None:
    """Wake the run waiting on this ticket's customer; keyed (a stored message's pk, or a
    passed window), so one message wakes it once however often it is sent."""
    client().send(run_id, {"wake": key}, customer_topic(ticket_id), idempotency_key=key)


def send_note(*, run_id: str, note_id: int) -> None:
    """Hand a staff note's id to the run; keyed by the note, so delivered once."""
    client().send(run_id, {"note_id": note_id}, STEER_TOPIC, idempotency_key=f"note:{note_id}")


def migrate_system_schema(alias: str = "default") -> None:
    """Create or upgrade DBOS's schema in the Django database (from a Django migration)."""
    from dbos import DBOS

    url = database_url(alias)
    check_system_database(url, alias)
    DBOS.migrate(url)
